// store/slab_manager: the slab lifecycle and reclamation, on a fake clock.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "store/layout.h"
#include "store/slab_manager.h"

namespace meshpool::store {
namespace {

constexpr uint64_t kSlabs = 4;
constexpr absl::Duration kLease = absl::Seconds(10);
constexpr absl::Duration kReadLease = absl::Seconds(2);

// A small pool in ordinary memory with a fake clock.
class SlabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PoolLayout> layout =
        ComputeLayout(8192 + kSlabs * 4096, 4096, 16);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->slab_count, kSlabs);
    layout_ = *layout;
    memory_.assign(layout_.pool_bytes / 8, 0);
    SlabManagerOptions options;
    options.layout = layout_;
    options.lease = kLease;
    options.max_read_lease = kReadLease;
    options.clock = [this] { return now_; };
    absl::StatusOr<std::unique_ptr<SlabManager>> m =
        SlabManager::Create(options, memory_.data());
    ASSERT_TRUE(m.ok()) << m.status();
    slabs_ = *std::move(m);
  }

  // Publishes an object at `offset` into index slot `slot`.
  void Publish(uint64_t slot, uint64_t offset) {
    memory_[layout_.index_offset / 8 + slot] = EncodeSlot(1, 128, offset);
  }
  void Unpublish(uint64_t slot) { memory_[layout_.index_offset / 8 + slot] = 0; }

  // Grants a slab and releases it at once; returns it (SEALED).
  uint64_t GrantAndRelease() {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(slabs_->Release("c", g->slab).ok());
    EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
    return g->slab;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000000);
  PoolLayout layout_;
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
    now_ += absl::Seconds(1);  // within lease (10 s) + margin
  }
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  EXPECT_EQ(slabs_->Counts().reclaimed, 0u);
}

TEST_F(SlabTest, LeaseExpirySealsOnlyAfterTheNodeSideMargin) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  ASSERT_TRUE(g.ok());
  now_ += kLease;  // the client's lease is over; the node waits kLeaseMargin
  slabs_->Reclaim();
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  now_ += kLeaseMargin;
  slabs_->Reclaim();
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
}

TEST_F(SlabTest, ReleaseSeals) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("c");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(slabs_->Release("c", g->slab).ok());
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kSealed);
  EXPECT_TRUE(slabs_->Release("c", g->slab).ok()) << "release is idempotent";
}

TEST_F(SlabTest, ReleaseBySomeoneElseIsFailedPrecondition) {
  absl::StatusOr<SlabGrant> g = slabs_->Grant("owner");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(slabs_->Release("intruder", g->slab).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(slabs_->state(g->slab), SlabState::kGranted);
  EXPECT_EQ(slabs_->Release("owner", kSlabs).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SlabTest, SealedSlabWithLiveReferenceIsNeverReclaimed) {
  uint64_t slab = GrantAndRelease();
  Publish(3, layout_.slab_offset(slab) + 128);
  for (int i = 0; i < 5; ++i) {
    ReclaimPass pass = slabs_->Reclaim();
    EXPECT_EQ(pass.occupied_slots, 1u);
    EXPECT_EQ(pass.freed, 0u);
    now_ += slabs_->grace();
  }
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  EXPECT_EQ(slabs_->Counts().objects, 1u);
}

TEST_F(SlabTest, UnreferencedSealedSlabIsFreedOnlyAfterGrace) {
  uint64_t slab = GrantAndRelease();
  EXPECT_EQ(slabs_->Reclaim().candidates, 1u);  // first look: candidate
  now_ += slabs_->grace() - absl::Milliseconds(1);
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(slabs_->Reclaim().freed, 1u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kFree);
  EXPECT_EQ(slabs_->Counts().reclaimed, 1u);
}

TEST_F(SlabTest, ReferenceSeenAtSecondLookRestartsTheGrace) {
  uint64_t slab = GrantAndRelease();
  slabs_->Reclaim();  // candidate, unreferenced
  // A slot pointing into the slab shows up (e.g. a CAS that landed late).
  Publish(0, layout_.slab_offset(slab));
  now_ += slabs_->grace();
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kSealed);
  // Deleted again: the grace starts over from this pass.
  Unpublish(0);
  now_ += slabs_->grace();
  EXPECT_EQ(slabs_->Reclaim().freed, 0u);
  now_ += slabs_->grace();
  EXPECT_EQ(slabs_->Reclaim().freed, 1u);
  EXPECT_EQ(slabs_->state(slab), SlabState::kFree);
}

TEST_F(SlabTest, ReclaimedSlabCanBeGrantedAgain) {
  for (uint64_t i = 0; i < kSlabs; ++i) ASSERT_TRUE(slabs_->Grant("c").ok());
  ASSERT_EQ(slabs_->Grant("c").status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(slabs_->Release("c", 2).ok());
  slabs_->Reclaim();
  now_ += slabs_->grace();
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
  EXPECT_EQ(c.index_slots, layout_.bucket_count * kSlotsPerBucket);
}

TEST(SlabManagerCreate, RejectsNonPositiveLeases) {
  absl::StatusOr<PoolLayout> layout = ComputeLayout(64 << 20);
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
  options.max_read_lease = kMaxLease + absl::Seconds(1);
  EXPECT_EQ(SlabManager::Create(options, memory.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::store
