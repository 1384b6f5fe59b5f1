// coordinator/coordinator_state: the in-memory CoordinatorState's regions
// (ids, put/find/remove/list, rename, restarts) and the map's history
// (departures, a restarted history).
#include "coordinator/coordinator_state.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "placement/placement.h"

namespace meshpool::coordinator {
namespace {

proto::RegionInfo Named(const std::string& name, uint64_t id) {
  proto::RegionInfo info;
  info.set_name(name);
  info.set_region_id(id);
  info.set_size(100);
  return info;
}

TEST(CoordinatorStateRegions, IdsAreMonotonic) {
  std::unique_ptr<CoordinatorState> state = NewInMemoryCoordinatorState();
  absl::StatusOr<uint64_t> a = state->NextRegionId();
  absl::StatusOr<uint64_t> b = state->NextRegionId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 1u);
  EXPECT_EQ(*b, 2u);
}

TEST(CoordinatorStateRegions, PutFindRemoveList) {
  std::unique_ptr<CoordinatorState> state = NewInMemoryCoordinatorState();
  for (const char* name : {"m/b", "m/a", "x", "m"})
    ASSERT_TRUE(state->PutRegion(Named(name, 1)).ok());
  ASSERT_TRUE(state->PutRegion(Named("x", 9)).ok());  // replaces
  EXPECT_EQ(state->FindRegion("x")->region_id(), 9u);
  EXPECT_EQ(state->FindRegion("y").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<proto::RegionInfo>> listed = state->ListRegions("m/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name(), "m/a");
  EXPECT_EQ((*listed)[1].name(), "m/b");
  EXPECT_EQ(state->ListRegions("")->size(), 4u);
  EXPECT_EQ(state->RemoveRegion("x")->region_id(), 9u);
  EXPECT_EQ(state->RemoveRegion("x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state->PutRegion(Named("", 1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorStateRegions, RenameIsOneStep) {
  std::unique_ptr<CoordinatorState> state = NewInMemoryCoordinatorState();
  ASSERT_TRUE(state->PutRegion(Named("a", 1)).ok());
  ASSERT_TRUE(state->PutRegion(Named("b", 2)).ok());
  EXPECT_EQ(state->RenameRegion("zz", "c", false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state->RenameRegion("a", "b", false).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(state->FindRegion("a")->region_id(), 1u);  // unchanged
  absl::StatusOr<std::optional<proto::RegionInfo>> same = state->RenameRegion("a", "a", true);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->has_value());
  EXPECT_EQ(state->FindRegion("a")->region_id(), 1u);
  absl::StatusOr<std::optional<proto::RegionInfo>> replaced = state->RenameRegion("a", "b", true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  ASSERT_TRUE(replaced->has_value());
  EXPECT_EQ((*replaced)->region_id(), 2u);
  EXPECT_EQ(state->FindRegion("a").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<proto::RegionInfo> b = state->FindRegion("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->region_id(), 1u);
  EXPECT_EQ(b->name(), "b");
  absl::StatusOr<std::optional<proto::RegionInfo>> moved = state->RenameRegion("b", "c", false);
  ASSERT_TRUE(moved.ok());
  EXPECT_FALSE(moved->has_value());
  EXPECT_EQ(state->FindRegion("c")->name(), "c");
}

// A coordinator restarted without durable state must not hand out region
// ids its nodes still hold from the previous process.
TEST(CoordinatorStateRegions, RestartedStateStartsPastEveryIdOfAnEarlierStart) {
  const absl::Time first_start = absl::FromUnixMillis(1'700'000'000'000);
  std::unique_ptr<CoordinatorState> before =
      NewInMemoryCoordinatorState({}, FirstRegionIdAt(first_start));
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) last = *before->NextRegionId();
  std::unique_ptr<CoordinatorState> after = NewInMemoryCoordinatorState(
      {}, FirstRegionIdAt(first_start + absl::Milliseconds(1)));
  EXPECT_GT(*after->NextRegionId(), last);
}

proto::NodeEntry AliveNode(const std::string& id, uint64_t capacity) {
  proto::NodeEntry e;
  e.mutable_info()->set_node_id(id);
  e.mutable_info()->set_capacity_bytes(capacity);
  e.set_state(proto::NODE_ALIVE);
  return e;
}

void ExpectDeparture(const proto::Departure& d, const std::string& id,
                     uint64_t capacity, uint64_t epoch) {
  EXPECT_EQ(d.node_id(), id);
  EXPECT_EQ(d.capacity_bytes(), capacity);
  EXPECT_EQ(d.epoch(), epoch);
}

TEST(CoordinatorStateMap,
     ADeathOrANewWeightIsADepartureAndARestartedHistoryKeepsNone) {
  std::unique_ptr<CoordinatorState> state = NewInMemoryCoordinatorState();
  ASSERT_EQ(*state->UpsertNode(AliveNode("a", 100)), 1u);
  ASSERT_EQ(*state->UpsertNode(AliveNode("a", 100)), 2u);  // same weight
  ASSERT_EQ(*state->UpsertNode(AliveNode("a", 200)), 3u);
  ASSERT_EQ(*state->MarkDead("a"), 4u);
  ASSERT_EQ(*state->MarkDead("a"), 5u);  // already dead: no departure
  ASSERT_EQ(*state->UpsertNode(AliveNode("a", 200)), 6u);  // back: none
  proto::ClusterMap map = *state->Snapshot();
  ASSERT_EQ(map.departures_size(), 2);
  ExpectDeparture(map.departures(0), "a", 100, 3);
  ExpectDeparture(map.departures(1), "a", 200, 4);
  EXPECT_EQ(map.history_epoch(), 0u);

  EXPECT_EQ(*state->RestartHistory(50), 50u);
  map = *state->Snapshot();
  EXPECT_EQ(map.epoch(), 50u);
  EXPECT_EQ(map.history_epoch(), 50u);
  EXPECT_EQ(map.departures_size(), 0);
  EXPECT_EQ(*state->RestartHistory(10), 51u) << "never back: past the epoch";
}

TEST(CoordinatorStateMap,
     DeparturesPastTheCapDropTheOldestAndRaiseTheHistoryEpoch) {
  std::unique_ptr<CoordinatorState> state = NewInMemoryCoordinatorState();
  constexpr int kOver = 3;
  std::vector<uint64_t> death_epochs;
  for (size_t i = 0; i < placement::kMaxDepartures + kOver; ++i) {
    const std::string id = absl::StrCat("n", i);
    ASSERT_TRUE(state->UpsertNode(AliveNode(id, 1 << 20)).ok());
    death_epochs.push_back(*state->MarkDead(id));
  }
  const proto::ClusterMap map = *state->Snapshot();
  ASSERT_EQ(map.departures_size(), static_cast<int>(placement::kMaxDepartures));
  EXPECT_EQ(map.history_epoch(), death_epochs[kOver - 1]);
  ExpectDeparture(map.departures(0), absl::StrCat("n", kOver), 1 << 20,
                  death_epochs[kOver]);
}

}  // namespace
}  // namespace meshpool::coordinator
