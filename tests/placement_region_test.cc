// placement/region_layout: region names, RegionInfo decoding, stripe
// placement.
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/region_layout.h"

namespace meshpool::placement {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = kStripeAlign;

std::string Entry(const std::vector<uint16_t>& extents) {
  std::string bytes;
  for (uint16_t e : extents) {
    bytes.push_back(static_cast<char>(e & 0xff));
    bytes.push_back(static_cast<char>(e >> 8));
  }
  return bytes;
}

proto::RegionExtent Extent(const std::string& node, uint64_t slab_bytes,
                           const std::vector<uint64_t>& offsets) {
  proto::RegionExtent extent;
  extent.set_node_id(node);
  extent.set_incarnation(7);
  extent.set_slab_bytes(slab_bytes);
  for (uint64_t o : offsets) extent.add_slab_offsets(o);
  return extent;
}

// One extent of 16 KiB slabs (4 stripes of 4 KiB each), 6 stripes.
proto::RegionInfo OneExtentInfo() {
  proto::RegionInfo info;
  info.set_name("one");
  info.set_size(5 * kPage + 100);
  info.set_stripe_bytes(kPage);
  info.set_replicas(1);
  *info.add_extents() = Extent("n1", 4 * kPage, {1000 * kPage, 5000 * kPage});
  info.add_stripe_extents(Entry({0, 0, 0, 0, 0, 0}));
  return info;
}

TEST(RegionName, AcceptsLettersDigitsAndPunctuation) {
  EXPECT_TRUE(ValidateRegionName("models/llama-3.1:8b@v2+q=4#a_b").ok());
  EXPECT_TRUE(ValidateRegionName(std::string(kMaxRegionNameBytes, 'a')).ok());
}

TEST(RegionName, RejectsEmptyLongSpacesAndControlBytes) {
  for (const std::string& bad :
       {std::string(), std::string(kMaxRegionNameBytes + 1, 'a'), std::string("a b"),
        std::string("a\nb"), std::string("caf\xc3\xa9"), std::string("a*b")}) {
    absl::Status s = ValidateRegionName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ValidateRegionName("a b").message()), HasSubstr("position 1"));
  EXPECT_THAT(std::string(ValidateRegionName("").message()), HasSubstr("use 1 to 256"));
}

TEST(RegionLayoutTest, OffsetsCrossSlabBoundaries) {
  absl::StatusOr<RegionLayout> layout = RegionLayout::Create(OneExtentInfo());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->stripes(), 6u);
  EXPECT_EQ(layout->replicas(), 1u);
  for (uint64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(layout->Copy(s, 0).pool_offset, 1000 * kPage + s * kPage) << s;
  }
  EXPECT_EQ(layout->Copy(4, 0).pool_offset, 5000 * kPage);
  EXPECT_EQ(layout->Copy(5, 0).pool_offset, 5001 * kPage);
  EXPECT_EQ(layout->Copy(5, 0).extent, 0);
  EXPECT_EQ(layout->StripeLength(0), kPage);
  EXPECT_EQ(layout->StripeLength(5), 100u);
  EXPECT_EQ(layout->CopiesOn(0), 6u);
}

TEST(RegionLayoutTest, CopiesAreNumberedPerExtentInStripeThenReplicaOrder) {
  proto::RegionInfo info;
  info.set_name("two");
  info.set_size(3 * kPage);
  info.set_stripe_bytes(kPage);
  info.set_replicas(2);
  *info.add_extents() = Extent("a", 2 * kPage, {0x100000, 0x200000});
  *info.add_extents() = Extent("b", kPage, {0x10000, 0x20000, 0x30000});
  // stripe:      0  1  2
  info.add_stripe_extents(Entry({0, 1, 0}));  // replica 0
  info.add_stripe_extents(Entry({1, 0, 1}));  // replica 1
  absl::StatusOr<RegionLayout> layout = RegionLayout::Create(info);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Extent a: s0r0 (k0), s1r1 (k1), s2r0 (k2 -> second slab).
  EXPECT_EQ(layout->Copy(0, 0).pool_offset, 0x100000u);
  EXPECT_EQ(layout->Copy(1, 1).pool_offset, 0x100000u + kPage);
  EXPECT_EQ(layout->Copy(2, 0).pool_offset, 0x200000u);
  // Extent b (one stripe per slab): s0r1, s1r0, s2r1.
  EXPECT_EQ(layout->Copy(0, 1).pool_offset, 0x10000u);
  EXPECT_EQ(layout->Copy(1, 0).pool_offset, 0x20000u);
  EXPECT_EQ(layout->Copy(2, 1).pool_offset, 0x30000u);
  EXPECT_EQ(layout->Copy(1, 0).extent, 1);
  EXPECT_EQ(layout->CopiesOn(0), 3u);
  EXPECT_EQ(layout->CopiesOn(1), 3u);
}

TEST(RegionLayoutTest, RejectsInconsistentInfos) {
  struct Case {
    const char* what;
    std::function<void(proto::RegionInfo&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"size 0", [](proto::RegionInfo& i) { i.set_size(0); }, "size is 0"},
      {"unaligned stripe", [](proto::RegionInfo& i) { i.set_stripe_bytes(1000); },
       "multiple of 4096"},
      {"stripe over slab", [](proto::RegionInfo& i) { i.set_stripe_bytes(8 * kPage); },
       "smaller than a stripe"},
      {"no replicas", [](proto::RegionInfo& i) { i.set_replicas(0); }, "replicas"},
      {"too many replicas", [](proto::RegionInfo& i) { i.set_replicas(kMaxReplicas + 1); },
       "replicas"},
      {"no extents", [](proto::RegionInfo& i) { i.clear_extents(); }, "0 extents"},
      {"short entry",
       [](proto::RegionInfo& i) {
         i.set_stripe_extents(0, Entry({0, 0}));
       },
       "has 4 bytes, not 12"},
      {"entries for another replica count",
       [](proto::RegionInfo& i) {
         i.add_stripe_extents(Entry({0, 0, 0, 0, 0, 0}));
       },
       "2 stripe_extents entries for 1 replicas"},
      {"unknown extent",
       [](proto::RegionInfo& i) {
         i.set_stripe_extents(0, Entry({0, 0, 3, 0, 0, 0}));
       },
       "names extent 3"},
      {"too few slabs",
       [](proto::RegionInfo& i) { i.mutable_extents(0)->mutable_slab_offsets()->RemoveLast(); },
       "too few"},
      {"too many stripes", [](proto::RegionInfo& i) { i.set_size(kMaxRegionStripes * kPage + 1); },
       "stripes"},
  };
  for (const Case& c : cases) {
    proto::RegionInfo info = OneExtentInfo();
    c.mutate(info);
    absl::StatusOr<RegionLayout> layout = RegionLayout::Create(info);
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(layout.status().message()), HasSubstr(c.message)) << c.what;
  }
}

TEST(RegionLayoutTest, RejectsTwoCopiesOfAStripeOnOneExtent) {
  proto::RegionInfo info = OneExtentInfo();
  info.set_replicas(2);
  *info.add_extents() = Extent("n2", 4 * kPage, {0, 4 * kPage});
  info.add_stripe_extents(Entry({1, 1, 1, 0, 1, 1}));  // stripe 3: 0 and 0
  absl::StatusOr<RegionLayout> layout = RegionLayout::Create(info);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("stripe 3 has two copies"));
}

// ---- PlaceStripes ----

std::vector<PlacementCandidate> Candidates(const std::vector<uint64_t>& free) {
  std::vector<PlacementCandidate> candidates;
  for (size_t i = 0; i < free.size(); ++i) {
    candidates.push_back({"node-" + std::to_string(i + 1), free[i]});
  }
  return candidates;
}

// Checks the invariants every placement keeps; returns copies per candidate.
std::vector<uint64_t> CheckPlacement(const std::vector<std::vector<uint16_t>>& placed,
                                     const std::vector<PlacementCandidate>& candidates,
                                     uint64_t stripes, uint32_t replicas) {
  std::vector<uint64_t> copies(candidates.size(), 0);
  EXPECT_EQ(placed.size(), replicas);
  for (const std::vector<uint16_t>& replica : placed) EXPECT_EQ(replica.size(), stripes);
  if (placed.size() != replicas) return copies;
  for (uint64_t s = 0; s < stripes; ++s) {
    std::set<uint16_t> holders;
    for (uint32_t r = 0; r < replicas; ++r) {
      const uint16_t c = placed[r][s];
      EXPECT_LT(c, candidates.size());
      if (c >= candidates.size()) return copies;
      EXPECT_TRUE(holders.insert(c).second) << "stripe " << s << " has two copies on " << c;
      ++copies[c];
    }
  }
  for (size_t c = 0; c < candidates.size(); ++c) {
    EXPECT_LE(copies[c], candidates[c].free_stripes) << "candidate " << c;
  }
  return copies;
}

TEST(PlaceStripesTest, SharesFollowFreeSpaceOneTwoOne) {
  const std::vector<PlacementCandidate> candidates = Candidates({1000, 2000, 1000});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed = PlaceStripes(candidates, 400, 1);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(CheckPlacement(*placed, candidates, 400, 1), (std::vector<uint64_t>{100, 200, 100}));
}

TEST(PlaceStripesTest, StripesSpreadEvenlyAlongTheRegion) {
  const std::vector<PlacementCandidate> candidates = Candidates({1000, 2000, 1000});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed = PlaceStripes(candidates, 400, 1);
  ASSERT_TRUE(placed.ok()) << placed.status();
  const std::vector<uint16_t>& row = (*placed)[0];
  // A sequential read touches every node: any 4 consecutive stripes (the
  // shares are 1/4, 1/2, 1/4) hit all three, any 2 at least two.
  for (size_t s = 0; s + 4 <= row.size(); ++s) {
    std::set<uint16_t> window(row.begin() + s, row.begin() + s + 4);
    EXPECT_EQ(window.size(), 3u) << "stripes " << s << ".." << s + 3;
    EXPECT_NE(row[s], row[s + 1]) << "stripes " << s << ", " << s + 1;
  }
}

TEST(PlaceStripesTest, ReplicasOfAStripeLandOnDistinctNodesInProportion) {
  const std::vector<PlacementCandidate> candidates = Candidates({500, 500, 1000, 1000});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed = PlaceStripes(candidates, 300, 3);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(CheckPlacement(*placed, candidates, 300, 3),
            (std::vector<uint64_t>{150, 150, 300, 300}));
}

TEST(PlaceStripesTest, ABigNodeTakesOneCopyPerStripeAndTheRestShareTheRest) {
  // Node 0's proportional share (200 * 1000 / 1100) exceeds one copy per
  // stripe; it is capped there and the others take what remains, each
  // within its free stripes.
  const std::vector<PlacementCandidate> candidates = Candidates({1000, 50, 60});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed = PlaceStripes(candidates, 100, 2);
  ASSERT_TRUE(placed.ok()) << placed.status();
  std::vector<uint64_t> copies = CheckPlacement(*placed, candidates, 100, 2);
  EXPECT_EQ(copies[0], 100u);
  EXPECT_EQ(copies[1], 45u);  // 100 * 50 / 110, rounded
  EXPECT_EQ(copies[2], 55u);
}

TEST(PlaceStripesTest, TightCapacitiesAreFilledExactly) {
  // Every copy must go exactly where there is room: candidate 0 in every
  // stripe, 1 in three of four, 2 in one.
  const std::vector<PlacementCandidate> candidates = Candidates({4, 3, 1});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed = PlaceStripes(candidates, 4, 2);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(CheckPlacement(*placed, candidates, 4, 2), (std::vector<uint64_t>{4, 3, 1}));
}

TEST(PlaceStripesTest, RandomFeasibleInputsAlwaysPlace) {
  const uint32_t seed = std::random_device()();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const uint64_t stripes = 1 + rng() % 60;
    const uint32_t replicas = 1 + rng() % 4;
    const size_t n = replicas + rng() % 6;
    // Tight half the time: free space sums to exactly what is needed, each
    // candidate at most one copy per stripe.
    std::vector<uint64_t> free(n, 0);
    if (round % 2 == 0) {
      uint64_t left = stripes * replicas;
      // Fill candidates up to `stripes` each, spread at random.
      while (left > 0) {
        size_t c = rng() % n;
        if (free[c] < stripes) {
          ++free[c];
          --left;
        }
      }
    } else {
      for (uint64_t& f : free) f = rng() % (3 * stripes);
    }
    const std::vector<PlacementCandidate> candidates = Candidates(free);
    uint64_t usable = 0;
    size_t with_room = 0;
    for (uint64_t f : free) {
      usable += std::min(f, stripes);
      with_room += f > 0;
    }
    absl::StatusOr<std::vector<std::vector<uint16_t>>> placed =
        PlaceStripes(candidates, stripes, replicas);
    const bool feasible = with_room >= replicas && usable >= stripes * replicas;
    ASSERT_EQ(placed.ok(), feasible)
        << "seed " << seed << " round " << round << ": " << placed.status();
    if (!placed.ok()) continue;
    std::vector<uint64_t> copies = CheckPlacement(*placed, candidates, stripes, replicas);
    uint64_t total = 0;
    for (uint64_t c : copies) total += c;
    EXPECT_EQ(total, stripes * replicas) << "seed " << seed << " round " << round;
    ASSERT_FALSE(::testing::Test::HasFailure()) << "seed " << seed << " round " << round;
  }
}

TEST(PlaceStripesTest, SameInputsSamePlacement) {
  const std::vector<PlacementCandidate> candidates = Candidates({7, 300, 41, 41, 1000});
  absl::StatusOr<std::vector<std::vector<uint16_t>>> a = PlaceStripes(candidates, 97, 2);
  absl::StatusOr<std::vector<std::vector<uint16_t>>> b = PlaceStripes(candidates, 97, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(PlaceStripesTest, NotEnoughFreeSpaceIsResourceExhausted) {
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed =
      PlaceStripes(Candidates({10, 20, 5}), 40, 1);
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(placed.status().message()), HasSubstr("needs 40"));
  EXPECT_THAT(std::string(placed.status().message()), HasSubstr("room for 35"));
}

TEST(PlaceStripesTest, SpaceOnTooFewNodesForDistinctReplicasIsResourceExhausted) {
  // 20 copies needed, but one node can hold only one copy of each stripe.
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed =
      PlaceStripes(Candidates({1000, 1}), 10, 2);
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(placed.status().message()), HasSubstr("distinct nodes"));
}

TEST(PlaceStripesTest, FewerNodesWithRoomThanReplicasIsFailedPrecondition) {
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed =
      PlaceStripes(Candidates({1000, 0, 1000}), 10, 3);
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.status().message()), HasSubstr("2 have any"));
}

TEST(PlaceStripesTest, BadArgumentsAreInvalidArgument) {
  const std::vector<PlacementCandidate> candidates = Candidates({100, 100});
  EXPECT_EQ(PlaceStripes(candidates, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceStripes(candidates, kMaxRegionStripes + 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceStripes(candidates, 10, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceStripes(candidates, 10, kMaxReplicas + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<PlacementCandidate> many(kMaxRegionExtents + 1, PlacementCandidate{"n", 1});
  EXPECT_EQ(PlaceStripes(many, 10, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::placement
