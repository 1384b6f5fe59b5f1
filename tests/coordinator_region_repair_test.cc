// coordinator/region_repair: planning new homes for lost stripe copies, and
// the repairer's allocate-copy-record sequence over fake nodes and a fake
// copier (no network, no bytes; tests/client_region_repair_sim_test.cc
// moves real bytes).
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/region_repair.h"
#include "coordinator/region_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/region_layout.h"
#include "tests/fake_env.h"
#include "tests/fake_region_nodes.h"

namespace meshpool::coordinator {
namespace {

using testing::Entry;
using testing::FakeNodes;
using ::testing::HasSubstr;
using testing::kMiB;
using testing::kSlab;

class RegionRepairTest : public ::testing::Test {
 protected:
  void AddNode(const std::string& id, uint64_t free_slabs) {
    nodes_.Add(id, free_slabs);
    ASSERT_TRUE(state_->UpsertNode(Entry(id)).ok());
  }
  proto::RegionInfo Create(const std::string& name, uint64_t size,
                           uint32_t replicas) {
    proto::CreateRegionRequest request;
    request.set_name(name);
    request.set_size(size);
    request.set_stripe_bytes(kMiB);
    request.set_replicas(replicas);
    absl::StatusOr<proto::RegionInfo> info = table_.Create(request);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : proto::RegionInfo();
  }
  proto::ClusterMap Map() { return *state_->Snapshot(); }
  std::vector<RegionTable::LiveNode> Live() {
    size_t live = 0;
    absl::StatusOr<std::vector<RegionTable::LiveNode>> nodes =
        table_.FreshLiveNodes(live);
    EXPECT_TRUE(nodes.ok());
    return nodes.ok() ? *nodes : std::vector<RegionTable::LiveNode>();
  }
  // Every stripe's copies: on distinct nodes, none on `dead` (read from
  // the table's entries: a plan's new extents have no slabs yet).
  static void ExpectDistinctLiveHomes(const proto::RegionInfo& info,
                                      const std::string& dead) {
    ASSERT_GT(info.stripe_extents_size(), 0);
    const size_t stripes = info.stripe_extents(0).size() / 2;
    for (size_t s = 0; s < stripes; ++s) {
      std::set<std::string> homes;
      for (const std::string& entries : info.stripe_extents()) {
        const int e = static_cast<uint8_t>(entries[2 * s]) |
                      static_cast<uint8_t>(entries[2 * s + 1]) << 8;
        ASSERT_LT(e, info.extents_size());
        EXPECT_NE(info.extents(e).node_id(), dead) << "stripe " << s;
        homes.insert(info.extents(e).node_id());
      }
      EXPECT_EQ(homes.size(), static_cast<size_t>(info.stripe_extents_size()))
          << "stripe " << s;
    }
  }

  std::unique_ptr<CoordinatorState> state_ = NewInMemoryCoordinatorState();
  FakeNodes nodes_;
  testing::FakeEnv env_{absl::FromUnixMillis(1234)};
  RegionTable table_{state_.get(), &nodes_, &env_};
};

TEST_F(RegionRepairTest, HealthCountsDegradedAndLostStripes) {
  for (const char* id : {"n1", "n2", "n3"}) AddNode(id, 16);
  const proto::RegionInfo two = Create("two", 12 * kMiB, 2);
  const proto::RegionInfo one = Create("one", 12 * kMiB, 1);
  EXPECT_EQ(HealthOf(two, Map()).state(), proto::REGION_HEALTHY);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  const proto::RegionHealth degraded = HealthOf(two, Map());
  EXPECT_EQ(degraded.state(), proto::REGION_DEGRADED);
  EXPECT_EQ(degraded.stripes_lost(), 0u);
  // n1 held 2/3 of the 24 copies' stripes' share: 8 stripes lost a copy.
  EXPECT_EQ(degraded.stripes_degraded(), 8u);
  const proto::RegionHealth lost = HealthOf(one, Map());
  EXPECT_EQ(lost.state(), proto::REGION_LOST);
  EXPECT_EQ(lost.stripes_lost(), 4u);
  // A node that restarted (new incarnation) lost its copies too.
  proto::NodeEntry restarted = Entry("n2");
  restarted.mutable_info()->set_incarnation(43);
  ASSERT_TRUE(state_->UpsertNode(restarted).ok());
  EXPECT_EQ(HealthOf(two, Map()).stripes_lost(), 4u);
  // What GetRegion and ListRegions report.
  absl::StatusOr<proto::RegionInfo> got = table_.Get("two");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->health().state(), proto::REGION_LOST);
  absl::StatusOr<std::vector<proto::RegionInfo>> listed = table_.List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].health().state(), proto::REGION_LOST);
}

TEST_F(RegionRepairTest, PlanGivesEachLostCopyANodeWithoutThatStripe) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  const proto::RegionInfo info = Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n2").ok());
  const proto::RegionHealth before = HealthOf(info, Map());
  ASSERT_EQ(before.state(), proto::REGION_DEGRADED);
  absl::StatusOr<RepairPlan> plan = PlanRepair(info, Map(), Live());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->copies_placed, before.stripes_degraded());
  EXPECT_EQ(plan->copies_unplaced, 0u);
  EXPECT_EQ(plan->bytes, plan->copies_placed * kMiB);
  EXPECT_EQ(plan->repaired.layout_version(), 1u);
  EXPECT_EQ(plan->repaired.region_id(), info.region_id());
  ExpectDistinctLiveHomes(plan->repaired, "n2");
  // n2's extent is gone; every new extent is on a live node and names the
  // copies it was planned for.
  uint64_t planned = 0;
  for (size_t i = 0; i < plan->new_extents.size(); ++i) {
    const proto::RegionExtent& e = plan->repaired.extents(plan->new_extents[i]);
    EXPECT_NE(e.node_id(), "n2");
    EXPECT_EQ(e.node_id(), plan->nodes[i].node_id());
    EXPECT_EQ(e.slab_offsets_size(), 0);  // not allocated yet
    planned += plan->copies[i];
  }
  EXPECT_EQ(planned, plan->copies_placed);
  for (const proto::RegionExtent& e : plan->repaired.extents())
    EXPECT_NE(e.node_id(), "n2");
}

TEST_F(RegionRepairTest, PlanPutsNewCopiesBesideOtherStripesOfTheSameRegion) {
  // Every survivor already holds an extent of the region: the new copies
  // go to second extents on them, never beside their own stripe's copy.
  for (const char* id : {"n1", "n2", "n3"}) AddNode(id, 16);
  const proto::RegionInfo info = Create("r", 9 * kMiB, 2);
  ASSERT_EQ(info.extents_size(), 3);
  ASSERT_TRUE(state_->MarkDead("n3").ok());
  absl::StatusOr<RepairPlan> plan = PlanRepair(info, Map(), Live());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->copies_placed, 0u);
  EXPECT_EQ(plan->copies_unplaced, 0u);
  ExpectDistinctLiveHomes(plan->repaired, "n3");
  std::map<std::string, int> extents_on;
  for (const proto::RegionExtent& e : plan->repaired.extents())
    ++extents_on[e.node_id()];
  EXPECT_EQ(extents_on["n1"] + extents_on["n2"], 4);
}

TEST_F(RegionRepairTest, PlanLeavesCopiesWithNoSourceOrNoRoom) {
  for (const char* id : {"n1", "n2"}) AddNode(id, 16);
  const proto::RegionInfo single = Create("single", 4 * kMiB, 1);
  const proto::RegionInfo pair = Create("pair", 4 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  // A stripe whose only copy died has no source.
  absl::StatusOr<RepairPlan> plan = PlanRepair(single, Map(), Live());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->copies_placed, 0u);
  EXPECT_GT(plan->copies_unplaced, 0u);
  EXPECT_EQ(plan->repaired.layout_version(), 0u);
  // The one survivor holds the other copy of every stripe.
  plan = PlanRepair(pair, Map(), Live());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->copies_placed, 0u);
  EXPECT_EQ(plan->copies_unplaced, 4u);
}

TEST_F(RegionRepairTest, PlanStopsAtTheNodesFreeMemory) {
  for (const char* id : {"n1", "n2"}) AddNode(id, 16);
  AddNode("n3", 1);  // room for 4 one-MiB stripes
  const proto::RegionInfo info = Create("r", 8 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  nodes_.With("n3", [](FakeNodes::Node& n) { n.free_slabs = 1; });
  absl::StatusOr<RepairPlan> plan = PlanRepair(info, Map(), Live());
  ASSERT_TRUE(plan.ok());
  const uint64_t lost = HealthOf(info, Map()).stripes_degraded();
  // Lost copies whose survivor is n2 can go only to n3, 4 at most; those
  // whose survivor is n3 can go to n2.
  EXPECT_EQ(plan->copies_placed + plan->copies_unplaced, lost);
  for (size_t i = 0; i < plan->nodes.size(); ++i) {
    if (plan->nodes[i].node_id() == "n3") {
      EXPECT_LE(plan->copies[i], 4u);
    }
  }
}

// A copier that records what it was asked and answers `result`.
struct FakeCopier {
  StripeCopier Get() {
    return [this](const proto::RegionInfo& current,
                  const proto::RegionInfo& repaired, CopyPass pass,
                  const RepairProgress& progress) {
      calls.push_back({current, repaired});
      passes.push_back(pass);
      if (during) during();
      if (!progress(1)) return absl::CancelledError("stopped");
      return result;
    };
  }
  StripeCopierFactory Factory() {
    return [this](const std::string&) -> absl::StatusOr<StripeCopier> {
      return Get();
    };
  }
  std::vector<std::pair<proto::RegionInfo, proto::RegionInfo>> calls;
  std::vector<CopyPass> passes;
  absl::Status result;
  std::function<void()> during;
};

TEST_F(RegionRepairTest, RepairRecordsTheNewLayoutAndBumpsTheEpoch) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  const proto::RegionInfo info = Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  const uint64_t epoch = Map().epoch();
  FakeCopier copier;
  RegionRepairer repairer(state_.get(), &table_, copier.Factory(),
                          "coordinator", &env_);
  EXPECT_EQ(repairer.RepairOnce(), 1u);
  ASSERT_EQ(copier.calls.size(), 1u);
  EXPECT_EQ(copier.calls[0].first.layout_version(), 0u);
  absl::StatusOr<proto::RegionInfo> got = table_.Get("r");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->health().state(), proto::REGION_HEALTHY);
  EXPECT_EQ(got->layout_version(), 1u);
  EXPECT_GT(Map().epoch(), epoch);  // clients refetch the layout
  ExpectDistinctLiveHomes(*got, "n1");
  // New extents hold their slabs under fresh ids, on the nodes.
  std::set<uint64_t> fresh;
  for (const proto::RegionExtent& e : got->extents()) {
    if (e.allocation_id() == 0) continue;
    EXPECT_NE(e.allocation_id(), info.region_id());
    fresh.insert(e.allocation_id());
    std::vector<uint64_t> held = nodes_.HeldIds(e.node_id());
    EXPECT_NE(std::find(held.begin(), held.end(), e.allocation_id()),
              held.end());
    EXPECT_GT(e.slab_offsets_size(), 0);
  }
  EXPECT_FALSE(fresh.empty());
  // Nothing more to do; a second pass a settle later checks the copies
  // once more (one more copier call), then nothing.
  env_.Advance(kRepairSettle);
  EXPECT_EQ(repairer.RepairOnce(), 0u);
  ASSERT_EQ(copier.calls.size(), 2u);
  EXPECT_EQ(copier.passes[0], CopyPass::kFill);
  EXPECT_EQ(copier.passes[1], CopyPass::kRecheck);
  EXPECT_EQ(repairer.RepairOnce(), 0u);
  EXPECT_EQ(copier.calls.size(), 2u);
  // Deleting the region frees the repair's allocations too.
  ASSERT_TRUE(table_.Delete("r").ok());
  for (const char* id : {"n2", "n3", "n4"})
    EXPECT_EQ(nodes_.Held(id), 0u) << id;
}

TEST_F(RegionRepairTest, FailedCopyFreesWhatItAllocatedAndShowsWhy) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  const proto::RegionInfo info = Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  std::map<std::string, uint64_t> held;
  for (const char* id : {"n2", "n3", "n4"}) held[id] = nodes_.Held(id);
  FakeCopier copier;
  copier.result = absl::UnavailableError("node n3 went away");
  RegionRepairer repairer(state_.get(), &table_, copier.Factory(),
                          "coordinator", &env_);
  EXPECT_EQ(repairer.RepairOnce(), 0u);
  for (const char* id : {"n2", "n3", "n4"})
    EXPECT_EQ(nodes_.Held(id), held[id]) << id;
  absl::StatusOr<proto::RegionInfo> got = table_.Get("r");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->health().state(), proto::REGION_DEGRADED);
  EXPECT_THAT(got->health().repair_error(), HasSubstr("went away"));
  EXPECT_EQ(got->layout_version(), 0u);
  // The next pass succeeds and clears the error.
  copier.result = absl::OkStatus();
  EXPECT_EQ(repairer.RepairOnce(), 1u);
  got = table_.Get("r");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->health().state(), proto::REGION_HEALTHY);
  EXPECT_EQ(got->health().repair_error(), "");
}

TEST_F(RegionRepairTest, RegionDeletedWhileCopyingIsNotRecordedAgain) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  FakeCopier copier;
  copier.during = [&] { ASSERT_TRUE(table_.Delete("r").ok()); };
  RegionRepairer repairer(state_.get(), &table_, copier.Factory(),
                          "coordinator", &env_);
  EXPECT_EQ(repairer.RepairOnce(), 0u);
  EXPECT_TRUE(absl::IsNotFound(table_.Get("r").status()));
  for (const char* id : {"n2", "n3", "n4"})
    EXPECT_EQ(nodes_.Held(id), 0u) << id;
}

TEST_F(RegionRepairTest, StopDuringACopyFreesItsMemory) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  std::map<std::string, uint64_t> held;
  for (const char* id : {"n2", "n3", "n4"}) held[id] = nodes_.Held(id);
  FakeCopier copier;
  RegionRepairer repairer(state_.get(), &table_, copier.Factory(),
                          "coordinator", &env_);
  bool stop = false;
  copier.during = [&] { stop = true; };
  EXPECT_EQ(repairer.RepairOnce([&] { return stop; }), 0u);
  for (const char* id : {"n2", "n3", "n4"})
    EXPECT_EQ(nodes_.Held(id), held[id]) << id;
  EXPECT_EQ(table_.Get("r")->layout_version(), 0u);
}

TEST_F(RegionRepairTest, ReconcileKeepsRepairAllocations) {
  for (const char* id : {"n1", "n2", "n3", "n4"}) AddNode(id, 16);
  Create("r", 16 * kMiB, 2);
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  FakeCopier copier;
  // Reconcile runs while the copy is in progress, and again after: the
  // nodes report every allocation they hold.
  auto report = [&] {
    for (const char* id : {"n2", "n3", "n4"}) {
      proto::NodeStats stats;
      for (uint64_t held : nodes_.HeldIds(id)) stats.add_region_ids(held);
      ASSERT_TRUE(state_->RecordHeartbeat(id, 0, stats).ok());
    }
  };
  copier.during = [&] {
    report();
    EXPECT_EQ(table_.Reconcile(), 0u);
  };
  RegionRepairer repairer(state_.get(), &table_, copier.Factory(),
                          "coordinator", &env_);
  EXPECT_EQ(repairer.RepairOnce(), 1u);
  report();
  EXPECT_EQ(table_.Reconcile(), 0u);
  EXPECT_EQ(table_.Get("r")->health().state(), proto::REGION_HEALTHY);
}

}  // namespace
}  // namespace meshpool::coordinator
