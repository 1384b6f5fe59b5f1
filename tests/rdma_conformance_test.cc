// The transport contract (rdma/rdma.h), run against every backend. A backend
// joins by adding one factory to Factories() below. Built twice: tcp, sim,
// shm and uc (rdma_conformance_test), and verbs alone
// (rdma_conformance_verbs_test, MESHPOOL_CONFORMANCE_VERBS, label "verbs": it
// needs an RDMA device and skips loudly without one). Local buffers come from
// an arena registered with the client transport, since verbs needs their lkey.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/memory_file.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"
#include "rdma/sim.h"
#include "rdma/tcp.h"
#include "rdma/uc.h"
#include "rdma/verbs.h"
#include "tests/test_seed.h"
#include "tests/verbs_test_util.h"

namespace meshpool::rdma {
namespace {

constexpr size_t kNodeBytes = 32 << 20;
constexpr size_t kExtraNodeBytes = 4096;  // a second node region's memory
constexpr size_t kLocalBytes = 40 << 20;  // the client's registered arena
constexpr absl::Duration kTimeout = absl::Seconds(60);

using testing::TestSeed;

// One backend under test: a node transport that serves memory and a client
// transport that reaches it.
class Backend {
 public:
  virtual ~Backend() = default;
  Transport& node() { return *node_; }
  Transport& client() { return *client_; }
  virtual std::string bind() const = 0;
  // The node's memory (kNodeBytes, zeroed) and a further kExtraNodeBytes
  // for a second region, when the backend must provide them (shm serves
  // only shared memory); nullptr: the test allocates them.
  virtual uint8_t* NodeMemory() { return nullptr; }
  virtual uint8_t* ExtraNodeMemory() { return nullptr; }
  // The node dies; its memory stays allocated (the test owns it).
  virtual void KillNode() = 0;
  virtual std::string UnreachableAddress() = 0;
  virtual std::vector<std::string> MalformedAddresses() const = 0;

 protected:
  std::unique_ptr<Transport> node_;
  std::unique_ptr<Transport> client_;
};

// "scheme://127.0.0.1:port" of a loopback socket of `type`, bound and never
// served (kept open in *fd for the test's lifetime so the port stays ours).
std::string BoundButSilent(int type, absl::string_view scheme, int* fd) {
  *fd = ::socket(AF_INET, type, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(*fd, reinterpret_cast<sockaddr*>(&addr), len) ||
      ::getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len)) {
    return absl::StrCat(scheme, "://127.0.0.1:1");
  }
  return absl::StrCat(scheme, "://127.0.0.1:", ntohs(addr.sin_port));
}

class TcpBackend : public Backend {
 public:
  static std::unique_ptr<Backend> Create(uint64_t seed) {
    auto b = std::make_unique<TcpBackend>();
    auto node = CreateTcpTransport();
    auto client = CreateTcpTransport();
    if (!node.ok() || !client.ok()) return nullptr;
    b->node_ = *std::move(node);
    b->client_ = *std::move(client);
    return b;
  }
  ~TcpBackend() override {
    if (unreachable_fd_ >= 0) ::close(unreachable_fd_);
  }
  std::string bind() const override { return "127.0.0.1:0"; }
  void KillNode() override { node_.reset(); }
  // A bound socket that does not listen: connecting is refused, and the port
  // stays ours for the test's lifetime.
  std::string UnreachableAddress() override {
    return BoundButSilent(SOCK_STREAM, "tcp", &unreachable_fd_);
  }
  std::vector<std::string> MalformedAddresses() const override {
    return {"127.0.0.1:7000",       "tcp://127.0.0.1",
            "tcp://:7000",          "tcp://127.0.0.1:99999",
            "tcp://127.0.0.1:port", "sim://node",
            "tcp://[::1:7000",      ""};
  }

 private:
  int unreachable_fd_ = -1;
};

class SimBackend : public Backend {
 public:
  static std::unique_ptr<Backend> Create(uint64_t seed) {
    auto b = std::make_unique<SimBackend>();
    b->fabric_ = SimFabric::Create(seed);
    b->node_ = b->fabric_->CreateTransport("node");
    b->client_ = b->fabric_->CreateTransport("client");
    return b;
  }
  std::string bind() const override { return ""; }
  void KillNode() override { fabric_->KillNode("node"); }
  std::string UnreachableAddress() override { return "sim://nobody"; }
  std::vector<std::string> MalformedAddresses() const override {
    return {"sim://", "node", "sim:/node", "tcp://127.0.0.1:7000", ""};
  }

 private:
  std::shared_ptr<SimFabric> fabric_;
};

// uc over UDP on loopback; "uc_lossy" drops, duplicates and corrupts
// frames both ways (the channel must deliver through it); "uc_poll" polls
// 1 ms before sleeping on the node and the client (UcOptions::busy_poll;
// the others sleep at once).
class UcBackend : public Backend {
 public:
  static std::unique_ptr<Backend> Create(uint64_t seed, bool lossy,
                                         bool poll = false) {
    auto b = std::make_unique<UcBackend>();
    UcOptions options;
    options.connect_timeout = absl::Seconds(1);
    options.busy_poll = poll ? absl::Milliseconds(1) : absl::ZeroDuration();
    if (lossy) {
      options.faults = {
          .drop = 0.02, .duplicate = 0.02, .corrupt = 0.01, .seed = seed};
    }
    auto node = CreateUcTransport(options);
    options.faults.seed = seed + 1;
    auto client = CreateUcTransport(options);
    EXPECT_TRUE(node.ok()) << node.status();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!node.ok() || !client.ok()) return nullptr;
    b->node_ = *std::move(node);
    b->client_ = *std::move(client);
    return b;
  }
  ~UcBackend() override {
    if (silent_fd_ >= 0) ::close(silent_fd_);
  }
  std::string bind() const override { return "127.0.0.1:0"; }
  void KillNode() override { node_.reset(); }
  // A bound UDP socket that never answers: the hello goes unanswered.
  std::string UnreachableAddress() override {
    return BoundButSilent(SOCK_DGRAM, "uc", &silent_fd_);
  }
  std::vector<std::string> MalformedAddresses() const override {
    return {"127.0.0.1:7000",      "uc://127.0.0.1",
            "uc://:7000",          "uc://127.0.0.1:99999",
            "uc://127.0.0.1:port", "tcp://127.0.0.1:7000",
            "uc://127.0.0.1:0",    ""};
  }

 private:
  int silent_fd_ = -1;
};

// The node's memory is a memory file (what a shared store::Pool is),
// exported by the node transport; the client transport is client-only.
class ShmBackend : public Backend {
 public:
  static constexpr size_t kBytes = kNodeBytes + kExtraNodeBytes;
  static std::unique_ptr<Backend> Create(uint64_t seed) {
    auto b = std::make_unique<ShmBackend>();
    absl::StatusOr<MemoryFile> file =
        CreateMemoryFile("conformance", kBytes, MemoryFilePages::kNormal);
    if (!file.ok()) return nullptr;
    b->fd_ = file->fd;
    void* p =
        ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd_, 0);
    if (p == MAP_FAILED) return nullptr;
    b->memory_ = static_cast<uint8_t*>(p);
    ShmOptions node_options;
    node_options.exports = {{b->memory_, kBytes, b->fd_}};
    auto node = CreateShmTransport(node_options);
    auto client = CreateShmTransport({});
    EXPECT_TRUE(node.ok()) << node.status();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!node.ok() || !client.ok()) return nullptr;
    b->node_ = *std::move(node);
    b->client_ = *std::move(client);
    return b;
  }
  ~ShmBackend() override {
    node_.reset();
    client_.reset();
    if (memory_ != nullptr) ::munmap(memory_, kBytes);
    if (fd_ >= 0) ::close(fd_);
  }
  std::string bind() const override { return ""; }
  uint8_t* NodeMemory() override { return memory_; }
  uint8_t* ExtraNodeMemory() override { return memory_ + kNodeBytes; }
  void KillNode() override { node_.reset(); }
  std::string UnreachableAddress() override {
    return absl::StrCat("shm:///tmp/meshpool-conformance-nobody-", ::getpid(),
                        ".sock");
  }
  std::vector<std::string> MalformedAddresses() const override {
    return {"shm://",
            "shm://relative.sock",
            "shm:/tmp/x.sock",
            "tcp://127.0.0.1:7000",
            "",
            "shm:///tmp/x.sock?",
            "shm:///tmp/x.sock?bogus=1",
            "shm:///tmp/x.sock?atomics",
            "shm:///tmp/x.sock?host=a&host=a",
            "shm:///tmp/x%2.sock",
            "shm:///" + std::string(200, 'x')};
  }

 private:
  int fd_ = -1;
  uint8_t* memory_ = nullptr;
};

#ifdef MESHPOOL_CONFORMANCE_VERBS
// Routes a client's verbs handshake the way the node's Handshake RPC would:
// to the node transport's AcceptHandshake.
class HandshakeRouter : public Transport {
 public:
  using Route = std::function<absl::StatusOr<std::string>(
      const std::string& address, const std::string& request)>;
  HandshakeRouter(std::unique_ptr<Transport> inner, Route route)
      : inner_(std::move(inner)), route_(std::move(route)) {}
  TransportKind kind() const override { return inner_->kind(); }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    return inner_->RegisterMemory(addr, length);
  }
  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    return inner_->Listen(bind);
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    const std::string address(peer_address);
    return inner_->Connect(peer_address, [&](const std::string& request) {
      return route_(address, request);
    });
  }

 private:
  std::unique_ptr<Transport> inner_;
  Route route_;
};

// The node's Handshake RPC: requests for `address` reach *node (until it
// is killed); any other address has no node.
HandshakeRouter::Route RouteTo(const std::unique_ptr<Transport>* node,
                               std::string address) {
  return [node, address = std::move(address)](
             const std::string& to,
             const std::string& request) -> absl::StatusOr<std::string> {
    // A uc node's address may carry its instance: uc://NAME/INSTANCE.
    if (*node == nullptr ||
        (to != address && !absl::StartsWith(to, absl::StrCat(address, "/")))) {
      return absl::UnavailableError(absl::StrCat("no node answers at ", to));
    }
    return (*node)->AcceptHandshake(request, DataAccess::Unrestricted());
  };
}

// Node and client transports on one device (Soft-RoCE loops back).
class VerbsBackend : public Backend {
 public:
  static std::unique_ptr<Backend> Create(uint64_t seed) {
    const std::string device = ::meshpool::testing::VerbsTestDevice();
    if (device.empty()) return nullptr;
    auto b = std::make_unique<VerbsBackend>();
    VerbsOptions options;
    options.devices = {device};
    options.self_name = "node";
    auto node = CreateVerbsTransport(options);
    options.self_name = "client";
    auto client = CreateVerbsTransport(options);
    EXPECT_TRUE(node.ok()) << node.status();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!node.ok() || !client.ok()) return nullptr;
    b->node_ = *std::move(node);
    b->client_ = std::make_unique<HandshakeRouter>(
        *std::move(client), RouteTo(&b->node_, "verbs://node"));
    return b;
  }
  std::string bind() const override { return "ignored"; }
  void KillNode() override { node_.reset(); }
  std::string UnreachableAddress() override { return "verbs://nobody"; }
  std::vector<std::string> MalformedAddresses() const override {
    return {"verbs://",
            "node",
            "verbs:/node",
            "tcp://127.0.0.1:7000",
            "verbs://a b",
            "verbs://a/b",
            ""};
  }
};

// The uc backend over UC queue pairs under the thunderbolt profile (what a
// Mac offers), node and client on one device; `lossy` adds injected faults
// on top of the real link.
class UcVerbsBackend : public Backend {
 public:
  static std::unique_ptr<Backend> Create(uint64_t seed, bool lossy) {
    const std::string device = ::meshpool::testing::VerbsTestDevice();
    if (device.empty()) return nullptr;
    auto b = std::make_unique<UcVerbsBackend>();
    UcOptions options;
    options.link = UcLinkKind::kVerbs;
    options.profile = UcProfile::kThunderbolt;
    options.verbs.devices = {device};
    options.connect_timeout = absl::Seconds(2);
    if (lossy) {
      options.faults = {
          .drop = 0.02, .duplicate = 0.02, .corrupt = 0.01, .seed = seed};
    }
    options.verbs.self_name = "node";
    auto node = CreateUcTransport(options);
    options.verbs.self_name = "client";
    options.faults.seed = seed + 1;
    auto client = CreateUcTransport(options);
    EXPECT_TRUE(node.ok()) << node.status();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!node.ok() || !client.ok()) return nullptr;
    b->node_ = *std::move(node);
    b->client_ = std::make_unique<HandshakeRouter>(
        *std::move(client), RouteTo(&b->node_, "uc://node"));
    return b;
  }
  std::string bind() const override { return "ignored"; }
  void KillNode() override { node_.reset(); }
  std::string UnreachableAddress() override { return "uc://nobody"; }
  std::vector<std::string> MalformedAddresses() const override {
    return {"uc://",    "node",     "uc:/node", "tcp://127.0.0.1:7000",
            "uc://a b", "uc://a/b", ""};
  }
};
#endif  // MESHPOOL_CONFORMANCE_VERBS

using BackendFactory = std::function<std::unique_ptr<Backend>(uint64_t)>;
const std::map<std::string, BackendFactory>& Factories() {
  static const auto* factories = new std::map<std::string, BackendFactory>{
#ifdef MESHPOOL_CONFORMANCE_VERBS
      {"verbs", &VerbsBackend::Create},
      {"uc_verbs",
       [](uint64_t seed) { return UcVerbsBackend::Create(seed, false); }},
      {"uc_verbs_lossy",
       [](uint64_t seed) { return UcVerbsBackend::Create(seed, true); }},
#else
      {"tcp", &TcpBackend::Create},
      {"sim", &SimBackend::Create},
      {"shm", &ShmBackend::Create},
      {"uc", [](uint64_t seed) { return UcBackend::Create(seed, false); }},
      {"uc_lossy", [](uint64_t seed) { return UcBackend::Create(seed, true); }},
      {"uc_poll",
       [](uint64_t seed) { return UcBackend::Create(seed, false, true); }},
#endif
  };
  return *factories;
}
std::vector<std::string> BackendNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Factories()) names.push_back(name);
  return names;
}

class TransportConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#ifdef MESHPOOL_CONFORMANCE_VERBS
    MESHPOOL_SKIP_WITHOUT_VERBS();
#endif
    seed_ = TestSeed();
    std::cout << "backend=" << GetParam() << std::endl;
    rng_.seed(seed_);
    backend_ = Factories().at(GetParam())(seed_);
    ASSERT_NE(backend_, nullptr);
    node_memory_ = backend_->NodeMemory();
    if (node_memory_ == nullptr) {
      memory_ = std::make_unique<uint64_t[]>(kNodeBytes / 8);  // zeroed
      node_memory_ = reinterpret_cast<uint8_t*>(memory_.get());
    }
    auto region = backend_->node().RegisterMemory(node_memory_, kNodeBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    auto address = backend_->node().Listen(backend_->bind());
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
    local_ = std::make_unique<uint64_t[]>(kLocalBytes / 8);
    auto local = backend_->client().RegisterMemory(local_.get(), kLocalBytes);
    ASSERT_TRUE(local.ok()) << local.status();
    local_region_ = *std::move(local);
  }

  // `count` zeroed Ts from the client's registered arena, 64-byte aligned.
  // REQUIRES: not called concurrently; what ResetLocal() hands back again
  // is no longer in use.
  template <typename T = uint8_t>
  T* Local(size_t count) {
    const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    EXPECT_LE(local_used_ + bytes, kLocalBytes);
    uint8_t* p = reinterpret_cast<uint8_t*>(local_.get()) + local_used_;
    local_used_ += bytes;
    std::memset(p, 0, count * sizeof(T));
    return reinterpret_cast<T*>(p);
  }
  uint8_t* RandomLocal(size_t n) {
    uint8_t* p = Local(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng_());
    return p;
  }
  void ResetLocal() { local_used_ = 0; }

  uint8_t* node_bytes() { return node_memory_; }
  uint64_t* node_word(uint64_t offset) {
    return reinterpret_cast<uint64_t*>(node_bytes() + offset);
  }

  std::unique_ptr<Endpoint> Connect() {
    auto ep = backend_->client().Connect(address_, nullptr);
    EXPECT_TRUE(ep.ok()) << ep.status();
    return ep.ok() ? *std::move(ep) : nullptr;
  }

  WorkRequest Request(Opcode op, uint64_t id, void* local, uint32_t length,
                      uint64_t offset) {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.local = local;
    wr.length = length;
    wr.lkey = local_region_->lkey();
    wr.remote_addr = region_->remote().addr + offset;
    wr.rkey = region_->remote().rkey;
    return wr;
  }
  WorkRequest Atomic(Opcode op, uint64_t id, uint64_t* old, uint64_t offset,
                     uint64_t compare_add, uint64_t swap = 0) {
    WorkRequest wr = Request(op, id, old, kAtomicBytes, offset);
    wr.compare_add = compare_add;
    wr.swap = swap;
    return wr;
  }

  absl::Status Run(Endpoint& ep, const std::vector<WorkRequest>& batch) {
    completions_.assign(batch.size(), Completion{});
    return PostAndWait(ep, batch, absl::MakeSpan(completions_), kTimeout);
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<uint64_t[]> memory_;  // outlives the backend's transports
  std::unique_ptr<Backend> backend_;
  uint8_t* node_memory_ = nullptr;  // memory_ or the backend's
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<uint64_t[]> local_;  // outlives local_region_
  std::unique_ptr<MemoryRegion> local_region_;
  size_t local_used_ = 0;
  std::string address_;
  std::vector<Completion> completions_;
};

TEST_P(TransportConformanceTest, ReadWriteRoundTripsFromOneByteTo16MiB) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  for (uint32_t size : {1u, 3u, 8u, 4096u, 65536u + 13, 1u << 20, 16u << 20}) {
    SCOPED_TRACE(size);
    const uint64_t offset = 1 + size % 7;  // deliberately unaligned
    ResetLocal();
    uint8_t* data = RandomLocal(size);
    ASSERT_TRUE(
        Run(*ep, {Request(Opcode::kWrite, 1, data, size, offset)}).ok());
    EXPECT_EQ(std::memcmp(node_bytes() + offset, data, size), 0);
    uint8_t* back = Local(size);
    ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 2, back, size, offset)}).ok());
    EXPECT_EQ(std::memcmp(back, data, size), 0);
    EXPECT_EQ(completions_[0].wr_id, 2u);
    EXPECT_EQ(completions_[0].opcode, Opcode::kRead);
  }
}

TEST_P(TransportConformanceTest, BatchOfMaxBatchMixedRequestsCompletesInOrder) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  constexpr uint64_t kDataBase = 0, kCounter = 1 << 20, kCasBase = 2 << 20;
  for (size_t i = 0; i < kMaxBatch; ++i) *node_word(kCasBase + 8 * i) = i;
  std::vector<uint8_t*> written(kMaxBatch), read(kMaxBatch);
  uint64_t* old = Local<uint64_t>(kMaxBatch);
  std::fill(old, old + kMaxBatch, ~0ull);
  std::vector<WorkRequest> batch;
  for (size_t i = 0; i < kMaxBatch; ++i) {
    switch (i % 4) {
      case 0:  // WRITE slot i ...
        written[i] = RandomLocal(64);
        batch.push_back(
            Request(Opcode::kWrite, i, written[i], 64, kDataBase + 64 * i));
        break;
      case 1:  // ... and READ it back in the same batch
        read[i] = Local(64);
        batch.push_back(
            Request(Opcode::kRead, i, read[i], 64, kDataBase + 64 * (i - 1)));
        break;
      case 2:
        batch.push_back(Atomic(Opcode::kFetchAdd, i, &old[i], kCounter, 1));
        break;
      case 3:
        batch.push_back(Atomic(Opcode::kCompareSwap, i, &old[i],
                               kCasBase + 8 * i, i, i + 1000));
        break;
    }
  }
  ASSERT_TRUE(Run(*ep, batch).ok());
  uint64_t faa = 0;
  for (size_t i = 0; i < kMaxBatch; ++i) {
    EXPECT_EQ(completions_[i].wr_id, i);
    EXPECT_EQ(completions_[i].opcode, batch[i].opcode);
    EXPECT_TRUE(completions_[i].status.ok()) << completions_[i].status;
    if (i % 4 == 1) {
      EXPECT_EQ(std::memcmp(read[i], written[i - 1], 64), 0) << i;
    }
    if (i % 4 == 2) {
      EXPECT_EQ(old[i], faa++);
    }
    if (i % 4 == 3) {
      EXPECT_EQ(old[i], i);
      EXPECT_EQ(*node_word(kCasBase + 8 * i), i + 1000);
    }
  }
  EXPECT_EQ(*node_word(kCounter), kMaxBatch / 4);
}

TEST_P(TransportConformanceTest, ReadAfterWriteOnOneEndpointSeesTheWrite) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  for (int round = 0; round < 20; ++round) {
    ResetLocal();
    uint8_t* data = RandomLocal(100000);
    uint8_t* back = Local(100000);
    // Two separate posts, nothing polled in between.
    ASSERT_TRUE(
        ep->Post({Request(Opcode::kWrite, 1, data, 100000, 4096)}).ok());
    ASSERT_TRUE(ep->Post({Request(Opcode::kRead, 2, back, 100000, 4096)}).ok());
    Completion c[2];
    size_t got = 0;
    const absl::Time deadline = absl::Now() + kTimeout;
    while (got < 2 && absl::Now() < deadline) {
      auto n = ep->Poll(absl::MakeSpan(c + got, 2 - got), absl::Seconds(1));
      ASSERT_TRUE(n.ok()) << n.status();
      got += *n;
    }
    ASSERT_EQ(got, 2u);
    EXPECT_TRUE(c[0].status.ok() && c[1].status.ok());
    EXPECT_EQ(std::memcmp(back, data, 100000), 0) << "round " << round;
  }
}

// The one-round-trip PUT's shape: WRITE an object, READ its last word
// back (the flush), and publish it with a fenced CAS, all in one post. A
// reader on another endpoint that sees the published word must find the
// whole object in place.
TEST_P(TransportConformanceTest,
       FencedCasBehindAWriteAndItsFlushPublishesOnlyPlacedBytes) {
  constexpr int kRounds = 64;
  constexpr uint32_t kObject = 64 << 10;
  constexpr uint64_t kFlag = 0, kArea = 1 << 20;
  auto writer = Connect();
  auto reader = Connect();
  ASSERT_TRUE(writer != nullptr && reader != nullptr);
  *node_word(kFlag) = 0;
  auto word_of = [](int round, uint32_t i) {
    return (uint64_t{static_cast<uint32_t>(round)} << 32) | i;
  };
  // Every buffer comes from the (single-threaded) arena up front.
  std::vector<uint64_t*> objects;
  for (int r = 1; r <= kRounds; ++r) {
    uint64_t* o = Local<uint64_t>(kObject / 8);
    for (uint32_t i = 0; i < kObject / 8; ++i) o[i] = word_of(r, i);
    objects.push_back(o);
  }
  uint64_t* flushed = Local<uint64_t>(1);
  uint64_t* old = Local<uint64_t>(1);
  uint64_t* seen_flag = Local<uint64_t>(1);
  uint64_t* seen = Local<uint64_t>(kObject / 8);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, checked{0};
  std::thread watch([&] {
    std::vector<Completion> c(2);
    while (!done.load()) {
      if (!PostAndWait(*reader,
                       {Request(Opcode::kRead, 1, seen_flag, 8, kFlag)},
                       absl::MakeSpan(c), kTimeout)
               .ok()) {
        ++torn;
        return;
      }
      const int r = static_cast<int>(*seen_flag);
      if (r == 0) continue;
      if (!PostAndWait(*reader,
                       {Request(Opcode::kRead, 2, seen, kObject,
                                kArea + uint64_t{kObject} * r)},
                       absl::MakeSpan(c), kTimeout)
               .ok()) {
        ++torn;
        return;
      }
      for (uint32_t i = 0; i < kObject / 8; ++i) {
        if (seen[i] != word_of(r, i)) {
          ++torn;
          break;
        }
      }
      ++checked;
    }
  });
  for (int r = 1; r <= kRounds; ++r) {
    // Let the reader see at least one object before the last round.
    const absl::Time wait_until = absl::Now() + absl::Seconds(10);
    while (r == kRounds && checked.load() == 0 && torn.load() == 0 &&
           absl::Now() < wait_until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    const uint64_t at = kArea + uint64_t{kObject} * r;
    WorkRequest publish = Atomic(Opcode::kCompareSwap, 3, old, kFlag, r - 1, r);
    publish.fence = true;
    absl::Status st =
        Run(*writer,
            {Request(Opcode::kWrite, 1, objects[r - 1], kObject, at),
             Request(Opcode::kRead, 2, flushed, 8, at + kObject - 8), publish});
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(*old, static_cast<uint64_t>(r - 1));
  }
  done = true;
  watch.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(checked.load(), 0) << "the reader never saw a published object";
  EXPECT_EQ(*node_word(kFlag), static_cast<uint64_t>(kRounds));
  std::cout << "reader checked " << checked.load() << " published objects"
            << std::endl;
}

// A fenced request never runs once a request before it failed: a PUT whose
// object WRITE was refused must not publish it.
TEST_P(TransportConformanceTest, FencedCasBehindARefusedWriteNeverExecutes) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  *node_word(256) = 5;
  uint8_t* data = RandomLocal(16);
  uint64_t* old = Local<uint64_t>(1);
  WorkRequest publish = Atomic(Opcode::kCompareSwap, 2, old, 256, 5, 6);
  publish.fence = true;
  absl::Status status =
      Run(*ep, {Request(Opcode::kWrite, 1, data, 16, kNodeBytes - 8), publish});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_FALSE(completions_[1].status.ok());
  EXPECT_EQ(*node_word(256), 5u) << "the fenced CAS ran behind a refusal";
}

TEST_P(TransportConformanceTest, CompareSwapSucceedsAndFailsReturningOldValue) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  *node_word(64) = 5;
  uint64_t& old = *Local<uint64_t>(1);
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kCompareSwap, 1, &old, 64, 5, 9)}).ok());
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(*node_word(64), 9u);
  ASSERT_TRUE(
      Run(*ep, {Atomic(Opcode::kCompareSwap, 2, &old, 64, 5, 11)}).ok());
  EXPECT_EQ(old, 9u);  // failed: expected 5, found 9
  EXPECT_EQ(*node_word(64), 9u);
}

TEST_P(TransportConformanceTest, FetchAddReturnsOldValueAndAdds) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  *node_word(128) = 100;
  uint64_t& old = *Local<uint64_t>(1);
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kFetchAdd, 1, &old, 128, 7)}).ok());
  EXPECT_EQ(old, 100u);
  EXPECT_EQ(*node_word(128), 107u);
  ASSERT_TRUE(Run(*ep, {Atomic(Opcode::kFetchAdd, 2, &old, 128, ~0ull)}).ok());
  EXPECT_EQ(old, 107u);
  EXPECT_EQ(*node_word(128), 106u);  // adding 2^64-1 wraps to -1
}

TEST_P(TransportConformanceTest,
       OutOfBoundsIsPermissionDeniedAndBreaksOnlyThatEndpoint) {
  auto bad = Connect();
  auto good = Connect();
  ASSERT_TRUE(bad != nullptr && good != nullptr);
  std::vector<uint8_t> before(node_bytes() + kNodeBytes - 64,
                              node_bytes() + kNodeBytes);
  uint8_t* data = RandomLocal(16);
  absl::Status status =
      Run(*bad, {Request(Opcode::kWrite, 1, data, 16, kNodeBytes - 8)});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_FALSE(bad->healthy());
  EXPECT_EQ(bad->Post({Request(Opcode::kRead, 2, data, 8, 0)}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::memcmp(before.data(), node_bytes() + kNodeBytes - 64, 64), 0);
  // A read that starts inside and ends outside is refused as well.
  auto bad2 = Connect();
  ASSERT_NE(bad2, nullptr);
  status = Run(*bad2, {Request(Opcode::kRead, 3, data, 16, kNodeBytes - 15)});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;

  uint8_t* back = Local(16);
  node_bytes()[7] = 0x5a;
  ASSERT_TRUE(Run(*good, {Request(Opcode::kRead, 4, back, 16, 0)}).ok());
  EXPECT_EQ(back[7], 0x5a);
  EXPECT_TRUE(good->healthy());
}

TEST_P(TransportConformanceTest, BadRkeyIsPermissionDeniedAndBreaksEndpoint) {
  auto bad = Connect();
  auto good = Connect();
  ASSERT_TRUE(bad != nullptr && good != nullptr);
  uint64_t& value = *Local<uint64_t>(1);
  WorkRequest wr = Request(Opcode::kRead, 1, &value, 8, 0);
  wr.rkey ^= 0x80000000u;
  absl::Status status = Run(*bad, {wr});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_FALSE(bad->healthy());
  *node_word(0) = 42;
  ASSERT_TRUE(Run(*good, {Request(Opcode::kRead, 2, &value, 8, 0)}).ok());
  EXPECT_EQ(value, 42u);
}

TEST_P(TransportConformanceTest, DeregisteredRegionIsPermissionDenied) {
  std::vector<uint8_t> own(kExtraNodeBytes, 7);
  uint8_t* extra = backend_->ExtraNodeMemory();
  if (extra == nullptr) extra = own.data();
  auto region = backend_->node().RegisterMemory(extra, kExtraNodeBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  const RemoteRegion remote = (*region)->remote();
  EXPECT_NE(remote.rkey, 0u);
  EXPECT_NE(remote.rkey, region_->remote().rkey);
  region->reset();
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  uint8_t* byte = Local(1);
  WorkRequest wr = Request(Opcode::kRead, 1, byte, 1, 0);
  wr.remote_addr = remote.addr;
  wr.rkey = remote.rkey;
  EXPECT_EQ(Run(*ep, {wr}).code(), absl::StatusCode::kPermissionDenied);
}

TEST_P(TransportConformanceTest,
       TwoLanesToOnePeerWorkConcurrentlyFromTwoThreads) {
  constexpr int kRounds = 200;
  constexpr uint64_t kCounter = 8 << 20;
  std::unique_ptr<Endpoint> lanes[2] = {Connect(), Connect()};
  ASSERT_TRUE(lanes[0] != nullptr && lanes[1] != nullptr);
  std::atomic<int> failures{0};
  // Buffers come from the (single-threaded) arena before the threads start.
  uint8_t* data[2] = {Local(4096), Local(4096)};
  uint8_t* back[2] = {Local(4096), Local(4096)};
  uint64_t* old = Local<uint64_t>(2);
  auto work = [&](int lane) {
    Endpoint& ep = *lanes[lane];
    std::mt19937_64 rng(seed_ + lane);
    const uint64_t area = (1 << 20) * (lane + 1);
    for (int i = 0; i < kRounds; ++i) {
      for (int b = 0; b < 4096; ++b)
        data[lane][b] = static_cast<uint8_t>(rng());
      std::vector<WorkRequest> batch = {
          Request(Opcode::kWrite, 1, data[lane], 4096, area),
          Request(Opcode::kRead, 2, back[lane], 4096, area),
          Atomic(Opcode::kFetchAdd, 3, &old[lane], kCounter, 1)};
      std::vector<Completion> c(3);
      if (!PostAndWait(ep, batch, absl::MakeSpan(c), kTimeout).ok() ||
          std::memcmp(back[lane], data[lane], 4096) != 0) {
        failures.fetch_add(1);
      }
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*node_word(kCounter), 2u * kRounds);
}

TEST_P(TransportConformanceTest, PeerDeathMakesEndpointUnavailable) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  uint64_t& value = *Local<uint64_t>(1);
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 1, &value, 8, 0)}).ok());
  backend_->KillNode();
  absl::Status status = Run(*ep, {Request(Opcode::kRead, 2, &value, 8, 0)});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_FALSE(ep->healthy());
  EXPECT_EQ(ep->Post({Request(Opcode::kRead, 3, &value, 8, 0)}).code(),
            absl::StatusCode::kUnavailable);
  auto again = backend_->client().Connect(address_, nullptr);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable)
      << again.status();
}

TEST_P(TransportConformanceTest, ConnectToUnreachableAddressIsUnavailable) {
  auto ep = backend_->client().Connect(backend_->UnreachableAddress(), nullptr);
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kUnavailable) << ep.status();
}

TEST_P(TransportConformanceTest, MalformedAddressIsInvalidArgument) {
  for (const std::string& address : backend_->MalformedAddresses()) {
    auto ep = backend_->client().Connect(address, nullptr);
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << address << "': " << ep.status();
  }
}

TEST_P(TransportConformanceTest, InvalidLocalRequestIsInvalidArgument) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  uint64_t& word = *Local<uint64_t>(1);
  std::vector<WorkRequest> bad;
  bad.push_back(Atomic(Opcode::kCompareSwap, 1, &word, 0, 0, 1));
  bad.back().length = 4;
  bad.push_back(Atomic(Opcode::kFetchAdd, 2, &word, 4, 1));  // misaligned
  bad.push_back(Request(Opcode::kRead, 3, &word, 0, 0));     // empty
  bad.push_back(Request(Opcode::kRead, 4, nullptr, 8, 0));   // no buffer
  bad.push_back(Request(Opcode::kRead, 5, &word, kMaxTransferBytes + 8, 0));
  bad.push_back(Request(static_cast<Opcode>(9), 6, &word, 8, 0));
  for (const WorkRequest& wr : bad) {
    // The bad request rides behind a good one: nothing may be posted.
    std::vector<WorkRequest> batch = {Request(Opcode::kRead, 0, &word, 8, 0),
                                      wr};
    EXPECT_EQ(ep->Post(batch).code(), absl::StatusCode::kInvalidArgument)
        << "wr_id " << wr.wr_id;
  }
  std::vector<WorkRequest> too_many(kMaxBatch + 1,
                                    Request(Opcode::kRead, 0, &word, 8, 0));
  EXPECT_EQ(ep->Post(too_many).code(), absl::StatusCode::kInvalidArgument);
  Completion c;
  auto n = ep->Poll(absl::MakeSpan(&c, 1), absl::ZeroDuration());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);  // nothing was posted
  EXPECT_TRUE(ep->healthy());
  *node_word(0) = 77;
  ASSERT_TRUE(Run(*ep, {Request(Opcode::kRead, 7, &word, 8, 0)}).ok());
  EXPECT_EQ(word, 77u);
}

TEST_P(TransportConformanceTest, PostingPastMaxOutstandingIsResourceExhausted) {
  auto ep = Connect();
  ASSERT_NE(ep, nullptr);
  *node_word(0) = 5;
  uint64_t* words = Local<uint64_t>(kMaxOutstanding + 1);
  std::vector<WorkRequest> batch;
  size_t posted = 0;
  while (posted < kMaxOutstanding) {
    batch.clear();
    for (size_t i = 0; i < kMaxBatch && posted + i < kMaxOutstanding; ++i) {
      batch.push_back(
          Request(Opcode::kRead, posted + i, &words[posted + i], 8, 0));
    }
    ASSERT_TRUE(ep->Post(batch).ok());
    posted += batch.size();
  }
  std::vector<WorkRequest> one = {
      Request(Opcode::kRead, posted, &words[posted], 8, 0)};
  EXPECT_EQ(ep->Post(one).code(), absl::StatusCode::kResourceExhausted);
  // Polling makes room again; the endpoint stays healthy.
  std::vector<Completion> done(kMaxOutstanding);
  size_t completed = 0;
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (completed < kMaxOutstanding && absl::Now() < deadline) {
    auto n = ep->Poll(absl::MakeSpan(done).subspan(completed),
                      absl::Milliseconds(100));
    ASSERT_TRUE(n.ok()) << n.status();
    completed += *n;
  }
  ASSERT_EQ(completed, kMaxOutstanding);
  EXPECT_EQ(words[kMaxOutstanding - 1], 5u);
  ASSERT_TRUE(Run(*ep, one).ok());
  EXPECT_EQ(words[posted], 5u);
}

TEST_P(TransportConformanceTest, RegisterMemoryRejectsNullOrEmpty) {
  uint8_t byte;
  EXPECT_EQ(backend_->node().RegisterMemory(nullptr, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->node().RegisterMemory(&byte, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(TransportConformanceTest, ListenTwiceIsFailedPrecondition) {
  EXPECT_EQ(backend_->node().Listen(backend_->bind()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A variant ("uc_lossy") is named after its backend and an underscore.
  EXPECT_EQ(backend_->node().name(),
            GetParam().substr(0, GetParam().find('_')));
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportConformanceTest,
                         ::testing::ValuesIn(BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace meshpool::rdma
