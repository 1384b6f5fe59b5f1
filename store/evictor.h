// meshpool/store/evictor.h: eviction of KV objects under memory pressure, at
// slab granularity, and GrantSlab's answer when no slab is free.
//
// Policy: "used" = slabs not FREE, minus SEALED slabs already on their way
// to FREE (evicted, unreferenced and waiting out the grace, left by a freed
// region). When used > high x slabs (or a GrantSlab found no FREE slab and
// nothing is on its way), a round evicts SEALED slabs in seal order (a
// segment FIFO), until used <= low x slabs. Under a steady stream of
// writes the watermarks move down with the write rate: an evicted slab is
// FREE only a grace (plus two passes) later, so the free and pending slabs
// must cover what writers take in that time, or every writer would stall
// for a grace per (high - low) of the pool. The evictor measures slab
// grants per second (smoothed) and lowers both watermarks by the slabs
// granted in one such window, never below kMinLowWatermark. A slab whose
// SlabMeta.touched
// word is set gets a second chance (the word is cleared, the slab goes to
// the FIFO's tail); a slab holding a live pin stays (to the tail). Regions
// are never candidates.
//
// Evicting a batch of slabs, in this order (the client's pin protocol
// depends on it, see docs/ARCHITECTURE.md):
//   1. store SlabMeta.evicting = nonzero for each (SlabManager::BeginEviction);
//   2. a seq_cst fence, then read every live session's pin table once
//      (PinTables::PinnedSlabs): a pinned slab gets evicting = 0 and stays
//      (slabs already pinned at the start of the round are passed over
//      before step 1, so their words are not set for nothing);
//   3. scan the index once and clear every slot pointing into the others by
//      CAS(slot, word seen, 0) through the SlotClearer, in batches of
//      rdma::kMaxBatch (a slot that changed to another word in the same
//      slabs is tried again);
//   4. mark them evicted: they stay SEALED, and reclamation frees them once
//      unreferenced for the grace, so GETs in flight finish on the old bytes.
//
// Thread-safety: RunOnce is called by one thread (the node's background
// loop); Grant, Shutdown and counts may be called from any thread.
#ifndef MESHPOOL_STORE_EVICTOR_H_
#define MESHPOOL_STORE_EVICTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "store/pin_tables.h"
#include "store/slab_manager.h"
#include "store/slot_clearer.h"

namespace meshpool::store {

inline constexpr double kDefaultEvictHighWatermark = 0.90;
inline constexpr double kDefaultEvictLowWatermark = 0.80;
// However fast the writes, eviction keeps at least this much of the pool.
inline constexpr double kMinLowWatermark = 0.5;
// Weight of the newest measurement in the smoothed grant rate.
inline constexpr double kGrantRateSmoothing = 0.3;
static_assert(kMinLowWatermark > 0 &&
              kMinLowWatermark <= kDefaultEvictLowWatermark);
static_assert(kGrantRateSmoothing > 0 && kGrantRateSmoothing <= 1);
// CAS rounds per slot before an eviction gives up on a slot that keeps
// changing (it cannot: nothing publishes into a sealed slab).
inline constexpr int kMaxClearRounds = 8;
static_assert(kDefaultEvictLowWatermark < kDefaultEvictHighWatermark);

struct EvictorOptions {
  bool enabled = true;
  double high_watermark = kDefaultEvictHighWatermark;
  double low_watermark = kDefaultEvictLowWatermark;
  // How often the node's loop runs while busy (for GrantSlab's retry hint).
  absl::Duration reclaim_interval = absl::Milliseconds(200);
  Env* env = nullptr;  // clock (not owned; outlives this); null: Env::Default()
};

// InvalidArgument unless 0 < low < high <= 1 (named as NodeOptions fields).
absl::Status CheckWatermarks(double high, double low);

// What one RunOnce did.
struct EvictRound {
  uint64_t needed = 0;  // slabs it set out to evict
  uint64_t evicted = 0;
  uint64_t objects = 0;         // slots cleared
  uint64_t pinned = 0;          // slabs kept for a live pin
  uint64_t second_chances = 0;  // touched slabs sent to the tail
  absl::Status status;          // the slot clearing's error, if any
};

class Evictor {
 public:
  // All pointers must outlive the Evictor (the clearer is owned until
  // Shutdown). `pool` is the pool `slabs` and `pins` describe.
  // Errors: InvalidArgument (bad watermarks, missing parts when enabled).
  static absl::StatusOr<std::unique_ptr<Evictor>> Create(
      EvictorOptions options, SlabManager* slabs, PinTables* pins,
      std::unique_ptr<SlotClearer> clearer, const char* pool);

  // One round: evicts if the watermark (or an urgent Grant) asks for it.
  // A no-op when disabled or after Shutdown.
  EvictRound RunOnce();

  // GrantSlab: SlabManager::Grant, and when no slab is FREE (with eviction
  // on) wakes the loop to evict at once and answers a SlabGrant with only
  // retry_after set (an estimate of when a slab is FREE) while something is
  // on its way to FREE, can be evicted or is leased to a writer (it seals
  // at lease end), or ResourceExhausted naming why nothing ever will (every
  // slab is held by a region or pinned). With eviction off, SlabManager's
  // ResourceExhausted. A tenant at its cap (SlabManager::CheckTenantCap)
  // gets that ResourceExhausted and evicts nothing.
  absl::StatusOr<SlabGrant> Grant(absl::string_view client_id,
                                  absl::string_view tenant = "");

  // Called (from Grant's thread) when a round should run now.
  void set_wake(std::function<void()> wake);

  // Drops the clearer (its endpoint and registration) before the transport
  // goes; RunOnce does nothing afterwards.
  void Shutdown();

  bool enabled() const { return options_.enabled; }

 private:
  Evictor(EvictorOptions options, SlabManager* slabs, PinTables* pins,
          std::unique_ptr<SlotClearer> clearer, const char* pool);
  // How many slabs a round should evict now.
  uint64_t Needed(const EvictionView& view, bool urgent) const;
  // Updates the smoothed grant rate; returns the slabs writers take in
  // the time an evicted slab needs to come FREE.
  double SlabsPerRefill();
  // Picks up to `want` slabs from `queue` (skipping slabs `pinned` names,
  // second chance on the way) and begins their eviction.
  std::vector<uint64_t> Select(std::vector<uint64_t>& queue, size_t& next,
                               uint64_t want, const std::vector<bool>& pinned,
                               std::vector<bool>& chanced, EvictRound& round);
  // Calls fn(pool offset of the slot, word) for every occupied index slot.
  void ForEachSlot(
      const std::function<void(uint64_t slot_offset, uint64_t word)>& fn) const;
  // Pool offsets of the objects index slots point at, within `slabs`.
  absl::flat_hash_set<uint64_t> ReferencedObjects(
      const std::vector<uint64_t>& slabs) const;
  // Steps 3-4 for `slabs` (already begun, unpinned).
  absl::Status Unlink(const std::vector<uint64_t>& slabs, EvictRound& round);
  // How long until a slab is likely FREE, for the retry hint.
  absl::Duration RetryHint(const EvictionView& view, bool evictable) const;

  const EvictorOptions options_;
  SlabManager* const slabs_;
  PinTables* const pins_;
  const char* const pool_;
  std::atomic<bool> urgent_{false};
  std::atomic<uint64_t> grant_calls_{0};  // Grant calls, granted or not

  // The grant rate, touched only by RunOnce (one thread).
  uint64_t rate_calls_ = 0;
  absl::Time rate_since_ = absl::InfinitePast();
  double grants_per_second_ = 0;
  double refill_slabs_ = 0;  // SlabsPerRefill's last answer

  absl::Mutex mu_;  // held for a whole round, and by Shutdown
  std::unique_ptr<SlotClearer> clearer_ ABSL_GUARDED_BY(mu_);
  absl::Mutex wake_mu_;  // never held across anything slow
  std::function<void()> wake_ ABSL_GUARDED_BY(wake_mu_);
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_EVICTOR_H_
