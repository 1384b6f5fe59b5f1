// coordinator/coordinator_state: the region half of the in-memory
// CoordinatorState (ids, put/find/remove/list, rename, restarts).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/coordinator_state.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace meshpool::coordinator
