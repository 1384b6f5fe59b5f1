// MapFeed: one snapshot and one diff per change however many watchers
// there are, deltas that rebuild the newest map from whatever published map
// a watcher holds, and whole maps where a delta cannot be cut.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/map_feed.h"
#include "gtest/gtest.h"
#include "placement/map_delta.h"
#include "tests/node_info.h"

namespace meshpool::coordinator {
namespace {

using ::meshpool::testing::AddNode;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A map the test changes by hand, and the feed that publishes it.
class MapFeedTest : public ::testing::Test {
 protected:
  MapFeedTest() {
    map_.set_epoch(1);
    for (int i = 0; i < 8; ++i) AddNode(map_, absl::StrCat("node-", i), kGiB);
  }

  // One node joins: a new epoch.
  uint64_t Join() {
    absl::MutexLock lock(&mu_);
    AddNode(map_, absl::StrCat("node-", map_.nodes_size()), 2 * kGiB);
    map_.set_epoch(map_.epoch() + 1);
    return map_.epoch();
  }

  proto::ClusterMap Current() {
    absl::MutexLock lock(&mu_);
    return map_;
  }

  // What a watcher holding `held` ends up with after `update`.
  static proto::ClusterMap Apply(const proto::ClusterMap& held,
                                 const proto::ClusterMapUpdate& update) {
    if (update.has_map()) return update.map();
    proto::ClusterMap map = held;
    const absl::Status applied = placement::ApplyMapDelta(update.delta(), map);
    EXPECT_TRUE(applied.ok()) << applied;
    return map;
  }

  absl::Mutex mu_;
  proto::ClusterMap map_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  MapFeed feed_{[this]() -> absl::StatusOr<proto::ClusterMap> {
    absl::MutexLock lock(&mu_);
    if (!fail_.ok()) return fail_;
    return map_;
  }};
};

TEST_F(MapFeedTest, EveryWatcherOfAChangeSharesOneSnapshotAndOneDelta) {
  constexpr int kWatchers = 100;
  std::vector<std::shared_ptr<const proto::ClusterMap>> held(kWatchers);
  for (auto& h : held) {
    absl::StatusOr<MapFeedUpdate> first = feed_.UpdateFrom(nullptr, 1);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(first->update->has_map());
    h = first->map;
  }
  EXPECT_EQ(feed_.snapshots(), 1u);

  const uint64_t epoch = Join();
  const proto::ClusterMapUpdate* shared = nullptr;
  for (auto& h : held) {
    absl::StatusOr<MapFeedUpdate> next = feed_.UpdateFrom(h, epoch);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->update->has_delta());
    if (shared == nullptr) shared = next->update.get();
    EXPECT_EQ(next->update.get(), shared) << "each watcher cut its own delta";
    EXPECT_EQ(Apply(*h, *next->update).SerializeAsString(),
              Current().SerializeAsString());
    h = next->map;
  }
  EXPECT_EQ(feed_.snapshots(), 2u)
      << "one snapshot per change, not per watcher";
}

TEST_F(MapFeedTest, AWatcherSeveralChangesBehindGetsOneDeltaToTheNewest) {
  absl::StatusOr<MapFeedUpdate> first = feed_.UpdateFrom(nullptr, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  std::shared_ptr<const proto::ClusterMap> behind = first->map;
  std::shared_ptr<const proto::ClusterMap> current = first->map;
  for (int i = 0; i < 5; ++i) {  // another watcher follows every change
    const uint64_t epoch = Join();
    absl::StatusOr<MapFeedUpdate> next = feed_.UpdateFrom(current, epoch);
    ASSERT_TRUE(next.ok()) << next.status();
    current = next->map;
  }
  absl::StatusOr<MapFeedUpdate> catch_up =
      feed_.UpdateFrom(behind, current->epoch());
  ASSERT_TRUE(catch_up.ok()) << catch_up.status();
  ASSERT_TRUE(catch_up->update->has_delta());
  EXPECT_EQ(catch_up->update->delta().base_epoch(), behind->epoch());
  EXPECT_EQ(Apply(*behind, *catch_up->update).SerializeAsString(),
            Current().SerializeAsString());
}

TEST_F(MapFeedTest, AWatcherOlderThanTheHistoryGetsTheWholeMap) {
  absl::StatusOr<MapFeedUpdate> first = feed_.UpdateFrom(nullptr, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  std::shared_ptr<const proto::ClusterMap> current = first->map;
  for (size_t i = 0; i < kMapFeedHistory; ++i) {
    absl::StatusOr<std::shared_ptr<const proto::ClusterMap>> latest =
        feed_.Latest(Join());
    ASSERT_TRUE(latest.ok()) << latest.status();
  }
  absl::StatusOr<MapFeedUpdate> next =
      feed_.UpdateFrom(first->map, Current().epoch());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->update->has_map());
  EXPECT_EQ(next->update->map().SerializeAsString(),
            Current().SerializeAsString());
}

TEST_F(MapFeedTest, AMapTheFeedDidNotPublishGetsTheWholeMap) {
  absl::StatusOr<MapFeedUpdate> first = feed_.UpdateFrom(nullptr, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  // Same epoch as a published map, but not that map: no delta may be cut
  // from it.
  auto lookalike = std::make_shared<const proto::ClusterMap>(*first->map);
  const uint64_t epoch = Join();
  absl::StatusOr<MapFeedUpdate> next = feed_.UpdateFrom(lookalike, epoch);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->update->has_map());
}

TEST_F(MapFeedTest, NoSnapshotWhileTheEpochIsPublished) {
  ASSERT_TRUE(feed_.Latest(1).ok());
  ASSERT_TRUE(feed_.Latest(1).ok());
  ASSERT_TRUE(feed_.Latest(0).ok());
  EXPECT_EQ(feed_.snapshots(), 1u);
}

TEST_F(MapFeedTest, ASnapshotErrorReachesTheWatcherAndTheFeedRecovers) {
  {
    absl::MutexLock lock(&mu_);
    fail_ = absl::UnavailableError("state unreadable");
  }
  absl::StatusOr<MapFeedUpdate> failed = feed_.UpdateFrom(nullptr, 1);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  {
    absl::MutexLock lock(&mu_);
    fail_ = absl::OkStatus();
  }
  absl::StatusOr<MapFeedUpdate> ok = feed_.UpdateFrom(nullptr, 1);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->map->epoch(), 1u);
}

TEST_F(MapFeedTest, AHistoryThatRestartsLowerIsPublishedAfresh) {
  absl::StatusOr<MapFeedUpdate> first = feed_.UpdateFrom(nullptr, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t epoch = Join();
  ASSERT_TRUE(feed_.Latest(epoch).ok());
  {
    absl::MutexLock lock(&mu_);
    map_.set_epoch(1);  // the same epoch number as `first`, another map
  }
  absl::StatusOr<std::shared_ptr<const proto::ClusterMap>> latest =
      feed_.Latest(epoch + 1);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->nodes_size(), 9);
  // `first` names epoch 1 but is not the map now published as 1.
  absl::StatusOr<MapFeedUpdate> next = feed_.UpdateFrom(first->map, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->update->has_map());
}

}  // namespace
}  // namespace meshpool::coordinator
