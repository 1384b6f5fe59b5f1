// Re-replication end to end in one process: a coordinator whose repairer
// copies through its own client, four memory nodes, readers, all on the
// simulated fabric. A node dies under continuous reads of a replicated
// region: no read fails or returns wrong bytes, the lost copies come back
// on other nodes, and then another node can die with nothing lost.
#include <atomic>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client_test_peer.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "placement/coordinator_client.h"
#include "rdma/sim.h"
#include "store/store.h"
#include "tests/sim_cluster.h"
#include "tests/test_seed.h"
#include "tools/repair_copier.h"

namespace meshpool {
namespace {

constexpr int kNodes = 4;
constexpr uint64_t kSlabBytes = 1 << 20;
constexpr uint64_t kStripeBytes = 64 << 10;
constexpr uint64_t kRegionBytes = 2 * kSlabBytes + 12345;

std::string NodeName(int i) { return std::string("node-") + char('a' + i); }

class RegionRepairSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
    std::shared_ptr<rdma::SimFabric> fabric = rdma::SimFabric::Create(seed_);
    coordinator::CoordinatorOptions copts;
    copts.heartbeat_interval = absl::Milliseconds(100);
    copts.dead_after = absl::Milliseconds(600);
    copts.repair_every = absl::Milliseconds(100);
    copts.stripe_copier =
        tools::ClientStripeCopier([fabric](const std::string& address) {
          ClientOptions options = testing::SimCluster::DefaultClientOptions();
          options.coordinator = address;
          return ClientTestPeer::ConnectThrough(
              options, fabric->CreateTransport("repairer"));
        });
    auto cluster = testing::SimCluster::Start(fabric, std::move(copts));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    for (int i = 0; i < kNodes; ++i) {
      store::NodeOptions options;
      options.capacity_bytes = 16 << 20;
      options.slab_bytes = kSlabBytes;
      options.node_id = NodeName(i);
      auto node = cluster_->AddNode(options);
      ASSERT_TRUE(node.ok()) << node.status();
      nodes_.push_back(*node);
    }
    auto client = cluster_->Connect("client-a");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::string RandomBytes(size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng_());
    return s;
  }

  // A region of kRegionBytes with two copies of every stripe, holding
  // fresh random bytes (returned in *data). Null (after a test failure)
  // when it cannot be made.
  std::unique_ptr<Region> CreateWritten(const std::string& name,
                                        std::string* data) {
    RegionOptions options;
    options.stripe_bytes = kStripeBytes;
    options.replicas = 2;
    auto region = CreateRegion(*client_, name, kRegionBytes, options);
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return nullptr;
    *data = RandomBytes(kRegionBytes);
    absl::Status written = (*region)->Write(0, *data);
    EXPECT_TRUE(written.ok()) << written;
    if (!written.ok()) return nullptr;
    return *std::move(region);
  }

  // The nodes holding any of `name`'s copies.
  std::set<std::string> Holders(const std::string& name) {
    auto regions = ListRegions(*client_, name);
    EXPECT_TRUE(regions.ok()) << regions.status();
    if (!regions.ok() || regions->empty()) return {};
    return {(*regions)[0].nodes.begin(), (*regions)[0].nodes.end()};
  }

  // Waits (up to 30 s) for `name` to report `state`; returns how long.
  absl::Duration AwaitHealth(const std::string& name, RegionHealthState state) {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < absl::Seconds(30)) {
      auto regions = ListRegions(*client_, name);
      if (regions.ok() && !regions->empty() &&
          (*regions)[0].health.state == state) {
        return absl::Now() - start;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << name << " never became " << RegionHealthName(state);
    return absl::InfiniteDuration();
  }

  void Kill(int i) {
    cluster_->fabric().KillNode(NodeName(i));
    nodes_[i]->Shutdown();
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unique_ptr<testing::SimCluster> cluster_;  // before the clients
  std::vector<store::Node*> nodes_;
  std::unique_ptr<Client> client_;
};

TEST_F(RegionRepairSimTest, KilledNodesCopiesComeBackWhileReadsNeverFail) {
  std::string data;
  std::unique_ptr<Region> region = CreateWritten("model", &data);
  ASSERT_NE(region, nullptr);
  const std::set<std::string> before = Holders("model");
  ASSERT_EQ(before.size(), static_cast<size_t>(kNodes))
      << "placed on every node";

  // Readers on their own client, reading the whole region over and over.
  auto reader_client = cluster_->Connect("reader");
  ASSERT_TRUE(reader_client.ok());
  auto reader_region = OpenRegion(**reader_client, "model");
  ASSERT_TRUE(reader_region.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, failures{0};
  std::string first_failure;
  std::thread reader([&] {
    std::string out(kRegionBytes, '\0');
    while (!stop.load()) {
      absl::Status s = (*reader_region)->Read(0, absl::MakeSpan(out));
      ++reads;
      if (!s.ok() || out != data) {
        if (failures++ == 0)
          first_failure = s.ok() ? "wrong bytes" : s.ToString();
      }
    }
  });

  Kill(1);
  const absl::Duration degraded =
      AwaitHealth("model", RegionHealthState::kDegraded);
  const absl::Duration healthy =
      AwaitHealth("model", RegionHealthState::kHealthy);
  std::cout << "node-b killed: degraded after " << degraded
            << ", healthy again after " << healthy << " (seed " << seed_
            << ")\n";
  // Keep reading a while on the repaired layout.
  absl::SleepFor(absl::Milliseconds(300));
  stop = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0)
      << first_failure << " (" << reads.load() << " reads)";
  EXPECT_GT(reads.load(), 0);
  const std::set<std::string> after = Holders("model");
  EXPECT_EQ(after.count(NodeName(1)), 0u);

  // Every stripe has two live copies again: another node may die and every
  // byte is still there, through the old handles (they fetched the new
  // layout) and a new one. Verify checks every copy, on its node.
  Kill(2);
  AwaitHealth("model", RegionHealthState::kDegraded);
  std::string out(kRegionBytes, '\0');
  for (Region* r : {region.get(), reader_region->get()}) {
    absl::Status s = r->Read(0, absl::MakeSpan(out));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out, data);
  }
  auto reopened = OpenRegion(*client_, "model");
  ASSERT_TRUE(reopened.ok());
  ASSERT_TRUE((*reopened)->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, data);
  AwaitHealth("model", RegionHealthState::kHealthy);
  absl::Status verified = (*reopened)->Verify(0, data);
  EXPECT_TRUE(verified.ok()) << verified;
}

TEST_F(RegionRepairSimTest, ReadUsesAnotherCopyBeforeTheCoordinatorKnows) {
  std::string data;
  std::unique_ptr<Region> region = CreateWritten("r", &data);
  ASSERT_NE(region, nullptr);
  // The node's memory is gone; the coordinator has not noticed.
  cluster_->fabric().KillNode(NodeName(0));
  std::string out(kRegionBytes, '\0');
  absl::Status s = region->Read(0, absl::MakeSpan(out));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, data);
}

// The coordinator has declared a node dead, but this client's map watch
// has not told it yet: Verify checks the copies that are live, instead of
// failing Unavailable on the dead node (which it did when the watch lagged
// under load).
TEST_F(RegionRepairSimTest, VerifySkipsANodeDeclaredDeadBeforeTheWatchSaysSo) {
  std::string data;
  std::unique_ptr<Region> region = CreateWritten("v", &data);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(region->Verify(0, data).ok());
  ClientTestPeer::IgnoreMapWatch(*client_);
  Kill(0);
  AwaitHealth("v", RegionHealthState::kDegraded);
  absl::Status verified = region->Verify(0, data);
  EXPECT_TRUE(verified.ok()) << verified;
  // A wrong byte is still found on the live copies.
  std::string wrong = data;
  wrong[kRegionBytes - 1] ^= 1;
  EXPECT_EQ(region->Verify(0, wrong).code(), absl::StatusCode::kDataLoss);
}

TEST_F(RegionRepairSimTest, WriteAfterTheRepairReachesTheNewCopies) {
  std::string data;
  std::unique_ptr<Region> region = CreateWritten("w", &data);
  ASSERT_NE(region, nullptr);
  Kill(3);
  AwaitHealth("w", RegionHealthState::kDegraded);
  AwaitHealth("w", RegionHealthState::kHealthy);
  // The handle from before the repair writes every copy of the new layout
  // once the map watch delivers the epoch the repair bumped (a write just
  // before may still go out on the old layout): a fresh handle's Verify,
  // which hashes every copy of the new layout, says when.
  const std::string update = RandomBytes(5 * kStripeBytes);
  data.replace(kStripeBytes, update.size(), update);
  auto fresh = OpenRegion(*client_, "w");
  ASSERT_TRUE(fresh.ok());
  absl::Status verified;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::Status wrote = region->Write(kStripeBytes, update);
    ASSERT_TRUE(wrote.ok()) << wrote;
    verified = (*fresh)->Verify(0, data);
  } while (!verified.ok() && absl::Now() < deadline);
  EXPECT_TRUE(verified.ok()) << verified;
  // ...so losing another node loses nothing written after the repair.
  Kill(0);
  AwaitHealth("w", RegionHealthState::kDegraded);
  std::string out(kRegionBytes, '\0');
  absl::Status read = region->Read(0, absl::MakeSpan(out));
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(out, data);
}

}  // namespace
}  // namespace meshpool
