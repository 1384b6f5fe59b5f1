// Weighted rendezvous placement: HomeNode and RankNodes.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "placement/placement.h"
#include "tests/node_info.h"

namespace meshpool::placement {
namespace {

constexpr int kKeys = 20000;
constexpr uint64_t kGiB = uint64_t{1} << 30;

struct KeyHash {
  uint64_t lo;
  uint64_t hi;
};

// Random key hashes from a printed seed.
std::vector<KeyHash> RandomKeys(int count) {
  const uint64_t seed = std::random_device{}();
  std::cout << "seed=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  std::vector<KeyHash> keys(count);
  for (KeyHash& key : keys) key = KeyHash{rng(), rng()};
  return keys;
}

using ::meshpool::testing::AddNode;

proto::ClusterMap EqualNodes(int count) {
  proto::ClusterMap map;
  for (int i = 1; i <= count; ++i) AddNode(map, absl::StrCat("node-", i), kGiB);
  return map;
}

std::string HomeId(const proto::ClusterMap& map, const KeyHash& key) {
  const int home = HomeNode(map, key.lo, key.hi);
  return home < 0 ? std::string() : map.nodes(home).info().node_id();
}

TEST(RendezvousTest, HomeIsDeterministicAndIndependentOfNodeOrder) {
  const proto::ClusterMap map = EqualNodes(10);
  proto::ClusterMap reversed;
  for (int i = map.nodes_size() - 1; i >= 0; --i) *reversed.add_nodes() = map.nodes(i);
  for (const KeyHash& key : RandomKeys(2000)) {
    const std::string home = HomeId(map, key);
    ASSERT_FALSE(home.empty());
    EXPECT_EQ(HomeId(map, key), home);
    EXPECT_EQ(HomeId(reversed, key), home);
  }
}

TEST(RendezvousTest, JoiningNodeTakesOnlyItsShareOfKeys) {
  constexpr int kNodes = 10;
  const proto::ClusterMap before = EqualNodes(kNodes);
  proto::ClusterMap after = before;
  AddNode(after, "node-joined", kGiB);
  int moved = 0;
  for (const KeyHash& key : RandomKeys(kKeys)) {
    const std::string old_home = HomeId(before, key);
    const std::string new_home = HomeId(after, key);
    if (old_home == new_home) continue;
    ++moved;
    // A key moves only to the newcomer, never between the old nodes.
    ASSERT_EQ(new_home, "node-joined") << "key moved from " << old_home;
  }
  // Expected 1/11 = 0.0909; one standard deviation is 0.002 at this sample.
  const double fraction = static_cast<double>(moved) / kKeys;
  std::cout << "moved fraction=" << fraction << std::endl;
  EXPECT_NEAR(fraction, 1.0 / (kNodes + 1), 0.02);
}

TEST(RendezvousTest, DyingNodeLosesOnlyItsOwnKeys) {
  const proto::ClusterMap before = EqualNodes(8);
  proto::ClusterMap after = before;
  after.mutable_nodes(3)->set_state(proto::NODE_DEAD);
  const std::string dead = before.nodes(3).info().node_id();
  for (const KeyHash& key : RandomKeys(kKeys)) {
    const std::string old_home = HomeId(before, key);
    const std::string new_home = HomeId(after, key);
    ASSERT_NE(new_home, dead);
    if (old_home != dead) {
      ASSERT_EQ(new_home, old_home);
    }
  }
}

TEST(RendezvousTest, NodeWithTwiceTheCapacityGetsTwiceTheKeys) {
  proto::ClusterMap map;
  AddNode(map, "big", 2 * kGiB);
  AddNode(map, "small-a", kGiB);
  AddNode(map, "small-b", kGiB);
  std::vector<int> counts(map.nodes_size(), 0);
  for (const KeyHash& key : RandomKeys(kKeys)) {
    const int home = HomeNode(map, key.lo, key.hi);
    ASSERT_GE(home, 0);
    ++counts[home];
  }
  // Expected shares 1/2, 1/4, 1/4; one standard deviation is <= 0.0036, so
  // 0.03 is more than 8 of them.
  std::cout << "counts big=" << counts[0] << " small-a=" << counts[1]
            << " small-b=" << counts[2] << std::endl;
  EXPECT_NEAR(static_cast<double>(counts[0]) / kKeys, 0.5, 0.03);
  EXPECT_NEAR(static_cast<double>(counts[1]) / kKeys, 0.25, 0.03);
  EXPECT_NEAR(static_cast<double>(counts[2]) / kKeys, 0.25, 0.03);
}

TEST(RendezvousTest, DeadAndZeroCapacityNodesAreNeverChosen) {
  proto::ClusterMap map = EqualNodes(5);
  map.mutable_nodes(0)->set_state(proto::NODE_DEAD);
  map.mutable_nodes(2)->set_state(proto::NODE_DEAD);
  map.mutable_nodes(4)->mutable_info()->set_capacity_bytes(0);
  const std::set<int> eligible = {1, 3};
  for (const KeyHash& key : RandomKeys(kKeys)) {
    ASSERT_TRUE(eligible.count(HomeNode(map, key.lo, key.hi)));
    const std::vector<int> ranked = RankNodes(map, key.lo, key.hi, 5);
    ASSERT_EQ(std::set<int>(ranked.begin(), ranked.end()), eligible);
  }
}

TEST(RendezvousTest, NoAliveNodeGivesMinusOne) {
  const proto::ClusterMap empty;
  EXPECT_EQ(HomeNode(empty, 1, 2), -1);
  EXPECT_TRUE(RankNodes(empty, 1, 2, 3).empty());
  proto::ClusterMap all_dead = EqualNodes(3);
  for (proto::NodeEntry& entry : *all_dead.mutable_nodes()) entry.set_state(proto::NODE_DEAD);
  EXPECT_EQ(HomeNode(all_dead, 1, 2), -1);
  EXPECT_TRUE(RankNodes(all_dead, 1, 2, 3).empty());
  proto::ClusterMap unspecified;
  AddNode(unspecified, "fresh", kGiB, proto::NODE_STATE_UNSPECIFIED);
  EXPECT_EQ(HomeNode(unspecified, 1, 2), -1);
}

TEST(RendezvousTest, RankNodesAreDistinctAndStartWithTheHome) {
  const proto::ClusterMap map = EqualNodes(8);
  for (const KeyHash& key : RandomKeys(2000)) {
    const std::vector<int> three = RankNodes(map, key.lo, key.hi, 3);
    ASSERT_EQ(three.size(), 3u);
    EXPECT_EQ(std::set<int>(three.begin(), three.end()).size(), 3u);
    EXPECT_EQ(three[0], HomeNode(map, key.lo, key.hi));
    // A longer ranking extends the shorter one.
    const std::vector<int> all = RankNodes(map, key.lo, key.hi, 100);
    ASSERT_EQ(all.size(), 8u);
    EXPECT_TRUE(std::equal(three.begin(), three.end(), all.begin()));
    EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 8u);
  }
  EXPECT_TRUE(RankNodes(map, 1, 2, 0).empty());
}

void AddDeparture(proto::ClusterMap& map, const std::string& id,
                  uint64_t capacity, uint64_t epoch) {
  proto::Departure* d = map.add_departures();
  d->set_node_id(id);
  d->set_capacity_bytes(capacity);
  d->set_epoch(epoch);
}

// Whether `id` with `capacity`, alive beside the map's nodes, would be the
// key's home: then the key lived there before it departed.
bool WouldHaveHomed(const proto::ClusterMap& map, const std::string& id,
                    uint64_t capacity, const KeyHash& key) {
  proto::ClusterMap with = map;
  with.clear_departures();
  AddNode(with, id, capacity);
  return HomeId(with, key) == id;
}

TEST(RendezvousTest,
     AnObjectOlderThanTheNewestDepartureThatOutrankedItsHomeIsOutdated) {
  proto::ClusterMap map = EqualNodes(3);
  map.set_history_epoch(2);
  AddDeparture(map, "node-big-gone", 2 * kGiB, 5);
  AddDeparture(map, "node-gone", kGiB, 9);
  int by_newest = 0, by_older = 0, by_none = 0;
  for (const KeyHash& key : RandomKeys(4000)) {
    const int home = HomeNode(map, key.lo, key.hi);
    ASSERT_GE(home, 0);
    uint64_t expected = 2;
    if (WouldHaveHomed(map, "node-gone", kGiB, key)) {
      expected = 9;
      ++by_newest;
    } else if (WouldHaveHomed(map, "node-big-gone", 2 * kGiB, key)) {
      expected = 5;
      ++by_older;
    } else {
      ++by_none;
    }
    ASSERT_EQ(OldestCurrentObjectEpoch(map, home, key.lo, key.hi), expected)
        << "home " << map.nodes(home).info().node_id();
  }
  std::cout << "by_newest=" << by_newest << " by_older=" << by_older
            << " by_none=" << by_none << std::endl;
  // Each case happens for a good share of the keys (expected about 1/4,
  // 2/5 and 1/3 of them).
  EXPECT_GT(by_newest, 400);
  EXPECT_GT(by_older, 400);
  EXPECT_GT(by_none, 400);
}

TEST(RendezvousTest,
     DeparturesNoNewerThanTheHistoryEpochOrOfTheHomeItselfDoNotCount) {
  proto::ClusterMap map = EqualNodes(2);
  map.set_history_epoch(10);
  AddDeparture(map, "node-gone", 100 * kGiB, 8);  // outranks nearly every home
  for (const KeyHash& key : RandomKeys(200)) {
    const int home = HomeNode(map, key.lo, key.hi);
    EXPECT_EQ(OldestCurrentObjectEpoch(map, home, key.lo, key.hi), 10u);
  }
  proto::ClusterMap same = EqualNodes(1);
  AddDeparture(same, "node-1", 100 * kGiB, 4);  // node-1 under its old weight
  for (const KeyHash& key : RandomKeys(50)) {
    EXPECT_EQ(OldestCurrentObjectEpoch(same, 0, key.lo, key.hi), 0u);
  }
}

TEST(RendezvousTest, LongNodeIdsFromHandBuiltMapsStillHash) {
  proto::ClusterMap map;
  AddNode(map, std::string(kMaxNodeIdBytes * 4, 'x'), kGiB);
  AddNode(map, std::string(kMaxNodeIdBytes * 4, 'y'), kGiB);
  std::set<int> homes;
  for (const KeyHash& key : RandomKeys(200)) homes.insert(HomeNode(map, key.lo, key.hi));
  EXPECT_EQ(homes, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace meshpool::placement
