// store/pin_area: carving pin tables out of the pin area, the quarantine of
// returned ones, merging, and a random history checked against a model.
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "store/pin_area.h"

namespace meshpool::store {
namespace {

constexpr absl::Duration kRest = absl::Seconds(6);
const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(PinArea, GrantsBestFitAndHalvesWhenNoRunIsLongEnough) {
  PinArea area(1024, kRest);
  std::optional<PinArea::Run> a = area.Grant(512, 64, kT0);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->first, 0u);
  EXPECT_EQ(a->length, 512u);
  std::optional<PinArea::Run> b = area.Grant(256, 64, kT0);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->first, 512u);
  // 256 entries are left: a request for 1000 halves to the next power of
  // two below (512) and then to 256.
  std::optional<PinArea::Run> c = area.Grant(1000, 64, kT0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->first, 768u);
  EXPECT_EQ(c->length, 256u);
  EXPECT_EQ(area.free_entries(), 0u);
  EXPECT_FALSE(area.Grant(64, 64, kT0).has_value());
  EXPECT_FALSE(area.Grant(1, 64, kT0).has_value());
}

TEST(PinArea, NeverGrantsUnderTheFloorOrUnderAskedWhenAskedIsSmaller) {
  PinArea area(100, kRest);
  ASSERT_TRUE(area.Grant(60, 64, kT0).has_value());  // 40 left
  // 40 < 64: a request for 64 or more fails; one for 40 or fewer fits.
  EXPECT_FALSE(area.Grant(64, 64, kT0).has_value());
  EXPECT_FALSE(area.Grant(4096, 64, kT0).has_value());
  std::optional<PinArea::Run> small = area.Grant(40, 64, kT0);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->length, 40u);
}

TEST(PinArea, ReturnedRunsRestAQuarantineThenMergeWithTheirNeighbours) {
  PinArea area(256, kRest);
  std::vector<PinArea::Run> runs;
  for (int i = 0; i < 4; ++i) runs.push_back(*area.Grant(64, 64, kT0));
  area.Return(runs[1], kT0);
  area.Return(runs[2], kT0 + absl::Seconds(1));
  EXPECT_EQ(area.resting_entries(), 128u);
  EXPECT_FALSE(area.Grant(64, 64, kT0 + kRest - absl::Milliseconds(1)));
  // The first has rested; the second not yet.
  std::optional<PinArea::Run> again = area.Grant(64, 64, kT0 + kRest);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->first, runs[1].first);
  area.Return(*again, kT0 + kRest);
  // Both rested: one run of 128 between the two held ones.
  std::optional<PinArea::Run> merged =
      area.Grant(128, 64, kT0 + absl::Seconds(20));
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(merged->first, 64u);
  EXPECT_EQ(merged->length, 128u);
  area.Return(runs[0], kT0 + absl::Seconds(20));
  area.Return(runs[3], kT0 + absl::Seconds(20));
  area.Return(*merged, kT0 + absl::Seconds(20));
  std::optional<PinArea::Run> whole =
      area.Grant(256, 64, kT0 + absl::Seconds(40));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->first, 0u);
  EXPECT_EQ(whole->length, 256u);
}

TEST(PinArea, AClockSteppingBackNeverShortensARest) {
  PinArea area(128, kRest);
  PinArea::Run a = *area.Grant(64, 64, kT0);
  PinArea::Run b = *area.Grant(64, 64, kT0);
  area.Return(a, kT0 + absl::Seconds(10));
  area.Return(b, kT0);  // the clock stepped back 10 s
  // b rests behind a: not free at kT0 + kRest.
  EXPECT_FALSE(area.Grant(64, 64, kT0 + kRest).has_value());
  EXPECT_TRUE(area.Grant(128, 64, kT0 + absl::Seconds(10) + kRest));
}

// Random grants and returns against a model of which entries are held:
// no entry is ever in two tables, and every entry not held is free again
// once everything has rested.
TEST(PinArea, RandomHistoriesNeverOverlapAndEndWhole) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << "\n";
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  constexpr uint64_t kEntries = 4096 + 320;  // not a power of two
  PinArea area(kEntries, kRest);
  std::vector<int> owner(kEntries, -1);
  std::vector<PinArea::Run> held;
  absl::Time now = kT0;
  for (int step = 0; step < 20000; ++step) {
    now += absl::Milliseconds(rng() % 200);
    if (held.empty() || rng() % 2 == 0) {
      const uint64_t want = 1 + rng() % 1500;
      std::optional<PinArea::Run> run = area.Grant(want, 64, now);
      if (!run.has_value()) continue;
      ASSERT_LE(run->length, want);
      ASSERT_GE(run->length, std::min<uint64_t>(want, 64));
      ASSERT_LE(run->first + run->length, kEntries);
      for (uint64_t e = run->first; e < run->first + run->length; ++e) {
        ASSERT_EQ(owner[e], -1) << "entry " << e << " granted twice";
        owner[e] = step;
      }
      held.push_back(*run);
    } else {
      const size_t i = rng() % held.size();
      for (uint64_t e = held[i].first; e < held[i].first + held[i].length;
           ++e) {
        owner[e] = -1;
      }
      area.Return(held[i], now);
      held[i] = held.back();
      held.pop_back();
    }
  }
  for (const PinArea::Run& run : held) area.Return(run, now);
  std::optional<PinArea::Run> whole =
      area.Grant(kEntries, kEntries, now + kRest);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->first, 0u);
  EXPECT_EQ(whole->length, kEntries);
  EXPECT_EQ(area.resting_entries(), 0u);
}

}  // namespace
}  // namespace meshpool::store
