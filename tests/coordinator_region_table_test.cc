// coordinator/region_table: the coordinator's region rules over a fake set of
// memory nodes (no network).
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/coordinator_state.h"
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

proto::CreateRegionRequest Request(const std::string& name, uint64_t size,
                                   uint64_t stripe_bytes = kMiB, uint32_t replicas = 1) {
  proto::CreateRegionRequest request;
  request.set_name(name);
  request.set_size(size);
  request.set_stripe_bytes(stripe_bytes);
  request.set_replicas(replicas);
  return request;
}

class RegionTableTest : public ::testing::Test {
 protected:
  // Three live nodes of 16 free 4 MiB slabs each.
  void SetUp() override {
    for (const char* id : {"n1", "n2", "n3"}) AddNode(id, 16);
  }
  void AddNode(const std::string& id, uint64_t free_slabs, uint64_t slab_bytes = kSlab,
               proto::NodeState state = proto::NODE_ALIVE) {
    nodes_.Add(id, free_slabs, slab_bytes);
    ASSERT_TRUE(state_->UpsertNode(Entry(id, slab_bytes, state)).ok());
  }
  uint64_t HeldEverywhere() {
    uint64_t slabs = 0;
    for (const char* id : {"n1", "n2", "n3", "n4"}) slabs += nodes_.Held(id);
    return slabs;
  }

  std::unique_ptr<CoordinatorState> state_ = NewInMemoryCoordinatorState();
  FakeNodes nodes_;
  testing::FakeEnv env_{absl::FromUnixMillis(1234)};
  RegionTable table_{state_.get(), &nodes_, &env_};
};

TEST_F(RegionTableTest, CreateGetListDelete) {
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("w/a", 30 * kMiB + 5));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "w/a");
  EXPECT_EQ(info->region_id(), 1u);
  EXPECT_EQ(info->stripe_bytes(), kMiB);
  EXPECT_EQ(info->replicas(), 1u);
  EXPECT_EQ(info->created_unix_ms(), 1234);
  ASSERT_EQ(info->extents_size(), 3);  // 31 stripes over 3 equal nodes
  absl::StatusOr<placement::RegionLayout> layout = placement::RegionLayout::Create(*info);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->stripes(), 31u);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(info->extents(e).incarnation(), 42u);
    EXPECT_EQ(info->extents(e).slab_bytes(), kSlab);
    EXPECT_EQ(static_cast<uint64_t>(info->extents(e).slab_offsets_size()),
              (layout->CopiesOn(e) + 3) / 4);
    EXPECT_EQ(nodes_.Held(info->extents(e).node_id()),
              static_cast<uint64_t>(info->extents(e).slab_offsets_size()));
    EXPECT_GE(layout->CopiesOn(e), 10u);
  }
  absl::StatusOr<proto::RegionInfo> got = table_.Get("w/a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->health().state(), proto::REGION_HEALTHY);
  got->clear_health();
  EXPECT_EQ(got->SerializeAsString(), info->SerializeAsString());
  ASSERT_TRUE(table_.Create(Request("w/b", kMiB)).ok());
  ASSERT_TRUE(table_.Create(Request("v", kMiB)).ok());
  absl::StatusOr<std::vector<proto::RegionInfo>> listed = table_.List("w/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name(), "w/a");
  EXPECT_EQ((*listed)[1].name(), "w/b");
  EXPECT_EQ((*listed)[0].stripe_extents_size(), 0);
  EXPECT_EQ((*listed)[0].extents_size(), 3);
  EXPECT_EQ((*listed)[0].extents(0).slab_offsets_size(), 0);
  EXPECT_EQ((*listed)[0].size(), 30 * kMiB + 5);

  ASSERT_TRUE(table_.Delete("w/a").ok());
  EXPECT_EQ(table_.Get("w/a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Delete("w/a").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table_.Delete("w/b").ok());
  ASSERT_TRUE(table_.Delete("v").ok());
  EXPECT_EQ(HeldEverywhere(), 0u);
  // Ids are never reused.
  absl::StatusOr<proto::RegionInfo> again = table_.Create(Request("w/a", kMiB));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->region_id(), 4u);
}

TEST_F(RegionTableTest, SharesFollowFreeSlabs) {
  AddNode("n4", 32);  // twice the free memory of the others
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 100 * kMiB));
  ASSERT_TRUE(info.ok()) << info.status();
  absl::StatusOr<placement::RegionLayout> layout = placement::RegionLayout::Create(*info);
  ASSERT_TRUE(layout.ok());
  for (int e = 0; e < info->extents_size(); ++e) {
    EXPECT_EQ(layout->CopiesOn(e), info->extents(e).node_id() == "n4" ? 40u : 20u)
        << info->extents(e).node_id();
  }
}

TEST_F(RegionTableTest, ReplicasLandOnDistinctNodes) {
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 20 * kMiB, kMiB, 3));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->replicas(), 3u);
  absl::StatusOr<placement::RegionLayout> layout = placement::RegionLayout::Create(*info);  // checks distinctness
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(table_.Create(Request("s", kMiB, kMiB, 4)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegionTableTest, DefaultStripeIsCappedAtTheSmallestSlab) {
  AddNode("n4", 64, kMiB);
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 10 * kMiB, 0, 0));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->stripe_bytes(), kMiB);
  EXPECT_EQ(info->replicas(), 1u);
  absl::StatusOr<proto::RegionInfo> big = table_.Create(Request("big", 10 * kMiB, 2 * kMiB));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("use at most 1048576"));
}

TEST_F(RegionTableTest, DefaultStripeIsFourMiBOnLargeSlabs) {
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 10 * kMiB, 0));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->stripe_bytes(), placement::kDefaultStripeBytes);
}

TEST_F(RegionTableTest, BadRequestsAreInvalidArgument) {
  for (const proto::CreateRegionRequest& bad :
       {Request("", kMiB), Request("a b", kMiB), Request("r", 0), Request("r", kMiB, 1000),
        Request("r", kMiB, kMiB, placement::kMaxReplicas + 1),
        Request("r", (placement::kMaxRegionStripes + 1) * placement::kStripeAlign, placement::kStripeAlign)}) {
    absl::StatusOr<proto::RegionInfo> info = table_.Create(bad);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.ShortDebugString() << " " << info.status();
  }
  absl::StatusOr<proto::RegionInfo> many =
      table_.Create(Request("r", (placement::kMaxRegionStripes + 1) * placement::kStripeAlign, placement::kStripeAlign));
  EXPECT_THAT(std::string(many.status().message()), HasSubstr("stripe_bytes of at least 8192"));
  EXPECT_EQ(HeldEverywhere(), 0u);
}

TEST_F(RegionTableTest, TakenNameIsAlreadyExists) {
  ASSERT_TRUE(table_.Create(Request("r", kMiB)).ok());
  absl::StatusOr<proto::RegionInfo> again = table_.Create(Request("r", kMiB));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(HeldEverywhere(), 1u);
}

TEST_F(RegionTableTest, NameIsReservedWhileCreateIsInFlight) {
  ASSERT_TRUE(table_.Create(Request("other", kMiB)).ok());
  nodes_.Stall();
  absl::StatusOr<proto::RegionInfo> first;
  std::thread creator([&] { first = table_.Create(Request("r", kMiB)); });
  nodes_.AwaitStalledCall();
  EXPECT_EQ(table_.Create(Request("r", kMiB)).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_.Rename("other", "r", true).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_.Get("r").status().code(), absl::StatusCode::kNotFound);
  nodes_.Release();
  creator.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(table_.Get("r").ok());
  EXPECT_TRUE(table_.Get("other").ok());
}

// A tenant at its quota is refused; other tenants and callers without a
// tenant create on, and a delete gives the quota back.
TEST_F(RegionTableTest, OneTenantsQuotaExhaustionLeavesOthersCreating) {
  absl::StatusOr<RegionQuotas> quotas =
      RegionQuotas::Parse("team-a=2:-,team-b=-:8MiB");
  ASSERT_TRUE(quotas.ok()) << quotas.status();
  RegionTable table(state_.get(), &nodes_, &env_, *quotas);
  ASSERT_TRUE(table.Create(Request("~team-a/r1", kMiB)).ok());
  ASSERT_TRUE(table.Create(Request("~team-a/r2", kMiB)).ok());
  absl::Status s = table.Create(Request("~team-a/r3", kMiB)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tenant 'team-a' holds 2 region(s)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'r3'"));
  const uint64_t held = HeldEverywhere();

  // Bytes count every replica: 6 MiB, then 2 x 2 MiB is over 8 MiB, and
  // 2 x 1 MiB fills it exactly.
  ASSERT_TRUE(table.Create(Request("~team-b/big", 6 * kMiB)).ok());
  s = table.Create(Request("~team-b/pair", 2 * kMiB, kMiB, 2)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("of the quota's 8MiB"));
  ASSERT_TRUE(table.Create(Request("~team-b/pair", kMiB, kMiB, 2)).ok());

  // Others are untouched: a third tenant, and callers without a tenant.
  EXPECT_TRUE(table.Create(Request("~team-c/r1", kMiB)).ok());
  EXPECT_TRUE(table.Create(Request("r1", kMiB)).ok());
  EXPECT_GT(HeldEverywhere(), held);

  ASSERT_TRUE(table.Delete("~team-a/r1").ok());
  EXPECT_TRUE(table.Create(Request("~team-a/r3", kMiB)).ok());
}

TEST_F(RegionTableTest, CreatesInProgressCountAgainstTheQuota) {
  absl::StatusOr<RegionQuotas> quotas = RegionQuotas::Parse("*=1:-");
  ASSERT_TRUE(quotas.ok()) << quotas.status();
  RegionTable table(state_.get(), &nodes_, &env_, *quotas);
  nodes_.Stall();
  absl::StatusOr<proto::RegionInfo> first;
  std::thread creator([&] { first = table.Create(Request("~t/one", kMiB)); });
  nodes_.AwaitStalledCall();
  EXPECT_EQ(table.Create(Request("~t/two", kMiB)).status().code(),
            absl::StatusCode::kResourceExhausted);
  nodes_.Release();
  creator.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(table.Create(Request("~t/two", kMiB)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.Create(Request("~u/two", kMiB)).ok());
}

TEST_F(RegionTableTest, PartialFailureFreesWhatWasAllocated) {
  nodes_.With("n2", [](FakeNodes::Node& n) {
    n.allocate_error = absl::ResourceExhaustedError("n2 filled up meanwhile");
  });
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 30 * kMiB));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("n2 filled up meanwhile"));
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("nothing was left allocated"));
  EXPECT_EQ(HeldEverywhere(), 0u);
  EXPECT_EQ(table_.Get("r").status().code(), absl::StatusCode::kNotFound);
  // The name is free again.
  nodes_.With("n2", [](FakeNodes::Node& n) { n.allocate_error = absl::OkStatus(); });
  EXPECT_TRUE(table_.Create(Request("r", 30 * kMiB)).ok());
}

TEST_F(RegionTableTest, NodeRestartedDuringCreateIsUnavailable) {
  nodes_.With("n3", [](FakeNodes::Node& n) {
    n.allocate_error = absl::FailedPreconditionError("node restarted");
  });
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 30 * kMiB));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HeldEverywhere(), 0u);
}

// A coordinator restarted without state counts region ids from 1 again
// while nodes still hold the old regions' slabs under those ids (and
// clients may still use them): a failed create must not free them.
TEST_F(RegionTableTest, CreateCollidingWithAnIdANodeHoldsLeavesThatRegionAlone) {
  nodes_.With("n2", [](FakeNodes::Node& n) {
    n.held[1] = 3;  // region 1 of the previous coordinator
    n.free_slabs -= 3;
  });
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 30 * kMiB));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nodes_.Held("n2"), 3u);
  EXPECT_EQ(HeldEverywhere(), 3u);
}

TEST_F(RegionTableTest, DeadAndSilentNodesAreSkippedAtCreate) {
  AddNode("n4", 64, kSlab, proto::NODE_DEAD);
  nodes_.With("n3", [](FakeNodes::Node& n) { n.silent = true; });
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 30 * kMiB));
  ASSERT_TRUE(info.ok()) << info.status();
  std::set<std::string> holders;
  for (const proto::RegionExtent& e : info->extents()) holders.insert(e.node_id());
  EXPECT_EQ(holders, (std::set<std::string>{"n1", "n2"}));
}

TEST_F(RegionTableTest, NoNodesAnswerIsUnavailableAndNoNodesIsFailedPrecondition) {
  for (const char* id : {"n1", "n2", "n3"}) {
    nodes_.With(id, [](FakeNodes::Node& n) { n.silent = true; });
  }
  EXPECT_EQ(table_.Create(Request("r", kMiB)).status().code(), absl::StatusCode::kUnavailable);
  std::unique_ptr<CoordinatorState> empty = NewInMemoryCoordinatorState();
  RegionTable table(empty.get(), &nodes_);
  absl::StatusOr<proto::RegionInfo> info = table.Create(Request("r", kMiB));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("meshpool node"));
}

TEST_F(RegionTableTest, TooLittleFreeMemoryIsResourceExhaustedSayingWhatIsFree) {
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 49 * kSlab));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("192MiB free"));
  EXPECT_EQ(HeldEverywhere(), 0u);
  EXPECT_TRUE(table_.Create(Request("r", 48 * kSlab)).ok());
}

TEST_F(RegionTableTest, RenameMovesTheNameAndReplaceFreesTheOldRegion) {
  ASSERT_TRUE(table_.Create(Request("staging", 8 * kMiB)).ok());
  ASSERT_TRUE(table_.Create(Request("live", 16 * kMiB)).ok());
  const uint64_t live_id = table_.Get("live")->region_id();
  EXPECT_EQ(table_.Rename("missing", "x", false).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Rename("staging", "live", false).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_.Rename("staging", "bad name", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_.Rename("staging", "staging", true).ok());
  EXPECT_TRUE(table_.Get("staging").ok());
  const uint64_t held_before = HeldEverywhere();
  ASSERT_TRUE(table_.Rename("staging", "live", true).ok());
  EXPECT_EQ(table_.Get("staging").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<proto::RegionInfo> live = table_.Get("live");
  ASSERT_TRUE(live.ok());
  EXPECT_NE(live->region_id(), live_id);
  EXPECT_EQ(live->size(), 8 * kMiB);
  EXPECT_LT(HeldEverywhere(), held_before);  // the old "live" was freed
  ASSERT_TRUE(table_.Rename("live", "next", false).ok());
  EXPECT_EQ(table_.Get("next")->name(), "next");
}

TEST_F(RegionTableTest, DeleteSkipsNodesThatDiedOrRestarted) {
  absl::StatusOr<proto::RegionInfo> info = table_.Create(Request("r", 30 * kMiB));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(state_->MarkDead("n1").ok());
  proto::NodeEntry restarted = Entry("n2");
  restarted.mutable_info()->set_incarnation(43);
  ASSERT_TRUE(state_->UpsertNode(restarted).ok());
  const int frees_before = nodes_.frees();
  ASSERT_TRUE(table_.Delete("r").ok());
  EXPECT_EQ(nodes_.frees() - frees_before, 1);  // n3 only
  EXPECT_EQ(nodes_.Held("n3"), 0u);
}

TEST_F(RegionTableTest, FreeFailuresAreLoggedNotReturned) {
  ASSERT_TRUE(table_.Create(Request("r", 30 * kMiB)).ok());
  nodes_.With("n2", [](FakeNodes::Node& n) { n.silent = true; });
  EXPECT_TRUE(table_.Delete("r").ok());
  ASSERT_EQ(env_.logged().size(), 1u);
  EXPECT_THAT(env_.logged()[0], HasSubstr("n2"));
  EXPECT_EQ(table_.Get("r").status().code(), absl::StatusCode::kNotFound);
}

// ---- Reconciliation ------------------------------------------------------------

class ReconcileTest : public RegionTableTest {
 protected:
  // What each node's heartbeat would report: the regions it holds.
  void Heartbeat(const std::string& id) {
    proto::NodeStats stats;
    for (uint64_t region : nodes_.HeldIds(id)) stats.add_region_ids(region);
    ASSERT_TRUE(state_->RecordHeartbeat(id, 1, stats).ok());
  }
  void HeartbeatAll() {
    for (const char* id : {"n1", "n2", "n3"}) Heartbeat(id);
  }
};

TEST_F(ReconcileTest, FreesOnlyRegionsTheTableDoesNotHold) {
  ASSERT_TRUE(table_.Create(Request("w/kept", 8 * kMiB)).ok());
  const uint64_t kept = HeldEverywhere();
  // A create the previous coordinator never recorded left id 77 on n2.
  nodes_.With("n2", [](FakeNodes::Node& n) {
    n.held[77] = 3;
    n.free_slabs -= 3;
  });
  HeartbeatAll();
  EXPECT_EQ(table_.Reconcile(), 1u);
  EXPECT_EQ(HeldEverywhere(), kept) << "only the leaked slabs were freed";
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(env_.logged(), "\n"), "region id 77 on node n2"));
  HeartbeatAll();
  EXPECT_EQ(table_.Reconcile(), 0u);
  // Dead nodes are left alone (their memory is gone with them).
  nodes_.With("n3", [](FakeNodes::Node& n) { n.held[78] = 1; });
  Heartbeat("n3");
  ASSERT_TRUE(state_->MarkDead("n3").ok());
  EXPECT_EQ(table_.Reconcile(), 0u);
}

TEST_F(ReconcileTest, AReportSentBeforeADeleteIsNotALeak) {
  ASSERT_TRUE(table_.Create(Request("w/gone", 8 * kMiB)).ok());
  HeartbeatAll();                             // the nodes report the region...
  ASSERT_TRUE(table_.Delete("w/gone").ok());  // ...which is then freed
  const int frees = nodes_.frees();
  EXPECT_EQ(table_.Reconcile(), 0u) << "the reports predate the delete";
  EXPECT_EQ(nodes_.frees(), frees);
  EXPECT_FALSE(absl::StrContains(absl::StrJoin(env_.logged(), "\n"),
                                 "in no region of the table"));
  // Long after, a node still reporting it does hold it: freed again.
  env_.Advance(kFreedReportGrace + absl::Seconds(1));
  EXPECT_GT(table_.Reconcile(), 0u);
}

TEST_F(ReconcileTest, LeavesACreateInProgressAlone) {
  nodes_.Stall();
  absl::StatusOr<proto::RegionInfo> created;
  std::thread create([&] { created = table_.Create(Request("w/slow", 8 * kMiB)); });
  nodes_.AwaitStalledCall();
  // A node reports part of it already (another Allocate may have landed).
  proto::NodeStats stats;
  stats.add_region_ids(1);
  ASSERT_TRUE(state_->RecordHeartbeat("n1", 1, stats).ok());
  const int frees = nodes_.frees();
  EXPECT_EQ(table_.Reconcile(), 0u) << "id 1 is being created";
  EXPECT_EQ(nodes_.frees(), frees);
  nodes_.Release();
  create.join();
  ASSERT_TRUE(created.ok()) << created.status();
}

}  // namespace
}  // namespace meshpool::coordinator
