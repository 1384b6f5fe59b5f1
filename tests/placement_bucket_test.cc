// BucketTable: every bucket's rendezvous home and oldest object epoch in one
// lookup, built from scratch or updated from an older table.
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "placement/placement.h"
#include "tests/node_info.h"

namespace meshpool::placement {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A key hash in bucket b (the other bits from rng).
uint64_t LoInBucket(uint32_t b, std::mt19937_64& rng) {
  return (uint64_t{b} << (64 - kBucketBits)) | (rng() >> kBucketBits);
}

std::mt19937_64 SeededRng() {
  const uint64_t seed = std::random_device{}();
  std::cout << "seed=" << seed << std::endl;
  return std::mt19937_64(seed);
}

using ::meshpool::testing::AddNode;

// Every bucket of `table` against the per-key functions on `map`.
void ExpectTableMatchesMap(const BucketTable& table,
                           const proto::ClusterMap& map, std::mt19937_64& rng,
                           uint32_t stride) {
  for (uint32_t b = 0; b < kBuckets; b += stride) {
    const uint64_t lo = LoInBucket(b, rng), hi = rng();
    const int home = HomeNode(map, lo, hi);
    ASSERT_EQ(table.Home(lo, hi), home) << "bucket " << b;
    if (home < 0) continue;
    ASSERT_EQ(table.OldestCurrentObjectEpoch(lo, hi),
              OldestCurrentObjectEpoch(map, home, lo, hi))
        << "bucket " << b;
  }
}

// Two tables agree on every bucket.
void ExpectSameHomes(const BucketTable& a, const BucketTable& b) {
  for (uint32_t k = 0; k < kBuckets; ++k) {
    const uint64_t lo = uint64_t{k} << (64 - kBucketBits);
    ASSERT_EQ(a.Home(lo, 0), b.Home(lo, 0)) << "bucket " << k;
    if (a.Home(lo, 0) >= 0) {
      ASSERT_EQ(a.OldestCurrentObjectEpoch(lo, 0),
                b.OldestCurrentObjectEpoch(lo, 0))
          << "bucket " << k;
    }
  }
}

TEST(BucketTableTest, EveryBucketsHomeAndEpochAreTheRendezvousAnswers) {
  std::mt19937_64 rng = SeededRng();
  proto::ClusterMap map;
  map.set_epoch(40);
  map.set_history_epoch(3);
  for (int i = 0; i < 9; ++i) {
    AddNode(map, absl::StrCat("node-", i), (1 + rng() % 4) * kGiB,
            i == 4 ? proto::NODE_DEAD : proto::NODE_ALIVE);
  }
  AddNode(map, "empty", 0);
  proto::Departure* d = map.add_departures();
  d->set_node_id("gone-a");
  d->set_capacity_bytes(2 * kGiB);
  d->set_epoch(12);
  d = map.add_departures();
  d->set_node_id("node-2");  // node-2 under its old weight
  d->set_capacity_bytes(8 * kGiB);
  d->set_epoch(20);
  std::shared_ptr<const BucketTable> table = BucketTable::Build(map);
  EXPECT_EQ(table->epoch(), 40u);
  ExpectTableMatchesMap(*table, map, rng, /*stride=*/7);
}

TEST(BucketTableTest, AMapWithoutEligibleNodesHasNoHomes) {
  proto::ClusterMap map;
  AddNode(map, "dead", kGiB, proto::NODE_DEAD);
  std::shared_ptr<const BucketTable> table = BucketTable::Build(map);
  EXPECT_EQ(table->Home(0, 0), -1);
  EXPECT_EQ(table->Home(~uint64_t{0}, 0), -1);
  EXPECT_EQ(BucketTable::Build(proto::ClusterMap())->Home(123, 456), -1);
}

// Joins, deaths, weight changes, restarts and reorderings, one at a time
// and several at once: a table updated from the previous one equals a
// table built from scratch, and both equal the per-key answers.
TEST(BucketTableTest, AnUpdatedTableEqualsOneBuiltFromScratch) {
  std::mt19937_64 rng = SeededRng();
  proto::ClusterMap map;
  int next_id = 0;
  for (; next_id < 12; ++next_id) {
    AddNode(map, absl::StrCat("node-", next_id), (1 + rng() % 3) * kGiB);
  }
  std::shared_ptr<const BucketTable> table = BucketTable::Build(map);
  for (int step = 0; step < 24; ++step) {
    map.set_epoch(map.epoch() + 1);
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes; ++c) {
      proto::NodeEntry* some = map.mutable_nodes(rng() % map.nodes_size());
      switch (rng() % 5) {
        case 0:
          AddNode(map, absl::StrCat("node-", next_id++),
                  (1 + rng() % 3) * kGiB);
          break;
        case 1:
          some->set_state(proto::NODE_DEAD);
          break;
        case 2:
          some->set_state(proto::NODE_ALIVE);
          some->mutable_info()->set_capacity_bytes((1 + rng() % 3) * kGiB);
          break;
        case 3: {
          proto::Departure* d = map.add_departures();
          d->set_node_id(some->info().node_id());
          d->set_capacity_bytes(some->info().capacity_bytes());
          d->set_epoch(map.epoch());
          some->set_state(proto::NODE_DEAD);
          break;
        }
        default:
          map.mutable_nodes()->SwapElements(0, map.nodes_size() - 1);
          break;
      }
    }
    std::shared_ptr<const BucketTable> updated =
        BucketTable::Build(map, table.get());
    std::shared_ptr<const BucketTable> fresh = BucketTable::Build(map);
    ExpectSameHomes(*updated, *fresh);
    ExpectTableMatchesMap(*updated, map, rng, /*stride=*/61);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "at step " << step;
      return;
    }
    table = updated;
  }
}

// A hand-built map may repeat an id; the update falls back to a full
// ranking and still agrees with the per-key answers.
TEST(BucketTableTest, RepeatedIdsStillGiveTheRendezvousAnswers) {
  std::mt19937_64 rng = SeededRng();
  proto::ClusterMap map;
  AddNode(map, "twin", kGiB);
  AddNode(map, "other", kGiB);
  std::shared_ptr<const BucketTable> before = BucketTable::Build(map);
  AddNode(map, "twin", 2 * kGiB);
  std::shared_ptr<const BucketTable> after =
      BucketTable::Build(map, before.get());
  ExpectTableMatchesMap(*after, map, rng, /*stride=*/13);
}

// Buckets spread in proportion to capacity: at 64 nodes, each node's share
// of buckets is within 20 % of its weight (about 5 standard deviations).
TEST(BucketTableTest, EachNodesShareOfBucketsFollowsItsCapacity) {
  std::mt19937_64 rng = SeededRng();
  proto::ClusterMap map;
  uint64_t total = 0;
  for (int i = 0; i < 64; ++i) {
    const uint64_t capacity = (1 + rng() % 4) * kGiB;
    total += capacity;
    AddNode(map, absl::StrCat("node-", i), capacity);
  }
  std::shared_ptr<const BucketTable> table = BucketTable::Build(map);
  std::vector<uint32_t> owned(map.nodes_size(), 0);
  for (uint32_t b = 0; b < kBuckets; ++b) {
    const int home = table->Home(uint64_t{b} << (64 - kBucketBits), 0);
    ASSERT_GE(home, 0);
    ++owned[home];
  }
  for (int i = 0; i < map.nodes_size(); ++i) {
    const double expected = static_cast<double>(kBuckets) *
                            map.nodes(i).info().capacity_bytes() / total;
    EXPECT_NEAR(owned[i], expected, 0.2 * expected) << "node " << i;
  }
}

}  // namespace
}  // namespace meshpool::placement
