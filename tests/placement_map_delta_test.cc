// Cluster map deltas: DiffMaps and ApplyMapDelta rebuild every map of a
// random history, and refuse what a delta cannot say.
#include <cstdint>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "placement/map_delta.h"
#include "tests/node_info.h"

namespace meshpool::placement {
namespace {

using ::meshpool::testing::AddNode;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Equal for the map's readers: epochs, history, departures, and every
// entry by SameEntry, in order.
void ExpectSameMap(const proto::ClusterMap& a, const proto::ClusterMap& b) {
  EXPECT_EQ(a.epoch(), b.epoch());
  EXPECT_EQ(a.history_epoch(), b.history_epoch());
  ASSERT_EQ(a.nodes_size(), b.nodes_size());
  for (int i = 0; i < a.nodes_size(); ++i) {
    EXPECT_TRUE(SameEntry(a.nodes(i), b.nodes(i)))
        << "entry " << i << ": " << a.nodes(i).ShortDebugString() << " vs "
        << b.nodes(i).ShortDebugString();
  }
  ASSERT_EQ(a.departures_size(), b.departures_size());
  for (int i = 0; i < a.departures_size(); ++i) {
    EXPECT_EQ(a.departures(i).SerializeAsString(),
              b.departures(i).SerializeAsString());
  }
}

TEST(MapDeltaTest, DeltasRebuildEveryMapOfARandomHistory) {
  const uint64_t seed = std::random_device{}();
  std::cout << "seed=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  proto::ClusterMap map;
  int next_id = 0;
  for (; next_id < 20; ++next_id)
    AddNode(map, absl::StrCat("node-", next_id), kGiB);
  proto::ClusterMap held = map;  // what a watcher holds
  for (int step = 0; step < 200; ++step) {
    proto::ClusterMap next = map;
    next.set_epoch(map.epoch() + 1);
    switch (rng() % 6) {
      case 0:
        AddNode(next, absl::StrCat("node-", next_id++), (1 + rng() % 4) * kGiB);
        break;
      case 1:
        if (next.nodes_size() > 1) {  // forgotten: removed from the map
          next.mutable_nodes()->DeleteSubrange(rng() % next.nodes_size(), 1);
        }
        break;
      case 2:
        next.mutable_nodes(rng() % next.nodes_size())
            ->set_state(proto::NODE_DEAD);
        break;
      case 3: {
        proto::Departure* d = next.add_departures();
        d->set_node_id(absl::StrCat("gone-", step));
        d->set_capacity_bytes(kGiB);
        d->set_epoch(next.epoch());
        if (next.departures_size() > 5) {  // the oldest fall off
          next.mutable_departures()->DeleteSubrange(0, 2);
          next.set_history_epoch(next.departures(0).epoch() - 1);
        }
        break;
      }
      case 4:
        next.mutable_nodes(rng() % next.nodes_size())
            ->mutable_info()
            ->set_control_address(absl::StrCat("10.0.0.", step, ":7100"));
        break;
      default:
        break;  // only the epoch
    }
    // Heartbeats change every entry, and never make a delta bigger.
    for (proto::NodeEntry& e : *next.mutable_nodes()) {
      e.set_last_heartbeat_unix_ms(1000 + step);
      e.mutable_stats()->set_used_bytes(step);
    }
    std::optional<proto::ClusterMapDelta> delta = DiffMaps(map, next);
    ASSERT_TRUE(delta.has_value()) << "step " << step;
    EXPECT_LE(delta->changed_size(), 1) << "step " << step;
    ASSERT_TRUE(ApplyMapDelta(*delta, held).ok()) << "step " << step;
    ExpectSameMap(held, next);
    if (HasFailure()) {
      ADD_FAILURE() << "at step " << step;
      return;
    }
    map = next;
  }
}

TEST(MapDeltaTest, ADeltaIsRefusedByAMapOfAnotherEpoch) {
  proto::ClusterMap base;
  base.set_epoch(4);
  AddNode(base, "a", kGiB);
  proto::ClusterMap next = base;
  next.set_epoch(5);
  AddNode(next, "b", kGiB);
  std::optional<proto::ClusterMapDelta> delta = DiffMaps(base, next);
  ASSERT_TRUE(delta.has_value());
  proto::ClusterMap other = base;
  other.set_epoch(3);
  const absl::Status s = ApplyMapDelta(*delta, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(other.epoch(), 3u);
  EXPECT_EQ(other.nodes_size(), 1);
}

TEST(MapDeltaTest, ReorderedNodesOrRewrittenDeparturesNeedTheWholeMap) {
  proto::ClusterMap base;
  AddNode(base, "a", kGiB);
  AddNode(base, "b", kGiB);
  proto::ClusterMap swapped = base;
  swapped.mutable_nodes()->SwapElements(0, 1);
  EXPECT_FALSE(DiffMaps(base, swapped).has_value());
  proto::ClusterMap repeated = base;
  AddNode(repeated, "a", kGiB);
  EXPECT_FALSE(DiffMaps(base, repeated).has_value());

  // Departures that are not the base's minus its oldest plus newer ones:
  // the delta drops them all and sends the new list.
  proto::ClusterMap with = base;
  proto::Departure* d = with.add_departures();
  d->set_node_id("x");
  d->set_epoch(2);
  proto::ClusterMap rewritten = base;
  d = rewritten.add_departures();
  d->set_node_id("y");
  d->set_epoch(3);
  std::optional<proto::ClusterMapDelta> delta = DiffMaps(with, rewritten);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->departures_dropped(), 1u);
  ASSERT_TRUE(ApplyMapDelta(*delta, with).ok());
  ExpectSameMap(with, rewritten);
}

TEST(MapDeltaTest, MalformedDeltasAreInvalidArgumentAndChangeNothing) {
  proto::ClusterMap map;
  map.set_epoch(2);
  AddNode(map, "a", kGiB);
  proto::ClusterMapDelta unknown;
  unknown.set_base_epoch(2);
  unknown.add_removed("nobody");
  EXPECT_EQ(ApplyMapDelta(unknown, map).code(),
            absl::StatusCode::kInvalidArgument);
  proto::ClusterMapDelta twice;
  twice.set_base_epoch(2);
  *twice.add_changed() = map.nodes(0);
  *twice.add_changed() = map.nodes(0);
  EXPECT_EQ(ApplyMapDelta(twice, map).code(),
            absl::StatusCode::kInvalidArgument);
  proto::ClusterMapDelta too_many;
  too_many.set_base_epoch(2);
  too_many.set_departures_dropped(1);
  EXPECT_EQ(ApplyMapDelta(too_many, map).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(map.epoch(), 2u);
  EXPECT_EQ(map.nodes_size(), 1);
}

// DiffMaps knows every field of ClusterMap and NodeEntry; a new one must be
// taught to it (and to SameEntry) before this passes again.
TEST(MapDeltaTest, DeltasCoverEveryFieldOfTheMap) {
  EXPECT_EQ(proto::ClusterMap::descriptor()->field_count(), 4)
      << "a new ClusterMap field: carry it in ClusterMapDelta";
  EXPECT_EQ(proto::NodeEntry::descriptor()->field_count(), 4)
      << "a new NodeEntry field: compare it in SameEntry (or say why not)";
}

}  // namespace
}  // namespace meshpool::placement
