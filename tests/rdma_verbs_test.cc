// The verbs backend beyond the shared contract: MR chunk splitting, selective
// signaling, inline writes, atomics, error mapping, dead peers, a pulled
// cable, reconnects, late registration, the handshake and the node's QP cap,
// per-peer devices, and ListRdmaDevices. Needs an RDMA device (label "verbs":
// run it in the Soft-RoCE VM, tools/vm/run.sh); skips loudly without one and
// fails under MESHPOOL_REQUIRE_VERBS=1.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"
#include "tests/verbs_test_util.h"
#include "tests/verbs_vm_util_linux.h"

namespace meshpool::rdma {
namespace {

constexpr size_t kNodeBytes = 4 << 20;
constexpr size_t kLocalBytes = 4 << 20;
constexpr uint64_t kSmallMr = 64 << 10;  // forces many MRs per region
constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr absl::string_view kNodeAddress = "verbs://node";

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MESHPOOL_SKIP_WITHOUT_VERBS();
    device_ = ::meshpool::testing::VerbsTestDevice();
    node_memory_ = std::make_unique<uint64_t[]>(kNodeBytes / 8);
    local_memory_ = std::make_unique<uint64_t[]>(kLocalBytes / 8);
  }

  VerbsOptions Options(std::string name, uint64_t max_mr_bytes = 0) {
    VerbsOptions options;
    options.devices = {device_};
    options.self_name = std::move(name);
    options.max_mr_bytes = max_mr_bytes;
    return options;
  }

  void StartNode(VerbsOptions options) {
    auto node = CreateVerbsTransport(std::move(options));
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    auto region = node_->RegisterMemory(node_memory_.get(), kNodeBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    node_region_ = *std::move(region);
    auto address = node_->Listen("ignored");
    ASSERT_TRUE(address.ok()) << address.status();
    EXPECT_EQ(*address, kNodeAddress);
  }

  void StartClient(VerbsOptions options) {
    auto client = CreateVerbsTransport(std::move(options));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto region = client_->RegisterMemory(local_memory_.get(), kLocalBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    local_region_ = *std::move(region);
  }

  void Start(uint64_t max_mr_bytes = 0) {
    ASSERT_NO_FATAL_FAILURE(StartNode(Options("node", max_mr_bytes)));
    ASSERT_NO_FATAL_FAILURE(StartClient(Options("client", max_mr_bytes)));
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> TryConnect() {
    return client_->Connect(
        kNodeAddress,
        [this](const std::string& request) -> absl::StatusOr<std::string> {
          if (node_ == nullptr) return absl::UnavailableError("node is gone");
          return node_->AcceptHandshake(request, DataAccess::Unrestricted());
        });
  }
  std::unique_ptr<Endpoint> Connect() {
    auto ep = TryConnect();
    EXPECT_TRUE(ep.ok()) << ep.status();
    return ep.ok() ? *std::move(ep) : nullptr;
  }

  uint8_t* node_bytes() {
    return reinterpret_cast<uint8_t*>(node_memory_.get());
  }
  uint8_t* local_bytes() {
    return reinterpret_cast<uint8_t*>(local_memory_.get());
  }
  uint64_t* node_word(uint64_t offset) {
    return reinterpret_cast<uint64_t*>(node_bytes() + offset);
  }

  WorkRequest Request(Opcode op, uint64_t id, uint64_t local_offset,
                      uint32_t length, uint64_t remote_offset) {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.local = local_bytes() + local_offset;
    wr.length = length;
    wr.lkey = local_region_->lkey();
    wr.remote_addr = node_region_->remote().addr + remote_offset;
    wr.rkey = node_region_->remote().rkey;
    return wr;
  }
  WorkRequest Atomic(Opcode op, uint64_t id, uint64_t local_offset,
                     uint64_t remote_offset, uint64_t compare_add,
                     uint64_t swap = 0) {
    WorkRequest wr = Request(op, id, local_offset, kAtomicBytes, remote_offset);
    wr.compare_add = compare_add;
    wr.swap = swap;
    return wr;
  }

  absl::Status Run(Endpoint& ep, const std::vector<WorkRequest>& batch) {
    completions_.assign(batch.size(), Completion{});
    return PostAndWait(ep, batch, absl::MakeSpan(completions_), kTimeout);
  }

  void Randomize(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng_());
  }

  std::string device_;
  std::mt19937_64 rng_{42};
  // Memory first: it outlives every registration of it.
  std::unique_ptr<uint64_t[]> node_memory_;
  std::unique_ptr<uint64_t[]> local_memory_;
  std::unique_ptr<Transport> node_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<MemoryRegion> node_region_;
  std::unique_ptr<MemoryRegion> local_region_;
  std::vector<Completion> completions_;
};

TEST_F(VerbsTest, TransfersCrossingManyMrBoundariesOnBothSidesRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(Start(kSmallMr));
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  // Unaligned offsets on both sides, so local and remote pieces differ.
  constexpr uint32_t kLength = 300000;  // ~5 MRs on each side
  constexpr uint64_t kSrc = 1000, kDst = 2000000, kRemote = 5003;
  Randomize(local_bytes() + kSrc, kLength);
  ASSERT_TRUE(
      Run(*ep, {Request(Opcode::kWrite, 1, kSrc, kLength, kRemote)}).ok());
  EXPECT_EQ(std::memcmp(node_bytes() + kRemote, local_bytes() + kSrc, kLength),
            0);
  ASSERT_TRUE(
      Run(*ep, {Request(Opcode::kRead, 2, kDst, kLength, kRemote)}).ok());
  EXPECT_EQ(std::memcmp(local_bytes() + kDst, local_bytes() + kSrc, kLength),
            0);
  // Words right at and right before an MR boundary, remote and local.
  *node_word(kSmallMr - 8) = 10;
  *node_word(kSmallMr) = 20;
  ASSERT_TRUE(
      Run(*ep, {Atomic(Opcode::kFetchAdd, 3, kSmallMr - 8, kSmallMr - 8, 1),
                Atomic(Opcode::kFetchAdd, 4, kSmallMr, kSmallMr, 2)})
          .ok());
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(local_bytes() + kSmallMr - 8), 10u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(local_bytes() + kSmallMr), 20u);
  EXPECT_EQ(*node_word(kSmallMr - 8), 11u);
  EXPECT_EQ(*node_word(kSmallMr), 22u);
  // A whole batch of boundary-crossing requests.
  std::vector<WorkRequest> batch;
  for (uint64_t i = 0; i < 32; ++i) {
    batch.push_back(Request(Opcode::kRead, i, 3000000 + i * 20000, 20000,
                            kSmallMr * (i + 1) - 10000));
  }
  ASSERT_TRUE(Run(*ep, batch).ok());
  for (uint64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(std::memcmp(local_bytes() + 3000000 + i * 20000,
                          node_bytes() + kSmallMr * (i + 1) - 10000, 20000),
              0)
        << i;
  }
}

// A region of 1 GiB and more registers as several MRs in parallel threads;
// transfers across their boundaries work.
TEST_F(VerbsTest, GibRegionRegistersAsParallelChunksAndTransfersAcrossThem) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr size_t kBig = (size_t{1} << 30) + (64 << 10);
  void* big = ::mmap(nullptr, kBig, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(big, MAP_FAILED);
  const absl::Time start = absl::Now();
  auto region = node_->RegisterMemory(big, kBig);
  std::cout << "registering 1 GiB took " << absl::Now() - start << std::endl;
  ASSERT_TRUE(region.ok()) << region.status();
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  // 256 MiB boundaries (absolute multiples) inside the region.
  const uint64_t base = reinterpret_cast<uint64_t>(big);
  const uint64_t boundary = (base / (256 << 20) + 1) * (256 << 20);
  Randomize(local_bytes(), 1 << 20);
  WorkRequest write = Request(Opcode::kWrite, 1, 0, 1 << 20, 0);
  write.remote_addr = boundary - 4096;
  write.rkey = (*region)->remote().rkey;
  WorkRequest read = write;
  read.wr_id = 2;
  read.opcode = Opcode::kRead;
  read.local = local_bytes() + (2 << 20);
  ASSERT_TRUE(Run(*ep, {write, read}).ok());
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(boundary - 4096), local_bytes(),
                        1 << 20),
            0);
  EXPECT_EQ(std::memcmp(local_bytes() + (2 << 20), local_bytes(), 1 << 20), 0);
  ep.reset();
  region->reset();
  ::munmap(big, kBig);
}

TEST_F(VerbsTest, SelectiveSignalingReportsOnlySignaledAndRetiresTheRest) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  Randomize(local_bytes(), kMaxBatch * 64);
  std::vector<WorkRequest> batch;
  std::vector<uint64_t> signaled;
  for (uint64_t i = 0; i < kMaxBatch; ++i) {
    batch.push_back(Request(Opcode::kWrite, i, i * 64, 64, i * 64));
    batch.back().signaled = i % 100 == 7;
    if (batch.back().signaled) signaled.push_back(i);
  }
  ASSERT_TRUE(ep->Post(batch).ok());
  std::vector<Completion> got(kMaxBatch);
  size_t n = 0;
  const absl::Time deadline = absl::Now() + kTimeout;
  while (n < signaled.size() && absl::Now() < deadline) {
    auto polled =
        ep->Poll(absl::MakeSpan(got).subspan(n), absl::Milliseconds(100));
    ASSERT_TRUE(polled.ok()) << polled.status();
    n += *polled;
  }
  ASSERT_EQ(n, signaled.size());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i].wr_id, signaled[i]);
    EXPECT_TRUE(got[i].status.ok()) << got[i].status;
  }
  // A READ behind everything observes all the WRITEs.
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 9999, kMaxBatch * 64,
                                kMaxBatch * 64, 0)})
                  .ok());
  EXPECT_EQ(std::memcmp(local_bytes() + kMaxBatch * 64, local_bytes(),
                        kMaxBatch * 64),
            0);
  // Nothing else completes, and the unsignaled requests no longer count
  // as outstanding: two more full batches fit.
  auto extra = ep->Poll(absl::MakeSpan(got), absl::Milliseconds(50));
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(*extra, 0u);
  for (auto& wr : batch) wr.signaled = false;
  ASSERT_TRUE(ep->Post(batch).ok());
  batch.back().signaled = true;
  ASSERT_TRUE(ep->Post(batch).ok());
  n = 0;
  while (n == 0 && absl::Now() < deadline) {
    auto polled = ep->Poll(absl::MakeSpan(got), absl::Milliseconds(100));
    ASSERT_TRUE(polled.ok()) << polled.status();
    n += *polled;
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(got[0].wr_id, kMaxBatch - 1);
  EXPECT_TRUE(ep->Post(batch).ok());  // room again for kMaxOutstanding
  EXPECT_TRUE(ep->Post(batch).ok());
}

TEST_F(VerbsTest, SmallInlineWritesThenReadBackInOneBatch) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  for (uint32_t size : {1u, 8u, 64u, 200u, 256u, 257u, 4000u}) {
    SCOPED_TRACE(size);
    Randomize(local_bytes(), size);
    std::memset(local_bytes() + 8192, 0, size);
    ASSERT_TRUE(Run(*ep, {Request(Opcode::kWrite, 1, 0, size, 777),
                          Request(Opcode::kRead, 2, 8192, size, 777)})
                    .ok());
    EXPECT_EQ(std::memcmp(local_bytes() + 8192, local_bytes(), size), 0);
    EXPECT_EQ(std::memcmp(node_bytes() + 777, local_bytes(), size), 0);
  }
}

TEST_F(VerbsTest, CompareSwapAndFetchAddUseHostByteOrderLikeTcpAndSim) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  uint64_t* old = reinterpret_cast<uint64_t*>(local_bytes());
  *node_word(0) = 0x0102030405060708ull;
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kCompareSwap, 1, 0, 0,
                               0x0102030405060708ull, 0x1111222233334444ull)})
                  .ok());
  EXPECT_EQ(*old, 0x0102030405060708ull);
  EXPECT_EQ(*node_word(0), 0x1111222233334444ull);
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kCompareSwap, 2, 0, 0,
                               0x0102030405060708ull, 5)})
                  .ok());
  EXPECT_EQ(*old, 0x1111222233334444ull);  // failed: value unchanged
  EXPECT_EQ(*node_word(0), 0x1111222233334444ull);
  *node_word(8) = 0xffffffffull;
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kFetchAdd, 3, 0, 8, 1)}).ok());
  EXPECT_EQ(*old, 0xffffffffull);
  EXPECT_EQ(*node_word(8), 0x100000000ull);  // the carry crossed bytes
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kFetchAdd, 4, 0, 8, ~0ull)}).ok());
  EXPECT_EQ(*node_word(8), 0xffffffffull);
}

TEST_F(VerbsTest, BadRkeyAndOutOfBoundsArePermissionDeniedAndBreak) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  WorkRequest bad_rkey = Request(Opcode::kRead, 1, 0, 8, 0);
  bad_rkey.rkey += 1;
  // Requests before the refused one still execute; later ones flush.
  *node_word(64) = 64;
  std::vector<WorkRequest> batch = {Request(Opcode::kRead, 0, 64, 8, 64),
                                    bad_rkey,
                                    Request(Opcode::kRead, 2, 128, 8, 64)};
  completions_.assign(3, Completion{});
  EXPECT_EQ(
      PostAndWait(*ep, batch, absl::MakeSpan(completions_), kTimeout).code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(completions_[0].status.ok());
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(local_bytes() + 64), 64u);
  EXPECT_EQ(completions_[1].status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(completions_[2].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ep->healthy());
  EXPECT_EQ(ep->Post({Request(Opcode::kRead, 3, 0, 8, 0)}).code(),
            absl::StatusCode::kUnavailable);

  auto ep2 = Connect();
  ASSERT_NE(ep2, nullptr);
  EXPECT_EQ(
      Run(*ep2, {Request(Opcode::kWrite, 4, 0, 16, kNodeBytes - 8)}).code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(ep2->healthy());
}

TEST_F(VerbsTest, RegionDeregisteredAfterConnectIsRefusedByTheDevice) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<uint8_t> extra(8192, 1);
  auto region = node_->RegisterMemory(extra.data(), extra.size());
  ASSERT_TRUE(region.ok()) << region.status();
  const RemoteRegion remote = (*region)->remote();
  auto ep = Connect();  // its table holds the region ...
  ASSERT_NE(ep, nullptr);
  WorkRequest wr = Request(Opcode::kRead, 1, 0, 8, 0);
  wr.remote_addr = remote.addr;
  wr.rkey = remote.rkey;
  ASSERT_TRUE(Run(*ep, {wr}).ok());
  EXPECT_EQ(local_bytes()[0], 1);
  region->reset();  // ... but the MR is gone: the responder refuses
  EXPECT_EQ(Run(*ep, {wr}).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(ep->healthy());
}

TEST_F(VerbsTest, LocalBufferOutsideItsRegistrationIsInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  WorkRequest unknown = Request(Opcode::kRead, 1, 0, 8, 0);
  unknown.lkey += 1;
  EXPECT_EQ(ep->Post({unknown}).code(), absl::StatusCode::kInvalidArgument);
  WorkRequest past_end = Request(Opcode::kRead, 2, kLocalBytes - 4, 8, 0);
  EXPECT_EQ(ep->Post({past_end}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ep->healthy());
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 3, 0, 8, 0)}).ok());
}

TEST_F(VerbsTest, DeadPeerIsUnavailableWithinSecondsAndReconnectWorks) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 1, 0, 8, 0)}).ok());
  const WorkRequest read = Request(Opcode::kRead, 2, 0, 8, 0);
  node_region_.reset();
  node_.reset();
  const absl::Time start = absl::Now();
  completions_.assign(1, Completion{});
  absl::Status status =
      PostAndWait(*ep, {read}, absl::MakeSpan(completions_), absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(took, absl::Seconds(5)) << "a dead peer took " << took;
  EXPECT_FALSE(ep->healthy());
  EXPECT_EQ(TryConnect().status().code(), absl::StatusCode::kUnavailable);

  ASSERT_NO_FATAL_FAILURE(StartNode(Options("node")));
  auto again = Connect();
  ASSERT_NE(again, nullptr);
  *node_word(0) = 99;
  ASSERT_TRUE(Run(*again, {Request(Opcode::kRead, 3, 0, 8, 0)}).ok());
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(local_bytes()), 99u);
}

// The cable pulled: the client's network device goes down under a
// connected endpoint. Requests complete Unavailable within seconds (no
// hang) and the endpoint is unhealthy; once the link is back up, a new
// connection works. With two devices the node stays on device_ and the
// client uses the other (whose veth end goes down); with one, both share it.
// Changes the VM's links, so it runs only inside the VM.
TEST_F(VerbsTest, PulledCableIsUnavailableWithinSecondsAndReconnectWorks) {
  if (!::meshpool::testing::InsideVerbsVm()) {
    GTEST_SKIP() << "\n*** SKIPPED: this test takes a network device down, "
                    "so it runs only inside the Soft-RoCE VM "
                    "(tools/vm/run.sh sets MESHPOOL_VM_RXE0_ADDR; "
                    "tools/vm/run_verbs_suite.sh runs it)\n";
  }
  std::string client_device =
      ::meshpool::testing::OtherActiveVerbsDevice(device_);
  if (client_device.empty()) client_device = device_;
  auto netdev = ::meshpool::testing::NetdevOfVerbsDevice(client_device);
  ASSERT_TRUE(netdev.ok()) << netdev.status();
  std::cout << "node on " << device_ << ", client on " << client_device
            << ", pulling " << *netdev << std::endl;
  ASSERT_NO_FATAL_FAILURE(StartNode(Options("node")));
  VerbsOptions client_options = Options("client");
  client_options.devices = {client_device};
  ASSERT_NO_FATAL_FAILURE(StartClient(client_options));
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 1, 0, 8, 0)}).ok());

  auto link = ::meshpool::testing::DownedLink::TakeDown(*netdev);
  ASSERT_TRUE(link.ok()) << link.status();
  const absl::Time start = absl::Now();
  completions_.assign(2, Completion{});
  const absl::Status status =
      PostAndWait(*ep,
                  {Request(Opcode::kRead, 2, 0, 4096, 0),
                   Request(Opcode::kWrite, 3, 8192, 4096, 8192)},
                  absl::MakeSpan(completions_), absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  std::cout << "failed after " << took << ": " << status << std::endl;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(took, absl::Seconds(5)) << "a pulled cable took " << took;
  EXPECT_EQ(completions_[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(completions_[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ep->healthy());
  EXPECT_EQ(ep->Post({Request(Opcode::kRead, 4, 0, 8, 0)}).code(),
            absl::StatusCode::kUnavailable);

  const absl::Status restored = (*link)->Restore();
  ASSERT_TRUE(restored.ok()) << restored;
  auto again = Connect();
  ASSERT_NE(again, nullptr);
  Randomize(node_bytes(), 4096);
  ASSERT_TRUE(Run(*again, {Request(Opcode::kRead, 5, 0, 4096, 0)}).ok());
  EXPECT_EQ(std::memcmp(local_bytes(), node_bytes(), 4096), 0);
}

TEST_F(VerbsTest, MemoryRegisteredAfterConnectIsUsable) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  std::vector<uint8_t> late(1 << 20, 0);
  auto region = client_->RegisterMemory(late.data(), late.size());
  ASSERT_TRUE(region.ok()) << region.status();
  Randomize(node_bytes(), 1 << 20);
  WorkRequest wr = Request(Opcode::kRead, 1, 0, 1 << 20, 0);
  wr.local = late.data();
  wr.lkey = (*region)->lkey();
  ASSERT_TRUE(Run(*ep, {wr}).ok());
  EXPECT_EQ(std::memcmp(late.data(), node_bytes(), 1 << 20), 0);
}

TEST_F(VerbsTest, CompletionChannelWakesPollerWithoutBusyPolling) {
  ASSERT_NO_FATAL_FAILURE(StartNode(Options("node")));
  VerbsOptions options = Options("client");
  options.busy_poll = absl::ZeroDuration();
  ASSERT_NO_FATAL_FAILURE(StartClient(options));
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  for (uint64_t i = 0; i < 300; ++i) {
    *node_word(0) = i;
    ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, i, 0, 8, 0)}).ok()) << i;
    ASSERT_EQ(*reinterpret_cast<uint64_t*>(local_bytes()), i);
  }
}

TEST_F(VerbsTest, DestroyingEndpointWithRequestsOutstandingIsSafe) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (int i = 0; i < 5; ++i) {
    auto ep = Connect();
    ASSERT_NE(ep, nullptr);
    ASSERT_TRUE(ep->Post({Request(Opcode::kRead, 1, 0, kLocalBytes, 0),
                          Request(Opcode::kWrite, 2, 0, kNodeBytes, 0)})
                    .ok());
  }  // destroyed at once
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  EXPECT_TRUE(Run(*ep, {Request(Opcode::kRead, 3, 0, 8, 0)}).ok());
}

TEST_F(VerbsTest, HandshakeGarbageIsInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (const std::string& garbage :
       {std::string(), std::string("hello"), std::string(200, '\xff')}) {
    EXPECT_EQ(node_->AcceptHandshake(garbage, DataAccess::Unrestricted())
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A node answering garbage fails the client's Connect, not a crash.
  auto ep = client_->Connect(kNodeAddress, [](const std::string&) {
    return absl::StatusOr<std::string>("not a reply");
  });
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kFailedPrecondition)
      << ep.status();
  EXPECT_EQ(client_->Connect(kNodeAddress, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VerbsTest, HandshakeBeforeListenIsFailedPrecondition) {
  auto node = CreateVerbsTransport(Options("node"));
  ASSERT_TRUE(node.ok()) << node.status();
  node_ = *std::move(node);
  ASSERT_NO_FATAL_FAILURE(StartClient(Options("client")));
  auto ep = TryConnect();
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kFailedPrecondition)
      << ep.status();
}

TEST_F(VerbsTest, NodeQpCapDestroysTheOldestPeerQp) {
  VerbsOptions node_options = Options("node");
  node_options.max_peer_qps = 2;
  ASSERT_NO_FATAL_FAILURE(StartNode(node_options));
  ASSERT_NO_FATAL_FAILURE(StartClient(Options("client")));
  auto first = Connect();
  auto second = Connect();
  ASSERT_TRUE(first != nullptr && second != nullptr);
  ASSERT_TRUE(Run(*first, {Request(Opcode::kRead, 1, 0, 8, 0)}).ok());
  auto third = Connect();  // evicts first's node QP
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(Run(*first, {Request(Opcode::kRead, 2, 0, 8, 0)}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Run(*second, {Request(Opcode::kRead, 3, 0, 8, 0)}).ok());
  EXPECT_TRUE(Run(*third, {Request(Opcode::kRead, 4, 0, 8, 0)}).ok());
}

// With two devices (tools/vm/run.sh --rxe 2: rxe0 and rxe1 on the ends of a
// veth pair) the node serves the client on one and the client reaches the
// node on the other, as their peer_devices say. The devices' packet counters
// prove it: a WRITE's data leaves only the client's device and arrives only
// at the node's, a READ's the other way round (the reverse direction carries
// only ACKs). Had both ends used one device, it would count the data both
// ways; had they swapped, the directions would be reversed.
TEST_F(VerbsTest, PeerDevicesPickTheDeviceThatReachesEachPeer) {
  const std::string other =
      ::meshpool::testing::OtherActiveVerbsDevice(device_);
  if (other.empty()) {
    const std::string why = absl::StrCat(
        "needs a second active RDMA device besides ", device_,
        " to prove the choice; tools/vm/run.sh --rxe 2 gives rxe0 and rxe1 "
        "on a veth pair, and the VM suite (tools/vm/run_verbs_suite.sh) "
        "runs with --rxe 2");
    if (::meshpool::testing::VerbsRequired()) {
      GTEST_FAIL() << "MESHPOOL_REQUIRE_VERBS=1: this test " << why;
    }
    GTEST_SKIP() << "\n*** SKIPPED: this test " << why << "\n";
  }
  const std::string node_device = other, client_device = device_;
  std::cout << "node serves the client on " << node_device << ", client uses "
            << client_device << std::endl;
  VerbsOptions node_options = Options("node");
  node_options.devices = {client_device, node_device};  // default: wrong one
  node_options.peer_devices = {{"client", node_device}};
  VerbsOptions client_options = Options("client");
  client_options.devices = {node_device, client_device};
  client_options.peer_devices = {{"node", client_device}};
  ASSERT_NO_FATAL_FAILURE(StartNode(node_options));
  ASSERT_NO_FATAL_FAILURE(StartClient(client_options));
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);

  // At most 4096-byte packets: at least this many carry 1 MiB; ACKs are
  // far fewer (rxe asks for one every 64 packets and per message).
  constexpr uint32_t kLength = 1 << 20;
  constexpr uint64_t kDataPackets = kLength / 4096;
  constexpr uint64_t kMaxReversePackets = kDataPackets / 4;
  using ::meshpool::testing::PacketCounts;
  using ::meshpool::testing::ReadPacketCounts;
  struct Moved {
    PacketCounts node, client;
  };
  // Transfers `batch` and returns how far each device's counters moved.
  auto transfer = [&](std::vector<WorkRequest> batch) -> absl::StatusOr<Moved> {
    auto node_before = ReadPacketCounts(node_device);
    auto client_before = ReadPacketCounts(client_device);
    if (!node_before.ok()) return node_before.status();
    if (!client_before.ok()) return client_before.status();
    MESHPOOL_RETURN_IF_ERROR(Run(*ep, batch));
    auto node_after = ReadPacketCounts(node_device);
    auto client_after = ReadPacketCounts(client_device);
    if (!node_after.ok()) return node_after.status();
    if (!client_after.ok()) return client_after.status();
    return Moved{{node_after->sent - node_before->sent,
                  node_after->received - node_before->received},
                 {client_after->sent - client_before->sent,
                  client_after->received - client_before->received}};
  };
  auto describe = [&](const Moved& m) {
    return absl::StrCat(node_device, " (node) sent ", m.node.sent, " received ",
                        m.node.received, "; ", client_device, " (client) sent ",
                        m.client.sent, " received ", m.client.received);
  };

  Randomize(local_bytes(), kLength);
  auto write = transfer({Request(Opcode::kWrite, 1, 0, kLength, 4096)});
  ASSERT_TRUE(write.ok()) << write.status();
  EXPECT_EQ(std::memcmp(node_bytes() + 4096, local_bytes(), kLength), 0);
  std::cout << "WRITE: " << describe(*write) << std::endl;
  SCOPED_TRACE(absl::StrCat("WRITE: ", describe(*write)));
  EXPECT_GE(write->client.sent, kDataPackets);
  EXPECT_GE(write->node.received, kDataPackets);
  EXPECT_LE(write->node.sent, kMaxReversePackets);
  EXPECT_LE(write->client.received, kMaxReversePackets);

  auto read = transfer({Request(Opcode::kRead, 2, 2 << 20, kLength, 4096),
                        Atomic(Opcode::kFetchAdd, 3, 3 << 20, 0, 5)});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(std::memcmp(local_bytes() + (2 << 20), local_bytes(), kLength), 0);
  EXPECT_EQ(*node_word(0), 5u);
  std::cout << "READ: " << describe(*read) << std::endl;
  SCOPED_TRACE(absl::StrCat("READ: ", describe(*read)));
  EXPECT_GE(read->node.sent, kDataPackets);
  EXPECT_GE(read->client.received, kDataPackets);
  EXPECT_LE(read->client.sent, kMaxReversePackets);
  EXPECT_LE(read->node.received, kMaxReversePackets);
}

TEST_F(VerbsTest, UnknownDeviceIsNotFoundNamingDoctor) {
  VerbsOptions options = Options("node");
  options.devices = {"no_such_device0"};
  auto transport = CreateVerbsTransport(options);
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(transport.status().message(), device_))
      << transport.status();
  EXPECT_TRUE(
      absl::StrContains(transport.status().message(), "meshpool doctor"));
  options = Options("node");
  options.peer_devices = {{"peer", "no_such_device0"}};
  EXPECT_EQ(CreateVerbsTransport(options).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(VerbsTest, ListRdmaDevicesDescribesTheDevice) {
  auto devices = ListRdmaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  auto it =
      std::find_if(devices->begin(), devices->end(),
                   [&](const RdmaDeviceInfo& d) { return d.name == device_; });
  ASSERT_NE(it, devices->end());
  const RdmaDeviceInfo& d = *it;
  EXPECT_FALSE(d.transport.empty());
  EXPECT_GT(d.max_mr_size, 0u);
  EXPECT_GT(d.max_qp_rd_atom, 0);
  EXPECT_GE(d.max_qp_wr, static_cast<int>(kMaxOutstanding));
  EXPECT_GT(d.max_inline_data, 0);
  ASSERT_FALSE(d.ports.empty());
  const RdmaPortInfo& port = d.ports[0];
  EXPECT_EQ(port.port, 1);
  EXPECT_EQ(port.state, "ACTIVE");
  EXPECT_TRUE(port.active);
  EXPECT_GE(port.active_mtu, 256);
  EXPECT_FALSE(port.gids.empty());
  if (absl::StartsWith(d.name, "rxe")) {
    EXPECT_EQ(d.transport, "InfiniBand");
    EXPECT_TRUE(d.atomics);
    EXPECT_EQ(port.link_layer, "Ethernet");
    bool roce_v2_ipv4 = false;
    for (const RdmaGidInfo& gid : port.gids) {
      EXPECT_FALSE(gid.gid.empty());
      EXPECT_FALSE(gid.netdev.empty()) << gid.gid;
      if (gid.type == "RoCE v2" && absl::StartsWith(gid.gid, "::ffff:")) {
        roce_v2_ipv4 = true;
      }
    }
    EXPECT_TRUE(roce_v2_ipv4);
  }
}

}  // namespace
}  // namespace meshpool::rdma
