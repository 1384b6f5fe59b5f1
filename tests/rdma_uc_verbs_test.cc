// The uc backend over real UC queue pairs (label "verbs": run in the
// Soft-RoCE VM, tools/vm/run_verbs_suite.sh), under the thunderbolt profile:
// Apple's QP budget is enforced and freed again, transfers far above a
// frame cross injected loss intact, a client's lanes share one QP per
// node device (and make a new one when the node restarted), and inside the VM,
// with the client on rxe1 and the node on rxe0 so that frames cross the veth
// pair, the link's own loss (1 %, 5 %), reordering and duplication (tc netem)
// and a link taken down for 3 s lose no byte and hang nothing.
#include <atomic>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/uc.h"
#include "tests/test_seed.h"
#include "tests/verbs_test_util.h"
#include "tests/verbs_vm_util_linux.h"

namespace meshpool::rdma {
namespace {

using ::meshpool::testing::TestSeed;

constexpr size_t kNodeBytes = 32 << 20;
constexpr absl::Duration kOpTimeout = absl::Seconds(30);

UcOptions Thunderbolt(const std::string& device, const std::string& name) {
  UcOptions options;
  options.link = UcLinkKind::kVerbs;
  options.profile = UcProfile::kThunderbolt;
  options.verbs.devices = {device};
  options.verbs.self_name = name;
  options.connect_timeout = absl::Seconds(3);
  return options;
}

// A uc node serving kNodeBytes over UC QPs.
struct Node {
  static std::unique_ptr<Node> Start(const UcOptions& options) {
    auto node = std::make_unique<Node>();
    auto transport = CreateUcTransport(options);
    EXPECT_TRUE(transport.ok()) << transport.status();
    if (!transport.ok()) return nullptr;
    node->transport = *std::move(transport);
    node->memory.assign(kNodeBytes, 0);
    auto region =
        node->transport->RegisterMemory(node->memory.data(), kNodeBytes);
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return nullptr;
    node->region = *std::move(region);
    auto address = node->transport->Listen("ignored");
    EXPECT_TRUE(address.ok()) << address.status();
    if (!address.ok()) return nullptr;
    node->address = *address;
    return node;
  }
  // The client's Handshake RPC, in process.
  Handshake Router() {
    return [this](const std::string& request) {
      return transport->AcceptHandshake(request, DataAccess::Unrestricted());
    };
  }

  std::unique_ptr<Transport> transport;
  std::vector<uint8_t> memory;
  std::unique_ptr<MemoryRegion> region;
  std::string address;
};

class UcVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MESHPOOL_SKIP_WITHOUT_VERBS();
    device_ = ::meshpool::testing::VerbsTestDevice();
    seed_ = TestSeed();
    rng_.seed(seed_);
  }

  std::vector<uint8_t> Random(size_t n) {
    std::vector<uint8_t> out(n);
    for (uint8_t& b : out) b = static_cast<uint8_t>(rng_());
    return out;
  }

  // One WRITE or READ of `length` bytes at `offset`, waited for.
  absl::Status Transfer(Endpoint& ep, Node& node, Opcode op, void* local,
                        uint32_t length, uint64_t offset) {
    WorkRequest wr;
    wr.wr_id = ++next_id_;
    wr.opcode = op;
    wr.local = local;
    wr.length = length;
    wr.remote_addr = node.region->remote().addr + offset;
    wr.rkey = node.region->remote().rkey;
    Completion done;
    return PostAndWait(ep, {&wr, 1}, {&done, 1}, kOpTimeout);
  }

  std::string device_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  uint64_t next_id_ = 0;
};

TEST_F(UcVerbsTest, ThunderboltProfileRefusesTheEleventhQueuePairOnADevice) {
  auto node = Node::Start(Thunderbolt(device_, "node"));
  ASSERT_NE(node, nullptr);
  // A client transport takes one QP per node device however many lanes it
  // opens: ten clients (processes) take the node's whole budget.
  std::vector<std::unique_ptr<Transport>> clients;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (uint32_t i = 0; i <= kThunderboltMaxQpsPerDevice; ++i) {
    auto client =
        CreateUcTransport(Thunderbolt(device_, absl::StrCat("client-", i)));
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }
  for (uint32_t i = 0; i < kThunderboltMaxQpsPerDevice; ++i) {
    for (int lane = 0; lane < 2; ++lane) {
      auto ep = clients[i]->Connect(node->address, node->Router());
      ASSERT_TRUE(ep.ok()) << "client " << i << ": " << ep.status();
      endpoints.push_back(*std::move(ep));
    }
  }
  auto refused = clients.back()->Connect(node->address, node->Router());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_TRUE(absl::StrContains(
      refused.status().message(),
      absl::StrCat("all ", kThunderboltMaxQpsPerDevice, " UC queue pairs")))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), device_));

  // A client whose lanes all went away (the last saying so) gives its QP
  // back at once, not after kUcLinkUnusedTimeout.
  endpoints.pop_back();
  endpoints.pop_back();
  absl::StatusOr<std::unique_ptr<Endpoint>> again =
      absl::UnavailableError("not tried");
  const absl::Time closed = absl::Now();
  for (absl::Time deadline = absl::Now() + absl::Seconds(3);
       absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
    again = clients.back()->Connect(node->address, node->Router());
    if (again.ok()) break;
    ASSERT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  }
  ASSERT_TRUE(again.ok()) << again.status();
  std::cout << "a closed client's QP came back after " << absl::Now() - closed
            << std::endl;
  uint64_t word = 0;
  EXPECT_TRUE(Transfer(**again, *node, Opcode::kRead, &word, 8, 0).ok());
}

TEST_F(UcVerbsTest, ThirtyTwoLanesOnFourThreadsShareOneQueuePair) {
  auto node = Node::Start(Thunderbolt(device_, "node"));
  ASSERT_NE(node, nullptr);
  auto client = CreateUcTransport(Thunderbolt(device_, "client"));
  ASSERT_TRUE(client.ok()) << client.status();
  // More lanes than the node has QPs, and than one QP's queues are sized
  // for (kUcLanesPerLink): they share one, and every byte still arrives.
  constexpr int kThreads = 4;
  constexpr int kLanes = 32;
  std::vector<std::unique_ptr<Endpoint>> lanes;
  for (int i = 0; i < kLanes; ++i) {
    auto ep = (*client)->Connect(node->address, node->Router());
    ASSERT_TRUE(ep.ok()) << "lane " << i << ": " << ep.status();
    lanes.push_back(*std::move(ep));
  }
  constexpr size_t kSlice = kNodeBytes / kLanes;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed_ + t);
      for (int round = 0; round < 64; ++round) {
        const int lane = t + kThreads * (round % (kLanes / kThreads));
        const auto length = static_cast<uint32_t>(1 + rng() % (256 << 10));
        const size_t offset = lane * kSlice + rng() % (kSlice - length);
        std::vector<uint8_t> out(length), in(length);
        for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
        if (!Transfer(*lanes[lane], *node, Opcode::kWrite, out.data(), length,
                      offset)
                 .ok() ||
            !Transfer(*lanes[lane], *node, Opcode::kRead, in.data(), length,
                      offset)
                 .ok()) {
          ++failed;
          return;
        }
        if (in != out) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0) << "seed " << seed_;
  EXPECT_EQ(wrong.load(), 0) << "seed " << seed_;
  // The node still has all but one of its QPs for other clients.
  std::vector<std::unique_ptr<Transport>> others;
  std::vector<std::unique_ptr<Endpoint>> their;
  for (uint32_t i = 1; i < kThunderboltMaxQpsPerDevice; ++i) {
    auto other =
        CreateUcTransport(Thunderbolt(device_, absl::StrCat("other-", i)));
    ASSERT_TRUE(other.ok()) << other.status();
    auto ep = (*other)->Connect(node->address, node->Router());
    ASSERT_TRUE(ep.ok()) << "client " << i << ": " << ep.status();
    others.push_back(*std::move(other));
    their.push_back(*std::move(ep));
  }
}

TEST_F(UcVerbsTest, ALaneAfterTheNodeRestartedMakesANewQueuePair) {
  UcOptions options = Thunderbolt(device_, "node");
  options.connect_timeout = absl::Seconds(1);
  auto node = Node::Start(options);
  ASSERT_NE(node, nullptr);
  UcOptions client_options = Thunderbolt(device_, "client");
  client_options.connect_timeout = absl::Seconds(1);
  auto client = CreateUcTransport(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  // `idle` keeps the client's QP to the old node open across the restart.
  auto idle = (*client)->Connect(node->address, node->Router());
  ASSERT_TRUE(idle.ok()) << idle.status();
  const std::string old_address = node->address;
  node.reset();
  node = Node::Start(options);
  ASSERT_NE(node, nullptr);
  EXPECT_NE(node->address, old_address) << "a restarted node is a new instance";
  node->memory[16] = 9;
  // Dialled at its old address (as a link the node dropped while idle
  // would be), the old QP reaches no one: the lane's hello goes unanswered,
  // and it is made again on a new QP through the node's handshake.
  auto lane = (*client)->Connect(old_address, node->Router());
  ASSERT_TRUE(lane.ok()) << lane.status();
  uint64_t word = 0;
  ASSERT_TRUE(Transfer(**lane, *node, Opcode::kRead, &word, 8, 16).ok());
  EXPECT_EQ(word, 9u);
}

TEST_F(UcVerbsTest, SixteenMebibytesCrossInjectedLossIntact) {
  UcOptions node_options = Thunderbolt(device_, "node");
  UcOptions client_options = Thunderbolt(device_, "client");
  client_options.faults = {.drop = 0.05, .duplicate = 0.02, .seed = seed_};
  node_options.faults = {.drop = 0.05, .corrupt = 0.01, .seed = seed_ + 1};
  auto node = Node::Start(node_options);
  ASSERT_NE(node, nullptr);
  auto client = CreateUcTransport(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto ep = (*client)->Connect(node->address, node->Router());
  ASSERT_TRUE(ep.ok()) << ep.status();
  const uint32_t n = 16 << 20;
  std::vector<uint8_t> data = Random(n);
  ASSERT_TRUE(Transfer(**ep, *node, Opcode::kWrite, data.data(), n, 4096).ok());
  EXPECT_EQ(std::memcmp(node->memory.data() + 4096, data.data(), n), 0);
  std::vector<uint8_t> back(n);
  ASSERT_TRUE(Transfer(**ep, *node, Opcode::kRead, back.data(), n, 4096).ok());
  EXPECT_EQ(back, data);
}

// Inside the VM: the client on one rxe device and the node on the other,
// so that every frame crosses the veth pair, where tc netem acts.
class UcVerbsLinkFaultTest : public UcVerbsTest {
 protected:
  void SetUp() override {
    UcVerbsTest::SetUp();
    if (IsSkipped()) return;
    if (!::meshpool::testing::InsideVerbsVm()) {
      GTEST_SKIP() << "\n*** SKIPPED: changes the network; runs only inside "
                      "the Soft-RoCE VM (tools/vm/run_verbs_suite.sh)";
    }
    other_ = ::meshpool::testing::OtherActiveVerbsDevice(device_);
    ASSERT_FALSE(other_.empty()) << "the VM should have two rxe devices";
    auto netdev = ::meshpool::testing::NetdevOfVerbsDevice(other_);
    ASSERT_TRUE(netdev.ok()) << netdev.status();
    netdev_ = *netdev;
    node_ = Node::Start(Thunderbolt(device_, "node"));
    ASSERT_NE(node_, nullptr);
    auto client = CreateUcTransport(Thunderbolt(other_, "client"));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override {
    if (!qdisc_.empty()) {
      (void)::meshpool::testing::RunShell(
          absl::StrCat("tc qdisc del dev ", netdev_, " root"));
    }
  }
  void Netem(const std::string& spec) {
    auto loaded = ::meshpool::testing::RunShell("modprobe sch_netem");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    qdisc_ = spec;
    auto added = ::meshpool::testing::RunShell(
        absl::StrCat("tc qdisc add dev ", netdev_, " root netem ", spec));
    ASSERT_TRUE(added.ok()) << added.status();
    std::cout << "netem on " << netdev_ << ": " << spec << std::endl;
  }

  // Writes and reads back `rounds` random blocks of up to `max_bytes`;
  // every byte read must be the last one written.
  void Workload(Endpoint& ep, int rounds, uint32_t max_bytes) {
    std::vector<uint8_t> shadow(kNodeBytes, 0);
    const absl::Time start = absl::Now();
    for (int i = 0; i < rounds; ++i) {
      const uint32_t length = 1 + static_cast<uint32_t>(rng_() % max_bytes);
      const uint64_t offset = rng_() % (kNodeBytes - length);
      std::vector<uint8_t> data = Random(length);
      ASSERT_TRUE(
          Transfer(ep, *node_, Opcode::kWrite, data.data(), length, offset)
              .ok());
      std::memcpy(shadow.data() + offset, data.data(), length);
      std::vector<uint8_t> back(length);
      ASSERT_TRUE(
          Transfer(ep, *node_, Opcode::kRead, back.data(), length, offset)
              .ok());
      ASSERT_EQ(std::memcmp(back.data(), shadow.data() + offset, length), 0)
          << "round " << i << ": wrong bytes read back";
    }
    std::cout << rounds << " rounds took "
              << absl::FormatDuration(absl::Now() - start) << std::endl;
  }

  std::string other_;
  std::string netdev_;
  std::string qdisc_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<Transport> client_;
};

// A UC message of several packets is lost whole when one of its packets is
// lost or arrives out of order, so the link's packet faults reach the
// channel as lost frames (at the VM's 1024-byte RoCE MTU, a 4 KiB frame is
// four packets).
struct NetemCase {
  const char* name;
  const char* spec;  // tc netem's arguments
  int rounds;
  uint32_t max_bytes;
};

class UcVerbsNetemTest : public UcVerbsLinkFaultTest,
                         public ::testing::WithParamInterface<NetemCase> {};

TEST_P(UcVerbsNetemTest, WorkloadLosesNoByte) {
  auto ep = client_->Connect(node_->address, node_->Router());
  ASSERT_TRUE(ep.ok()) << ep.status();
  Netem(GetParam().spec);
  Workload(**ep, GetParam().rounds, GetParam().max_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    LinkFaults, UcVerbsNetemTest,
    ::testing::Values(NetemCase{"OnePercentLoss", "loss 1%", 8, 2 << 20},
                      NetemCase{"FivePercentLoss", "loss 5%", 6, 1 << 20},
                      NetemCase{"Reordering", "delay 1ms reorder 90% 50%", 6,
                                1 << 20},
                      NetemCase{"Duplication", "duplicate 5%", 6, 1 << 20}),
    [](const ::testing::TestParamInfo<NetemCase>& info) {
      return std::string(info.param.name);
    });

TEST_F(UcVerbsLinkFaultTest, LinkDownForThreeSecondsFailsUnavailableOrHeals) {
  auto ep = client_->Connect(node_->address, node_->Router());
  ASSERT_TRUE(ep.ok()) << ep.status();
  const uint32_t n = 8 << 20;
  std::vector<uint8_t> data = Random(n);
  ASSERT_TRUE(Transfer(**ep, *node_, Opcode::kWrite, data.data(), n, 0).ok());
  std::vector<uint8_t> back(n);
  absl::Status during;
  {
    auto down = ::meshpool::testing::DownedLink::TakeDown(netdev_);
    ASSERT_TRUE(down.ok()) << down.status();
    const absl::Time start = absl::Now();
    // Posted while the cable is out; the link comes back after 3 s.
    std::thread restore([&] {
      absl::SleepFor(absl::Seconds(3));
      EXPECT_TRUE((*down)->Restore().ok());
    });
    during = Transfer(**ep, *node_, Opcode::kRead, back.data(), n, 0);
    const absl::Duration took = absl::Now() - start;
    restore.join();
    std::cout << "READ across the outage: " << during << " after "
              << absl::FormatDuration(took) << std::endl;
    // Either it healed, or the channel's liveness (2 s) ended it; never a
    // hang, never another error.
    EXPECT_TRUE(during.ok() || absl::IsUnavailable(during)) << during;
    EXPECT_LT(took, absl::Seconds(10));
  }
  if (during.ok()) {
    EXPECT_EQ(back, data);
  } else {
    EXPECT_FALSE((*ep)->healthy());
  }
  // Either way a new endpoint reads the bytes intact.
  auto fresh = client_->Connect(node_->address, node_->Router());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<uint8_t> again(n);
  ASSERT_TRUE(
      Transfer(**fresh, *node_, Opcode::kRead, again.data(), n, 0).ok());
  EXPECT_EQ(again, data);
}

}  // namespace
}  // namespace meshpool::rdma
