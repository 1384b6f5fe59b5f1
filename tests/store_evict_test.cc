// store/evictor: eviction policy and GrantSlab on a full pool, against a
// pool in ordinary memory with a fake clock and a slot clearer that CASes
// the memory directly (the node-level tests in store_node_kv_test.cc clear
// through a real transport endpoint).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "store/evictor.h"
#include "store/pin_tables.h"
#include "store/slab_manager.h"
#include "store/slot_clearer.h"
#include "tests/fake_env.h"

namespace meshpool::store {
namespace {

constexpr uint64_t kSlabs = 10;
constexpr uint64_t kBuckets = 64;
constexpr uint64_t kIncarnation = 77;
constexpr int kObjectsPerSlab = 3;
constexpr absl::Duration kSessionLease = absl::Seconds(10);

// CASes slots in the pool memory itself (the test stands in for the
// transport), recording what it was asked.
class MemoryClearer : public SlotClearer {
 public:
  explicit MemoryClearer(char* pool) : pool_(pool) {}
  absl::Status Clear(absl::Span<const SlotClear> slots,
                     absl::Span<uint64_t> old) override {
    ++calls;
    if (fail_next > 0) {
      --fail_next;
      return absl::UnavailableError("test: endpoint broken");
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      offsets.push_back(slots[i].offset);
      uint64_t expected = slots[i].expected;
      std::atomic_ref<uint64_t>(
          *reinterpret_cast<uint64_t*>(pool_ + slots[i].offset))
          .compare_exchange_strong(expected, 0);
      old[i] = expected;  // the previous word, whether it matched or not
    }
    return absl::OkStatus();
  }
  int calls = 0;
  int fail_next = 0;
  std::vector<uint64_t> offsets;

 private:
  char* pool_;
};

class EvictTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(/*enabled=*/true); }

  void Build(bool enabled, double high = 0.9, double low = 0.8,
             uint64_t tenant_cap = 0) {
    // One page each of superblock, index, slab table and pin area.
    absl::StatusOr<format::PoolLayout> layout =
        format::ComputeLayout(4 * 4096 + kSlabs * 4096, 4096, kBuckets, 2, 16);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->slab_count, kSlabs);
    layout_ = *layout;
    memory_.assign(layout_.pool_bytes / 8, 0);
    SlabManagerOptions slab_options;
    slab_options.layout = layout_;
    slab_options.env = &env_;
    slab_options.max_granted_per_tenant = tenant_cap;
    auto slabs = SlabManager::Create(slab_options, memory_.data());
    ASSERT_TRUE(slabs.ok()) << slabs.status();
    slabs_ = *std::move(slabs);
    PinTablesOptions pin_options;
    pin_options.layout = layout_;
    pin_options.incarnation = kIncarnation;
    pin_options.lease = kSessionLease;
    // PinTables reads its clock as it starts reading the tables: the test
    // looks at the slab table at that moment.
    pin_options.env = &pin_env_;
    auto pins = PinTables::Create(pin_options, pool());
    ASSERT_TRUE(pins.ok()) << pins.status();
    pins_ = *std::move(pins);
    auto clearer = std::make_unique<MemoryClearer>(pool());
    clearer_ = clearer.get();
    EvictorOptions options;
    options.enabled = enabled;
    options.high_watermark = high;
    options.low_watermark = low;
    options.env = &env_;
    auto evictor = Evictor::Create(options, slabs_.get(), pins_.get(),
                                   std::move(clearer), pool());
    ASSERT_TRUE(evictor.ok()) << evictor.status();
    evictor_ = *std::move(evictor);
    evictor_->set_wake([this] { ++wakes_; });
    slot_slab_.clear();
    next_slot_ = 0;
  }

  char* pool() { return reinterpret_cast<char*>(memory_.data()); }
  uint64_t Word(uint64_t slot) const {
    return memory_[layout_.index_offset / 8 + slot];
  }
  uint64_t Evicting(uint64_t slab) const {
    return memory_[layout_.slab_meta(slab) / 8];
  }
  void Touch(uint64_t slab) { memory_[layout_.slab_meta(slab) / 8 + 1] = 1; }
  uint64_t Touched(uint64_t slab) const {
    return memory_[layout_.slab_meta(slab) / 8 + 1];
  }
  uint64_t ObjectOffset(uint64_t slab, int k) const {
    return layout_.slab_offset(slab) + k * 512;
  }

  // Grants a slab, writes kObjectsPerSlab objects into it and publishes
  // them, as a client would, then (with `seal`) seals it. Returns the slab.
  uint64_t FillSlab(bool seal = true) {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("writer");
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return kSlabs;
    for (int k = 0; k < kObjectsPerSlab; ++k) {
      const std::string key = absl::StrCat("key-", g->slab, "-", k);
      const std::string value(100, 'a' + k);
      const uint64_t offset = ObjectOffset(g->slab, k);
      const uint64_t bytes = format::ObjectBytes(key.size(), value.size());
      format::EncodeObject(absl::MakeSpan(pool() + offset, bytes), key,
                           format::HashKey(key), value, kIncarnation, 1);
      const uint64_t slot = next_slot_++;
      memory_[layout_.index_offset / 8 + slot] =
          format::EncodeSlot(7, bytes, offset);
      slot_slab_[slot] = g->slab;
    }
    tokens_[g->slab] = g->token;
    if (seal) {
      EXPECT_TRUE(slabs_->Release(g->slab, g->token).ok());
    }
    return g->slab;
  }

  // Slots whose word is still what FillSlab published, by slab.
  std::map<uint64_t, int> LiveSlotsBySlab() const {
    std::map<uint64_t, int> live;
    for (const auto& [slot, slab] : slot_slab_) {
      if (Word(slot) != 0) ++live[slab];
    }
    return live;
  }

  // Two reclamation passes a grace apart: unreferenced sealed slabs free.
  uint64_t ReclaimAfterGrace() {
    uint64_t freed = slabs_->Reclaim().freed;
    env_.Advance(slabs_->grace());
    return freed + slabs_->Reclaim().freed;
  }

  void WritePin(const SessionGrant& session, uint64_t entry, uint64_t offset,
                uint64_t expiry_ms) {
    format::PinEntry pin{offset, expiry_ms};
    std::memcpy(pool() + session.table_offset + entry * format::kPinEntryBytes,
                &pin, sizeof(pin));
  }
  uint64_t NowMs() const { return absl::ToUnixMillis(env_.Now()); }

  std::function<void()> on_pin_clock_;
  mutable testing::FakeEnv env_{absl::FromUnixSeconds(1'700'000'000)};
  // The pin tables' clock: env_'s, after on_pin_clock_.
  class PinEnv final : public Env {
   public:
    explicit PinEnv(EvictTest* test) : test_(test) {}
    absl::Time Now() override {
      if (test_->on_pin_clock_) test_->on_pin_clock_();
      return test_->env_.Now();
    }
    void Log(absl::string_view source, absl::string_view message) override {
      test_->env_.Log(source, message);
    }

   private:
    EvictTest* const test_;
  };
  PinEnv pin_env_{this};  // before what reads it
  format::PoolLayout layout_;
  std::vector<uint64_t> memory_;
  std::unique_ptr<SlabManager> slabs_;
  std::unique_ptr<PinTables> pins_;
  MemoryClearer* clearer_ = nullptr;
  std::unique_ptr<Evictor> evictor_;
  int wakes_ = 0;
  std::map<uint64_t, uint64_t> slot_slab_;  // published slot -> slab
  std::map<uint64_t, uint64_t> tokens_;     // slab -> its grant's token
  uint64_t next_slot_ = 0;
};

TEST_F(EvictTest, BelowTheHighWatermarkNothingIsEvicted) {
  for (uint64_t i = 0; i < 9; ++i) FillSlab();  // 9 of 10 used: not > 0.9
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.needed, 0u);
  EXPECT_EQ(round.evicted, 0u);
  EXPECT_EQ(clearer_->calls, 0);
  EXPECT_EQ(LiveSlotsBySlab().size(), 9u);
}

TEST_F(EvictTest,
       EvictsInSealOrderDownToTheLowWatermarkAndClearsOnlyTheirSlots) {
  // Seal order differs from slab (and grant) order: fill all, then seal
  // them in a shuffled order; order[0] and order[1] were sealed first.
  std::vector<uint64_t> granted;
  for (uint64_t i = 0; i < kSlabs; ++i) granted.push_back(FillSlab(false));
  std::vector<uint64_t> order;
  for (uint64_t i : {7, 2, 9, 0, 5, 1, 8, 3, 6, 4}) order.push_back(granted[i]);
  for (uint64_t slab : order) {
    ASSERT_TRUE(slabs_->Release(slab, tokens_[slab]).ok());
  }
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.needed, 2u);  // 10 used > 9: down to 8, not further
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(round.objects, 2u * kObjectsPerSlab);
  EXPECT_TRUE(round.status.ok()) << round.status;
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live.count(order[0]), 0u);
  EXPECT_EQ(live.count(order[1]), 0u);
  for (size_t i = 2; i < order.size(); ++i) {
    EXPECT_EQ(live[order[i]], kObjectsPerSlab) << "slab " << order[i];
  }
  // Every CAS named a slot of an evicted slab.
  ASSERT_EQ(clearer_->offsets.size(), 2u * kObjectsPerSlab);
  for (uint64_t offset : clearer_->offsets) {
    uint64_t slot = (offset - layout_.index_offset) / format::kSlotBytes;
    uint64_t slab = slot_slab_.at(slot);
    EXPECT_TRUE(slab == order[0] || slab == order[1]) << slab;
  }
  EXPECT_NE(Evicting(order[0]), 0u);
  EXPECT_NE(Evicting(order[1]), 0u);
  EXPECT_EQ(Evicting(order[2]), 0u);
  SlabCounts c = slabs_->Counts();
  EXPECT_EQ(c.evicted, 2u);
  EXPECT_EQ(c.objects_evicted, 2u * kObjectsPerSlab);
  EXPECT_EQ(c.sealed, kSlabs) << "evicted slabs stay SEALED until reclaimed";
  // Hysteresis: the evicted slabs are on their way to FREE, so used is at
  // the low watermark and another round evicts nothing.
  EXPECT_EQ(slabs_->Eviction().used, 8u);
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u);
  EXPECT_EQ(ReclaimAfterGrace(), 2u);
}

TEST_F(EvictTest, RefillAboveHighEvictsDownToLowAgainNotBeyond) {
  for (uint64_t i = 0; i < kSlabs; ++i) FillSlab();
  ASSERT_EQ(evictor_->RunOnce().evicted, 2u);
  ASSERT_EQ(ReclaimAfterGrace(), 2u);
  FillSlab();  // 9 used: at the high watermark, not above
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u);
  ASSERT_TRUE(slabs_->Grant("w2").ok());  // 10 used (one GRANTED)
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.needed, 2u);
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(slabs_->Eviction().used, 8u);
}

TEST_F(EvictTest, TouchedSlabGetsASecondChanceAndMovesToTheTail) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  Touch(order[0]);
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.second_chances, 1u);
  EXPECT_EQ(round.evicted, 2u);
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live[order[0]], kObjectsPerSlab) << "the touched slab stays";
  EXPECT_EQ(live.count(order[1]), 0u);
  EXPECT_EQ(live.count(order[2]), 0u);
  EXPECT_EQ(Touched(order[0]), 0u) << "the evictor clears the touched word";
  EXPECT_EQ(Evicting(order[0]), 0u);
  // It went to the FIFO's tail: the next candidates are order[3], ... and
  // order[0] comes last.
  const std::vector<uint64_t> fifo = slabs_->Eviction().candidates;
  ASSERT_EQ(fifo.size(), 8u);
  EXPECT_EQ(fifo.front(), order[3]);
  EXPECT_EQ(fifo.back(), order[0]);
}

TEST_F(EvictTest, WhenEverySlabWasTouchedTheOldestGoAfterAll) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  for (uint64_t slab : order) Touch(slab);
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.second_chances, kSlabs);
  EXPECT_EQ(round.evicted, 2u);
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live.count(order[0]), 0u);
  EXPECT_EQ(live.count(order[1]), 0u);
}

TEST_F(EvictTest, HardAndTtlPinnedSlabsSurviveWhileTheNextOnesGo) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  WritePin(*session, 0, ObjectOffset(order[0], 1), format::kPinForever);
  WritePin(*session, 5, ObjectOffset(order[1], 2), NowMs() + 60'000);
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.pinned, 2u);
  EXPECT_EQ(round.evicted, 2u);
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live[order[0]], kObjectsPerSlab);
  EXPECT_EQ(live[order[1]], kObjectsPerSlab);
  EXPECT_EQ(live.count(order[2]), 0u);
  EXPECT_EQ(live.count(order[3]), 0u);
  // The pinned slabs' evicting words were set, then cleared again.
  EXPECT_EQ(Evicting(order[0]), 0u);
  EXPECT_EQ(Evicting(order[1]), 0u);
  EXPECT_NE(Evicting(order[2]), 0u);
}

TEST_F(EvictTest, EvictingWordsAreSetBeforeThePinTablesAreRead) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  WritePin(*session, 0, ObjectOffset(order[0], 0), format::kPinForever);
  // A client whose pin lands after the tables were read must see the slab's
  // evicting word set: so it is set before they are read.
  std::vector<std::pair<uint64_t, uint64_t>> seen;  // words of the batch
  on_pin_clock_ = [&] {
    seen.emplace_back(Evicting(order[0]), Evicting(order[1]));
  };
  EvictRound round = evictor_->RunOnce();
  on_pin_clock_ = nullptr;
  // A first look passes the pinned slab over without marking it; the look
  // that decides order[1]'s fate comes after its word was set.
  ASSERT_GE(seen.size(), 2u);
  for (const auto& [pinned_word, evicted_word] : seen) {
    EXPECT_EQ(pinned_word, 0u) << "a slab pinned all along is never marked";
  }
  EXPECT_EQ(seen.front().second, 0u);
  EXPECT_NE(seen.back().second, 0u);
  EXPECT_EQ(round.pinned, 1u);
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(Evicting(order[0]), 0u);
}

TEST_F(EvictTest, PinLandingAfterTheMarkIsSeenAndKeepsTheSlab) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  // The client's pin WRITE lands after the round's first look at the
  // tables, once the oldest slab is marked, just before the second look.
  int looks = 0;
  on_pin_clock_ = [&] {
    if (++looks == 2) {
      EXPECT_NE(Evicting(order[0]), 0u);
      WritePin(*session, 0, ObjectOffset(order[0], 2), NowMs() + 5000);
    }
  };
  EvictRound round = evictor_->RunOnce();
  on_pin_clock_ = nullptr;
  EXPECT_EQ(round.pinned, 1u);
  EXPECT_EQ(round.evicted, 2u);
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live[order[0]], kObjectsPerSlab);
  EXPECT_EQ(live.count(order[1]), 0u);
  EXPECT_EQ(live.count(order[2]), 0u);
  EXPECT_EQ(Evicting(order[0]), 0u) << "kept: its word is cleared again";
  EXPECT_EQ(slabs_->Eviction().candidates.back(), order[0]);
}

TEST_F(EvictTest, LapsedTtlPinDoesNotProtect) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  WritePin(*session, 0, ObjectOffset(order[0], 0), NowMs());  // not > now
  WritePin(*session, 1, ObjectOffset(order[1], 0), NowMs() - 1);
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.pinned, 0u);
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live.count(order[0]), 0u);
  EXPECT_EQ(live.count(order[1]), 0u);
}

TEST_F(EvictTest, PinsOfASessionPastItsLeaseDoNotProtectEvenBeforeExpiry) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("dead client");
  ASSERT_TRUE(session.ok()) << session.status();
  WritePin(*session, 0, ObjectOffset(order[0], 0), format::kPinForever);
  env_.Advance(kSessionLease);  // never renewed; ExpireStale has not run
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.pinned, 0u);
  EXPECT_EQ(LiveSlotsBySlab().count(order[0]), 0u);
}

TEST_F(EvictTest, RegionSlabsAreNeverEvicted) {
  absl::StatusOr<std::vector<uint64_t>> region = slabs_->AllocateRegion(9, 3);
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<uint64_t> kv;
  for (uint64_t i = 0; i < kSlabs - 3; ++i) kv.push_back(FillSlab());
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.evicted, 2u);
  for (uint64_t slab : *region) {
    EXPECT_EQ(slabs_->state(slab), SlabState::kRegion);
    EXPECT_EQ(Evicting(slab), 0u);
  }
  std::map<uint64_t, int> live = LiveSlotsBySlab();
  EXPECT_EQ(live.count(kv[0]), 0u);
  EXPECT_EQ(live.count(kv[1]), 0u);
}

TEST_F(EvictTest, SlabsAFreedRegionLeftAreOnTheirWayToFreeNotCandidates) {
  absl::StatusOr<std::vector<uint64_t>> region = slabs_->AllocateRegion(9, 3);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(slabs_->FreeRegion(9), 3u);
  EvictionView view = slabs_->Eviction();
  EXPECT_TRUE(view.candidates.empty());
  EXPECT_EQ(view.pending, 3u);
  EXPECT_EQ(view.used, 0u);
  for (uint64_t i = 0; i < kSlabs - 3; ++i) FillSlab();
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u) << "7 used of 10";
  EXPECT_EQ(slabs_->Counts().evicted, 0u);
}

TEST_F(EvictTest, APoolOfRegionsOnlyEvictsNothingAndGrantIsResourceExhausted) {
  ASSERT_TRUE(slabs_->AllocateRegion(9, kSlabs).ok());
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u);
  absl::StatusOr<SlabGrant> g = evictor_->Grant("writer");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted)
      << g.status();
  EXPECT_NE(g.status().message().find("10 slabs are held by regions"),
            std::string::npos)
      << g.status();
}

TEST_F(EvictTest, EvictingWordStaysSetUntilTheSlabIsGrantedAgain) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  Touch(order[5]);
  ASSERT_EQ(evictor_->RunOnce().evicted, 2u);
  ASSERT_NE(Evicting(order[0]), 0u);
  ASSERT_EQ(ReclaimAfterGrace(), 2u);
  EXPECT_EQ(slabs_->state(order[0]), SlabState::kFree);
  EXPECT_NE(Evicting(order[0]), 0u) << "FREE: nobody pins into it anyway";
  // Only the two evicted slabs are free: the next grants hand them out.
  memory_[layout_.slab_meta(order[0]) / 8 + 1] = 1;  // a stale touch
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<SlabGrant> g = slabs_->Grant("writer");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(g->slab == order[0] || g->slab == order[1]) << g->slab;
    EXPECT_EQ(Evicting(g->slab), 0u);
    EXPECT_EQ(Touched(g->slab), 0u);
  }
  EXPECT_EQ(Touched(order[5]), 1u) << "other slabs' words are untouched";
}

// The answer Grant gives while a slab is on its way: how long to wait.
absl::Duration RetryAfter(const absl::StatusOr<SlabGrant>& g) {
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? g->retry_after : absl::ZeroDuration();
}

// A tenant at its cap of leased slabs is refused outright: no eviction is
// started for it, and other tenants are granted on.
TEST_F(EvictTest, ATenantAtItsSlabCapIsRefusedAndEvictsNothing) {
  Build(/*enabled=*/true, 0.9, 0.8, /*tenant_cap=*/2);
  std::vector<SlabGrant> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<SlabGrant> g = evictor_->Grant("a", "team-a");
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(g->retry_after, absl::ZeroDuration());
    held.push_back(*g);
  }
  absl::StatusOr<SlabGrant> refused = evictor_->Grant("a", "team-a");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "'team-a' lease 2 of this node's 10"))
      << refused.status();
  EXPECT_EQ(wakes_, 0) << "nothing is evicted for a tenant at its cap";
  EXPECT_TRUE(evictor_->Grant("b", "team-b").ok());
  // A released lease, or one past its end, no longer counts.
  ASSERT_TRUE(slabs_->Release(held[0].slab, held[0].token).ok());
  ASSERT_TRUE(evictor_->Grant("a", "team-a").ok());
  EXPECT_EQ(evictor_->Grant("a", "team-a").status().code(),
            absl::StatusCode::kResourceExhausted);
  env_.Advance(format::kDefaultSlabLease + format::kLeaseMargin);
  EXPECT_TRUE(evictor_->Grant("a", "team-a").ok());
}

TEST_F(EvictTest,
       GrantOnAFullPoolSaysWhenToRetryThenSucceedsAfterEvictionAndGrace) {
  for (uint64_t i = 0; i < kSlabs; ++i) FillSlab();
  // Evict next pass (200 ms), seen unreferenced, a grace (1 s), the pass
  // after that frees it: 2 x 200 ms + 1000 ms.
  EXPECT_EQ(RetryAfter(evictor_->Grant("writer")), absl::Milliseconds(1400));
  EXPECT_EQ(wakes_, 1) << "a full pool wakes the loop at once";
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.evicted, 2u);
  // Evicted, not yet reclaimed: still no slab, with a shorter hint once a
  // pass has seen them unreferenced.
  EXPECT_EQ(RetryAfter(evictor_->Grant("writer")), absl::Milliseconds(1400));
  slabs_->Reclaim();
  env_.Advance(
      absl::Milliseconds(500));  // half the grace: 500 ms + a pass left
  EXPECT_EQ(RetryAfter(evictor_->Grant("writer")), absl::Milliseconds(700));
  env_.Advance(slabs_->grace());
  slabs_->Reclaim();
  absl::StatusOr<SlabGrant> g = evictor_->Grant("writer");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->retry_after, absl::ZeroDuration());
  EXPECT_EQ(g->length, layout_.slab_bytes);
}

TEST_F(EvictTest, FullPoolWithOnlyLeasedSlabsRetriesAfterTheLeasesEnd) {
  for (uint64_t i = 0; i < kSlabs; ++i) ASSERT_TRUE(slabs_->Grant("w").ok());
  env_.Advance(absl::Seconds(1));
  // Lease 10 s + margin 6 s from the grants, then evicted, seen, a grace.
  EXPECT_EQ(RetryAfter(evictor_->Grant("writer")),
            absl::Seconds(15) + absl::Milliseconds(1400));
}

TEST_F(EvictTest, GrantIsResourceExhaustedWhenEverySlabHoldsALivePin) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  for (uint64_t i = 0; i < kSlabs; ++i) {
    WritePin(*session, i, ObjectOffset(order[i], 0),
             i % 2 == 0 ? format::kPinForever : NowMs() + 60'000);
  }
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.evicted, 0u);
  EXPECT_EQ(round.pinned, kSlabs);
  absl::StatusOr<SlabGrant> g = evictor_->Grant("writer");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted)
      << g.status();
  EXPECT_NE(g.status().message().find("10 sealed slabs hold pinned objects"),
            std::string::npos)
      << g.status();
  // Unpinning one slab makes room again.
  WritePin(*session, 3, 0, 0);
  EXPECT_GT(RetryAfter(evictor_->Grant("writer")), absl::ZeroDuration());
}

TEST_F(EvictTest,
       FailedClearingLeavesTheSlabACandidateAndTheNextRoundFinishes) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  clearer_->fail_next = 1;
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(round.evicted, 0u);
  EXPECT_EQ(slabs_->Counts().evicted, 0u);
  EXPECT_NE(Evicting(order[0]), 0u) << "pins on it keep failing meanwhile";
  EXPECT_EQ(slabs_->Eviction().candidates.front(), order[0]);
  round = evictor_->RunOnce();
  EXPECT_TRUE(round.status.ok()) << round.status;
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(LiveSlotsBySlab().count(order[0]), 0u);
}

TEST_F(EvictTest, SlabPinnedAfterAFailedRoundGetsItsEvictingWordCleared) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  clearer_->fail_next = 1;
  ASSERT_FALSE(evictor_->RunOnce().status.ok());
  ASSERT_NE(Evicting(order[0]), 0u);
  absl::StatusOr<SessionGrant> session = pins_->Open("reader");
  ASSERT_TRUE(session.ok()) << session.status();
  WritePin(*session, 0, ObjectOffset(order[0], 0), format::kPinForever);
  EvictRound round = evictor_->RunOnce();
  EXPECT_TRUE(round.status.ok()) << round.status;
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(Evicting(order[0]), 0u) << "pins into it may hold again";
  EXPECT_EQ(LiveSlotsBySlab()[order[0]], kObjectsPerSlab);
}

TEST_F(EvictTest, SlotReplacedByAnotherObjectOfTheSameSlabIsClearedToo) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kSlabs; ++i) order.push_back(FillSlab());
  // A slot rewritten between the scan and the CAS: the CAS fails, sees a
  // word into the same slab and tries again with it.
  const uint64_t slot = slot_slab_.begin()->first;
  ASSERT_EQ(slot_slab_.at(slot), order[0]);
  const uint64_t other =
      format::EncodeSlot(9, 128, ObjectOffset(order[0], 2) + 64);
  bool swapped = false;
  class SwappingClearer : public SlotClearer {
   public:
    SwappingClearer(MemoryClearer* inner, uint64_t* word, uint64_t other,
                    bool* swapped)
        : inner_(inner), word_(word), other_(other), swapped_(swapped) {}
    absl::Status Clear(absl::Span<const SlotClear> slots,
                       absl::Span<uint64_t> old) override {
      if (!*swapped_) {
        *word_ = other_;
        *swapped_ = true;
      }
      return inner_->Clear(slots, old);
    }
    MemoryClearer* inner_;
    uint64_t* word_;
    uint64_t other_;
    bool* swapped_;
  };
  MemoryClearer inner(pool());
  EvictorOptions options;
  options.env = &env_;
  auto evictor = Evictor::Create(
      options, slabs_.get(), pins_.get(),
      std::make_unique<SwappingClearer>(
          &inner, &memory_[layout_.index_offset / 8 + slot], other, &swapped),
      pool());
  ASSERT_TRUE(evictor.ok()) << evictor.status();
  EvictRound round = (*evictor)->RunOnce();
  EXPECT_EQ(round.evicted, 2u);
  EXPECT_EQ(Word(slot), 0u);
  EXPECT_EQ(inner.calls, 2) << "one batch, then the changed slot again";
}

TEST_F(EvictTest, DisabledEvictorNeverEvictsAndAFullPoolIsResourceExhausted) {
  Build(/*enabled=*/false);
  for (uint64_t i = 0; i < kSlabs; ++i) FillSlab();
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u);
  absl::StatusOr<SlabGrant> g = evictor_->Grant("writer");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(clearer_->calls, 0);
  EXPECT_EQ(wakes_, 0);
}

TEST_F(EvictTest, WatermarksOutsideZeroLowHighOneAreInvalidArgument) {
  for (auto [high, low] :
       {std::pair{0.9, 0.9}, std::pair{0.8, 0.9}, std::pair{1.1, 0.5},
        std::pair{0.5, 0.0}, std::pair{0.5, -0.1}}) {
    absl::Status s = CheckWatermarks(high, low);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << high << " " << low;
    EXPECT_NE(s.message().find("evict_low_watermark"), std::string::npos);
  }
  EXPECT_TRUE(CheckWatermarks(1.0, 0.5).ok());
  EvictorOptions options;
  options.high_watermark = 0.5;
  options.low_watermark = 0.7;
  EXPECT_EQ(Evictor::Create(options, slabs_.get(), pins_.get(),
                            std::make_unique<MemoryClearer>(pool()), pool())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EvictTest, HighWatermarkOfOneStillEvictsWhenAWriterFindsNoSlab) {
  Build(/*enabled=*/true, /*high=*/1.0, /*low=*/0.5);
  for (uint64_t i = 0; i < kSlabs; ++i) FillSlab();
  EXPECT_EQ(evictor_->RunOnce().evicted, 0u) << "10 of 10 is not above 1.0";
  EXPECT_GT(RetryAfter(evictor_->Grant("writer")), absl::ZeroDuration());
  EvictRound round = evictor_->RunOnce();
  EXPECT_EQ(round.evicted, 5u);  // down to the low watermark
}

TEST(LoopbackAddress, WildcardHostsBecomeLoopback) {
  EXPECT_EQ(LoopbackAddress("tcp://0.0.0.0:4000"), "tcp://127.0.0.1:4000");
  EXPECT_EQ(LoopbackAddress("tcp://[::]:4000"), "tcp://[::1]:4000");
  EXPECT_EQ(LoopbackAddress("tcp://10.1.2.3:4000"), "tcp://10.1.2.3:4000");
  EXPECT_EQ(LoopbackAddress("sim://node"), "sim://node");
  EXPECT_EQ(LoopbackAddress("verbs://host-a"), "verbs://host-a");
}

}  // namespace
}  // namespace meshpool::store
