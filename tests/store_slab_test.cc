// store/slab_manager: the slab lifecycle and reclamation, on a fake clock.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "store/slab_manager.h"
#include "tests/fake_env.h"

namespace meshpool::store {

// AllocateRegion in its two halves, so a test can act between them.
class SlabManagerTestPeer {
 public:
  static absl::StatusOr<std::vector<uint64_t>> ReserveRegion(SlabManager& m,
                                                             uint64_t region_id,
                                                             uint64_t slabs) {
    return m.ReserveRegion(region_id, slabs);
  }
  static absl::Status ZeroRegion(SlabManager& m, uint64_t region_id,
                                 const std::vector<uint64_t>& taken) {
    return m.ZeroRegion(region_id, taken);
  }
};

namespace {

constexpr uint64_t kSlabs = 4;
constexpr absl::Duration kLease = absl::Seconds(10);
constexpr absl::Duration kReadLease = absl::Seconds(2);

// A small pool in ordinary memory with a fake clock.
class SlabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One page each of superblock, index, slab table and pin area.
    absl::StatusOr<format::PoolLayout> layout =
        format::ComputeLayout(4 * 4096 + kSlabs * 4096, 4096, 16, 2, 16);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->slab_count, kSlabs);
    layout_ = *layout;
    memory_.assign(layout_.pool_bytes / 8, 0);
    SlabManagerOptions options;
    options.layout = layout_;
    options.lease = kLease;
    options.max_read_lease = kReadLease;
    options.env = &env_;
    absl::StatusOr<std::unique_ptr<SlabManager>> m =
        SlabManager::Create(options, memory_.data());
    ASSERT_TRUE(m.ok()) << m.status();
    slabs_ = *std::move(m);
  }

  // Publishes an object at `offset` into index slot `slot`.
  void Publish(uint64_t slot, uint64_t offset) {
    memory_[layout_.index_offset / 8 + slot] =
        format::EncodeSlot(1, 128, offset);
  }
  void Unpublish(uint64_t slot) {
    memory_[layout_.index_offset / 8 + slot] = 0;
  }

  // Grants a slab and releases it at once; returns it (SEALED).
  uint64_t GrantAndRelease() {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(slabs_->Release(g->slab, g->token).ok());
    EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
    return g->slab;
  }

  void DirtyEverySlab();

  mutable testing::FakeEnv env_{absl::FromUnixSeconds(1000000)};
  format::PoolLayout layout_;
  std::vector<uint64_t> memory_;
  std::unique_ptr<SlabManager> slabs_;
};

TEST_F(SlabTest, GrantUntilExhaustedIsResourceExhausted) {
  for (uint64_t i = 0; i < kSlabs; ++i) {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("client");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->offset, layout_.slab_offset(g->slab));
    EXPECT_EQ(g->length, layout_.slab_bytes);
    EXPECT_EQ(g->lease, kLease);
  }
  absl::StatusOr<SlabGrant> g = slabs_->Grant("client");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(g.status().message().find("pool full"), std::string::npos);
  EXPECT_NE(g.status().message().find("add capacity"), std::string::npos);
}

TEST_F(SlabTest, GrantedSlabIsNeverReclaimedEvenUnreferenced) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  ASSERT_TRUE(g.ok());
  for (int i = 0; i < 5; ++i) {
    slabs_->Reclaim();
    env_.Advance(absl::Seconds(1));  // within lease (10 s) + margin
  }
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  EXPECT_EQ(slabs_->Counts().reclaimed, 0u);
}

TEST_F(SlabTest, LeaseExpirySealsOnlyAfterTheNodeSideMargin) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  ASSERT_TRUE(g.ok());
  env_.Advance(
      kLease);  // the client's lease is over; the node waits kLeaseMargin
  slabs_->Reclaim();
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  env_.Advance(format::kLeaseMargin);
  slabs_->Reclaim();
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
}

TEST_F(SlabTest, ReleaseSeals) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(slabs_->Release(g->slab, g->token).ok());
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
  EXPECT_TRUE(slabs_->Release(g->slab, g->token).ok())
      << "release is idempotent";
}

TEST_F(SlabTest, ReleaseWithoutTheGrantsTokenIsPermissionDenied) {
  // Client ids are public (node stats list them): a release must name the
  // grant by its token, which only the grantee was told.
  absl::StatusOr<SlabGrant> g = slabs_->Grant("owner");
  ASSERT_TRUE(g.ok());
  EXPECT_NE(g->token, 0u);
  EXPECT_EQ(slabs_->Release(g->slab, g->token + 1).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(slabs_->Release(g->slab, 0).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  EXPECT_EQ(slabs_->Release(kSlabs, g->token).code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<SlabGrant> other = slabs_->Grant("owner");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->token, g->token);
  EXPECT_EQ(slabs_->Release(g->slab, other->token).code(),
            absl::StatusCode::kPermissionDenied)
      << "one grant's token does not release another's slab";
  EXPECT_TRUE(slabs_->Release(g->slab, g->token).ok());
}

TEST_F(SlabTest, SealedSlabWithLiveReferenceIsNeverReclaimed) {
  uint64_t slab = GrantAndRelease();
  Publish(3, layout_.slab_offset(slab) + 128);
  for (int i = 0; i < 5; ++i) {
    ReclaimPass pass = slabs_->Reclaim();
    EXPECT_EQ(pass.occupied_slots, 1u);
    EXPECT_EQ(pass.freed, 0u);
    env_.Advance(slabs_->grace());
  }
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  EXPECT_EQ(slabs_->Counts().objects, 1u);
}

TEST_F(SlabTest, UnreferencedSealedSlabIsFreedOnlyAfterGrace) {
  uint64_t slab = GrantAndRelease();
  EXPECT_EQ(slabs_->Reclaim().candidates, 1u);  // first look: candidate
  env_.Advance(slabs_->grace() - absl::Milliseconds(1));
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  env_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(slabs_->Reclaim().freed, 1u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kFree);
  EXPECT_EQ(slabs_->Counts().reclaimed, 1u);
}

TEST_F(SlabTest, ReferenceSeenAtSecondLookRestartsTheGrace) {
  uint64_t slab = GrantAndRelease();
  slabs_->Reclaim();  // candidate, unreferenced
  // A slot pointing into the slab shows up (e.g. a CAS that landed late).
  Publish(0, layout_.slab_offset(slab));
  env_.Advance(slabs_->grace());
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  // Deleted again: the grace starts over from this pass.
  Unpublish(0);
  env_.Advance(slabs_->grace());
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  env_.Advance(slabs_->grace());
  EXPECT_EQ(slabs_->Reclaim().freed, 1u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kFree);
}

TEST_F(SlabTest, ReclaimedSlabCanBeGrantedAgain) {
  std::map<uint64_t, uint64_t> tokens;  // slab -> token
  for (uint64_t i = 0; i < kSlabs; ++i) {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
    ASSERT_TRUE(g.ok());
    tokens[g->slab] = g->token;
  }
  ASSERT_EQ(slabs_->Grant("c").status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(slabs_->Release(2, tokens.at(2)).ok());
  slabs_->Reclaim();
  env_.Advance(slabs_->grace());
  ASSERT_EQ(slabs_->Reclaim().freed, 1u);
  absl::StatusOr<SlabGrant> g = slabs_->Grant("d");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->slab, 2u);
}

TEST_F(SlabTest, CountsReportStatesAndUsedBytes) {
  ASSERT_TRUE(slabs_->Grant("c").ok());
  GrantAndRelease();
  Publish(5, layout_.slab_offset(0));
  Publish(6, layout_.slab_offset(1));
  slabs_->Reclaim();
  SlabCounts c = slabs_->Counts();
  EXPECT_EQ(c.total, kSlabs);
  EXPECT_EQ(c.granted, 1u);
  EXPECT_EQ(c.sealed, 1u);
  EXPECT_EQ(c.free, kSlabs - 2);
  EXPECT_EQ(c.used_bytes, 2 * layout_.slab_bytes);
  EXPECT_EQ(c.objects, 2u);
  EXPECT_EQ(c.index_slots, layout_.bucket_count * format::kSlotsPerBucket);
}

// ---- Region slabs ----

// True when every byte of `slab` is zero.
bool SlabIsZero(const std::vector<uint64_t>& memory,
                const format::PoolLayout& layout, uint64_t slab) {
  for (uint64_t w = 0; w < layout.slab_bytes / 8; ++w) {
    if (memory[layout.slab_offset(slab) / 8 + w] != 0) return false;
  }
  return true;
}

// Fills `slab`'s bytes with a nonzero pattern.
void Scribble(std::vector<uint64_t>& memory, const format::PoolLayout& layout,
              uint64_t slab) {
  for (uint64_t w = 0; w < layout.slab_bytes / 8; ++w) {
    memory[layout.slab_offset(slab) / 8 + w] = 0xdeadbeefdeadbeef;
  }
}

// Grants every slab, writes into it as a client would, releases it and
// reclaims it: all slabs are FREE again and dirty.
void SlabTest::DirtyEverySlab() {
  for (uint64_t i = 0; i < kSlabs; ++i) {
    Scribble(memory_, layout_, GrantAndRelease());
  }
  slabs_->Reclaim();
  env_.Advance(slabs_->grace());
  ASSERT_EQ(slabs_->Reclaim().freed, kSlabs);
}

TEST_F(SlabTest, RegionSlabsAreZeroFilledAndNeverGranted) {
  DirtyEverySlab();
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 2u);
  for (uint64_t slab : *taken) {
    EXPECT_EQ(slabs_->state(slab), SlabState::kRegion);
    EXPECT_TRUE(SlabIsZero(memory_, layout_, slab)) << "slab " << slab;
  }
  std::vector<uint64_t> granted;
  for (uint64_t i = 0; i < kSlabs - 2; ++i) {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
    ASSERT_TRUE(g.ok()) << g.status();
    granted.push_back(g->slab);
    EXPECT_FALSE(SlabIsZero(memory_, layout_, g->slab));  // not a region slab
  }
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(g.status().message().find("2 held by regions"), std::string::npos)
      << g.status();
}

TEST_F(SlabTest, RegionWordsNameTheRegionFromAllocationUntilItIsFreed) {
  auto region_word = [&](uint64_t slab) {
    return memory_[(layout_.slab_meta(slab) +
                    offsetof(format::SlabMeta, region)) /
                   8];
  };
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  for (uint64_t slab = 0; slab < kSlabs; ++slab) {
    const bool held =
        std::find(taken->begin(), taken->end(), slab) != taken->end();
    EXPECT_EQ(region_word(slab), held ? 7u : 0u) << "slab " << slab;
  }
  EXPECT_EQ(slabs_->FreeRegion(7), 2u);
  for (uint64_t slab : *taken) EXPECT_EQ(region_word(slab), 0u) << slab;
  // A region freed while its slabs are cleared never names them.
  absl::StatusOr<std::vector<uint64_t>> reserved =
      SlabManagerTestPeer::ReserveRegion(*slabs_, 9, 1);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(slabs_->FreeRegion(9), 1u);
  EXPECT_EQ(SlabManagerTestPeer::ZeroRegion(*slabs_, 9, *reserved).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(region_word((*reserved)[0]), 0u);
}

TEST_F(SlabTest, RegionSlabsOutliveLeasesAndReclamation) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const uint64_t slab = (*taken)[0];
  // A client cannot seal it by "releasing" it either.
  EXPECT_TRUE(slabs_->Release(slab, 0).ok());
  for (int i = 0; i < 5; ++i) {
    ReclaimPass pass = slabs_->Reclaim();
    EXPECT_EQ(pass.freed, 0u);
    EXPECT_EQ(pass.candidates, 0u);
    env_.Advance(kLease + format::kLeaseMargin + slabs_->grace());
  }
  EXPECT_EQ(slabs_->state(slab), SlabState::kRegion);
}

TEST_F(SlabTest, FreedRegionSlabsAreReclaimedAfterTheGrace) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 3);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(slabs_->FreeRegion(7), 3u);
  for (uint64_t slab : *taken)
    EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  EXPECT_EQ(slabs_->Counts().regions_freed, 1u);
  EXPECT_EQ(slabs_->Reclaim().candidates, 3u);  // first look
  env_.Advance(slabs_->grace() - absl::Milliseconds(1));
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);  // a reader may still be in flight
  env_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(slabs_->Reclaim().freed, 3u);
  for (uint64_t slab : *taken) EXPECT_EQ(slabs_->state(slab), SlabState::kFree);
  SlabCounts c = slabs_->Counts();
  EXPECT_EQ(c.free, kSlabs);
  EXPECT_EQ(c.region, 0u);
  EXPECT_EQ(c.reclaimed, 3u);
  // Freeing again, or a region never allocated here, is a no-op.
  EXPECT_EQ(slabs_->FreeRegion(7), 0u);
  EXPECT_EQ(slabs_->FreeRegion(99), 0u);
  EXPECT_EQ(slabs_->Counts().regions_freed, 1u);
  // The region id may be allocated again once freed.
  EXPECT_TRUE(slabs_->AllocateRegion(7, 1).ok());
}

TEST_F(SlabTest, RegionFreedWhileBeingZeroedIsSealedOnlyAfterZeroing) {
  absl::StatusOr<std::vector<uint64_t>> taken =
      SlabManagerTestPeer::ReserveRegion(*slabs_, 7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  // The coordinator gave up (deadline) and frees the region while the node
  // still clears it: the slabs must stay out of reclamation's reach.
  EXPECT_EQ(slabs_->FreeRegion(7), 2u);
  env_.Advance(slabs_->grace());
  slabs_->Reclaim();
  env_.Advance(slabs_->grace());
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  for (uint64_t slab : *taken)
    EXPECT_EQ(slabs_->state(slab), SlabState::kRegion);
  EXPECT_EQ(SlabManagerTestPeer::ZeroRegion(*slabs_, 7, *taken).code(),
            absl::StatusCode::kAborted);
  for (uint64_t slab : *taken)
    EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  slabs_->Reclaim();
  env_.Advance(slabs_->grace());
  EXPECT_EQ(slabs_->Reclaim().freed, 2u);
  EXPECT_EQ(slabs_->Counts().free, kSlabs);
}

TEST_F(SlabTest, ReusedSlabsAreZeroFilledWhenARegionGetsThem) {
  // Two slabs held objects, one held a freed region; the fourth is fresh.
  for (int i = 0; i < 2; ++i) Scribble(memory_, layout_, GrantAndRelease());
  absl::StatusOr<std::vector<uint64_t>> old = slabs_->AllocateRegion(5, 1);
  ASSERT_TRUE(old.ok()) << old.status();
  Scribble(memory_, layout_, (*old)[0]);
  slabs_->FreeRegion(5);
  slabs_->Reclaim();
  env_.Advance(slabs_->grace());
  ASSERT_EQ(slabs_->Reclaim().freed, 3u);
  ASSERT_EQ(slabs_->Counts().zeroed_bytes, 0u);  // region 5's slab was fresh
  absl::StatusOr<std::vector<uint64_t>> taken =
      slabs_->AllocateRegion(7, kSlabs);
  ASSERT_TRUE(taken.ok()) << taken.status();
  for (uint64_t slab : *taken)
    EXPECT_TRUE(SlabIsZero(memory_, layout_, slab)) << "slab " << slab;
  EXPECT_EQ(slabs_->Counts().zeroed_bytes, 3 * layout_.slab_bytes);
}

TEST_F(SlabTest, NeverWrittenSlabsAreNotZeroFilledAgain) {
  // Bytes no client could have written (the mapping is fresh, so really
  // zero): left as they are, which proves no memset ran over them.
  for (uint64_t slab = 0; slab < kSlabs; ++slab)
    Scribble(memory_, layout_, slab);
  absl::StatusOr<std::vector<uint64_t>> taken =
      slabs_->AllocateRegion(7, kSlabs);
  ASSERT_TRUE(taken.ok()) << taken.status();
  for (uint64_t slab : *taken)
    EXPECT_FALSE(SlabIsZero(memory_, layout_, slab)) << "slab " << slab;
  EXPECT_EQ(slabs_->Counts().zeroed_bytes, 0u);
}

TEST_F(SlabTest, CheckRegionRangeAcceptsOnlyRangesInsideOneRegionSlab) {
  absl::StatusOr<SlabGrant> granted = slabs_->Grant("c");  // slab 0
  ASSERT_TRUE(granted.ok()) << granted.status();
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(*taken, (std::vector<uint64_t>{1, 2}));
  const uint64_t slab = layout_.slab_bytes;
  const uint64_t first = layout_.slab_offset(1);
  EXPECT_TRUE(slabs_->CheckRegionRange(first, slab).ok());
  EXPECT_TRUE(slabs_->CheckRegionRange(first + 100, 1).ok());
  EXPECT_TRUE(slabs_->CheckRegionRange(first + slab, slab).ok());
  struct Bad {
    const char* what;
    uint64_t offset;
    uint64_t length;
  };
  for (const Bad& bad : {
           Bad{"empty", first, 0},
           Bad{"across two region slabs", first + slab - 8, 16},
           Bad{"granted slab", layout_.slab_offset(0), 8},
           Bad{"free slab", layout_.slab_offset(3), 8},
           Bad{"index", layout_.index_offset, 8},
           Bad{"past the pool", layout_.pool_bytes, 8},
           Bad{"running past the pool", layout_.slab_offset(3), 2 * slab},
           Bad{"wrapping around", first, ~uint64_t{0} - 100},
       }) {
    absl::Status status = slabs_->CheckRegionRange(bad.offset, bad.length);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.what;
    EXPECT_NE(status.message().find(absl::StrCat("[", bad.offset)),
              std::string::npos)
        << status;
  }
  slabs_->FreeRegion(7);  // sealed now
  EXPECT_EQ(slabs_->CheckRegionRange(first, 8).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SlabTest, CheckRegionRangeRejectsARegionStillBeingZeroed) {
  absl::StatusOr<std::vector<uint64_t>> taken =
      SlabManagerTestPeer::ReserveRegion(*slabs_, 7, 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const uint64_t offset = layout_.slab_offset((*taken)[0]);
  EXPECT_EQ(slabs_->CheckRegionRange(offset, 8).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(SlabManagerTestPeer::ZeroRegion(*slabs_, 7, *taken).ok());
  EXPECT_TRUE(slabs_->CheckRegionRange(offset, 8).ok());
}

TEST_F(SlabTest, AllocateRegionIsAllOrNothing) {
  ASSERT_TRUE(slabs_->Grant("c").ok());
  absl::StatusOr<std::vector<uint64_t>> taken =
      slabs_->AllocateRegion(7, kSlabs);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(taken.status().message().find("has 3 of 4 free"), std::string::npos)
      << taken.status();
  SlabCounts c = slabs_->Counts();
  EXPECT_EQ(c.free, kSlabs - 1);
  EXPECT_EQ(c.region, 0u);
  EXPECT_TRUE(slabs_->AllocateRegion(7, kSlabs - 1).ok());
}

TEST_F(SlabTest, AllocatingARegionTwiceIsFailedPrecondition) {
  ASSERT_TRUE(slabs_->AllocateRegion(7, 1).ok());
  EXPECT_EQ(slabs_->AllocateRegion(7, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(slabs_->AllocateRegion(8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(slabs_->Counts().region, 1u);
}

TEST_F(SlabTest, CountsIncludeRegionSlabsInUsedBytes) {
  ASSERT_TRUE(slabs_->Grant("c").ok());
  ASSERT_TRUE(slabs_->AllocateRegion(7, 2).ok());
  SlabCounts c = slabs_->Counts();
  EXPECT_EQ(c.region, 2u);
  EXPECT_EQ(c.granted, 1u);
  EXPECT_EQ(c.free, kSlabs - 3);
  EXPECT_EQ(c.used_bytes, 3 * layout_.slab_bytes);
}

TEST(SlabManagerCreate, RejectsNonPositiveLeases) {
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(64 << 20);
  ASSERT_TRUE(layout.ok());
  std::vector<uint64_t> memory(8);
  SlabManagerOptions options;
  options.layout = *layout;
  options.lease = absl::ZeroDuration();
  EXPECT_EQ(SlabManager::Create(options, memory.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.lease = kLease;
  options.max_read_lease = -absl::Seconds(1);
  EXPECT_EQ(SlabManager::Create(options, memory.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.max_read_lease = format::kMaxLease + absl::Seconds(1);
  EXPECT_EQ(SlabManager::Create(options, memory.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::store
