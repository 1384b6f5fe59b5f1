// meshpool/store/slab_manager.h: who may write where in a node's slab area,
// and when memory of dead objects is reused.
//
// Clients allocate without an RPC per PUT: the node leases them whole slabs
// and they carve objects out of them. A slab goes
//
//   FREE --Grant--> GRANTED(client, lease end) --lease over / Release-->
//   SEALED --Reclaim, twice unreferenced, grace apart--> FREE
//
// and, for regions (named memory the coordinator places; hard-pinned),
//
//   FREE --AllocateRegion (zero-filled)--> REGION(id) --FreeRegion--> SEALED
//
// Zero-filling costs only slabs that may hold bytes: the pool starts zeroed
// (a fresh anonymous mapping), and a slab counts as possibly written from
// the first time it is granted or given to a region on. A slab that never
// was is handed to a region as it is (SlabCounts::zeroed_bytes counts what
// was cleared).
//
// and only reclamation makes a slab FREE again. A REGION slab is never
// granted, never sealed by a lease and never reclaimed; once its region is
// freed it is an ordinary SEALED slab that no index slot points into, so it
// becomes FREE after the grace like any other (a region reader in flight
// finishes within max_read_lease). A slab holds objects whose
// index slots may still point at it, so a SEALED slab is freed only when no
// index slot references it at two reclamation passes at least `grace` apart;
// a reader that fetched a slot before it changed finishes within
// max_read_lease, so it never sees the slab's bytes reused.
//
// Time relations: format/protocol.h (kLeaseMargin, kReclaimMargin); this
// type enforces them.
//
// Eviction (the KV cache under memory pressure; store/evictor.h drives it)
// happens to SEALED slabs that a grant filled, in the order they were
// sealed (a segment FIFO; a second chance or a pin moves a slab to the
// tail):
//
//   SEALED --BeginEviction--> SEALED(evicting) --FinishEviction-->
//   SEALED(evicted) --Reclaim, as above--> FREE --Grant--> ...
//
// BeginEviction sets the slab's SlabMeta.evicting word in the pool (clients
// read it when they pin); only Grant clears it again (and the touched word),
// just before the slab is handed out, or Requeue(clear_evicting) when the
// evictor found a live pin. A slab being evicted is never freed by Reclaim
// until the eviction ends. REGION slabs, and slabs a freed region left SEALED,
// are never eviction candidates.
//
// Thread-safety: SlabManager is thread-safe. Reclaim() passes are serialised.
#ifndef MESHPOOL_STORE_SLAB_MANAGER_H_
#define MESHPOOL_STORE_SLAB_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "format/layout.h"
#include "format/protocol.h"

namespace meshpool::store {

enum class SlabState { kFree, kGranted, kSealed, kRegion };
absl::string_view SlabStateName(SlabState state);

struct SlabManagerOptions {
  format::PoolLayout layout;
  absl::Duration lease = format::kDefaultSlabLease;  // told to clients
  absl::Duration max_read_lease = format::kDefaultMaxReadLease;
  Env* env = nullptr;  // clock (not owned; outlives this); null: Env::Default()
  // At most this many slabs leased at once per tenant key (Grant's
  // `tenant`); 0: no cap. Keeps one tenant from leasing every free slab.
  uint64_t max_granted_per_tenant = 0;
};

// A lease handed to a client.
struct SlabGrant {
  uint64_t slab = 0;
  uint64_t offset = 0;  // pool offset of the slab's first byte
  uint64_t length = 0;
  absl::Duration lease;  // the client writes into the slab only this long
  // Random and nonzero: names this grant in Release, so that only the
  // client it went to can seal the slab early (client ids are not secret).
  uint64_t token = 0;
  // Evictor::Grant only: nonzero when no slab was granted (the fields above
  // are unset) because one is on its way to FREE: ask again after this.
  absl::Duration retry_after = absl::ZeroDuration();
};

struct SlabCounts {
  uint64_t total = 0;
  uint64_t free = 0;
  uint64_t granted = 0;
  uint64_t sealed = 0;
  uint64_t region = 0;          // held by regions
  uint64_t reclaimed = 0;       // made FREE again since Create
  uint64_t grants = 0;          // leases granted since Create
  uint64_t grant_requests = 0;  // Grant calls since Create, granted or not
  uint64_t objects = 0;         // occupied index slots at the last pass
  uint64_t index_slots = 0;
  uint64_t used_bytes = 0;       // bytes of slabs that are not FREE
  uint64_t regions_freed = 0;    // FreeRegion calls that sealed slabs
  uint64_t zeroed_bytes = 0;     // bytes AllocateRegion zero-filled
  uint64_t evicted = 0;          // slabs evicted since Create
  uint64_t objects_evicted = 0;  // index slots cleared by evictions
};

// What the evictor needs to know, as of one moment.
struct EvictionView {
  uint64_t total = 0;
  uint64_t free = 0;
  uint64_t granted = 0;
  uint64_t region = 0;
  // SEALED slabs on their way to FREE: evicted, unreferenced and waiting out
  // the grace, left by a freed region, or being evicted right now.
  uint64_t pending = 0;
  // Of those, the ones no reclamation pass has yet seen unreferenced.
  uint64_t pending_unscanned = 0;
  // What the watermarks compare: total - free - pending.
  uint64_t used = 0;
  // SEALED slabs a grant filled that are not pending, oldest seal first.
  std::vector<uint64_t> candidates;
  // Earliest time a reclamation pass may free a pending slab seen
  // unreferenced (InfiniteFuture: none).
  absl::Time next_free = absl::InfiniteFuture();
  // Earliest node-side lease end of a GRANTED slab (InfiniteFuture: none).
  absl::Time next_lease_end = absl::InfiniteFuture();
};

// What one Reclaim() pass did.
struct ReclaimPass {
  uint64_t occupied_slots = 0;
  uint64_t candidates = 0;  // SEALED, unreferenced, waiting out the grace
  uint64_t freed = 0;
};

class SlabManager {
 public:
  // `pool` is the pool's first byte; the index lives at layout.index_offset.
  // REQUIRES: pool is 8-byte aligned, covers layout.pool_bytes and outlives
  // the manager. Errors: InvalidArgument (null pool, layout without slabs
  // or slab table, lease or max_read_lease not in (0, kMaxLease]).
  static absl::StatusOr<std::unique_ptr<SlabManager>> Create(
      SlabManagerOptions options, void* pool);

  // Leases a FREE slab to `client_id`, charged to `tenant` (a key the
  // caller's identity gives, store/node_service.h), its SlabMeta words
  // (evicting, touched) zeroed first, under a fresh token
  // (SlabGrant::token) that Release must present. Errors: InvalidArgument
  // (empty client_id), ResourceExhausted (`tenant` holds
  // max_granted_per_tenant unexpired leases, as CheckTenantCap; or no slab
  // is FREE, which the evictor turns into its own answer, see
  // store/evictor.h).
  absl::StatusOr<SlabGrant> Grant(absl::string_view client_id,
                                  absl::string_view tenant = "");
  // ResourceExhausted, naming the tenant and the cap, when `tenant` holds
  // max_granted_per_tenant unexpired leases; OK otherwise.
  absl::Status CheckTenantCap(absl::string_view tenant) const;

  // Seals `slab` early: the client that holds grant `token` will write no
  // more into it. OK too when the slab is already sealed or free (the lease
  // is over either way). Errors: InvalidArgument (no such slab),
  // PermissionDenied (the slab is leased under another token: only the
  // client it was granted to may release it).
  absl::Status Release(uint64_t slab, uint64_t token);

  // Sets `slabs` FREE slabs aside for region `region_id`, all or nothing,
  // zero-fills those that may have been written since the pool was mapped
  // (no client knows their address yet; the lock is not held meanwhile;
  // never-written slabs are zero already) and returns their slab numbers in
  // order; each slab's SlabMeta.region word holds `region_id` once it
  // returns. Errors: InvalidArgument (slabs == 0), FailedPrecondition (the
  // region already has slabs here), ResourceExhausted (fewer FREE slabs; the
  // message says how many are), Aborted (FreeRegion of this id came while
  // zeroing: the slabs are sealed again). REQUIRES: region_id != 0 and never
  // used before (the coordinator's ids are not reused).
  absl::StatusOr<std::vector<uint64_t>> AllocateRegion(uint64_t region_id,
                                                       uint64_t slabs);

  // Seals the region's slabs: reclamation frees them after the grace. Their
  // SlabMeta.region words are all cleared before the first is sealed. While
  // AllocateRegion is still zeroing them, they are sealed when it is done.
  // Returns how many slabs the region held; 0 for a region unknown here.
  uint64_t FreeRegion(uint64_t region_id);

  // The regions holding slabs here (allocated or being zeroed; not freed),
  // in increasing id order.
  std::vector<uint64_t> RegionIds() const;

  // One reclamation pass: seals expired leases, scans every index slot and
  // frees SEALED slabs unreferenced at two passes >= grace() apart. The node
  // runs it every reclaim interval; tests call it directly.
  ReclaimPass Reclaim();

  // ---- Eviction (called by the evictor; see the file comment) ----

  EvictionView Eviction() const;
  // Starts evicting `slab`: stores a nonzero SlabMeta.evicting word
  // (seq_cst). False, with nothing changed, when the slab is no longer a
  // candidate (freed, regranted or already being evicted).
  bool BeginEviction(uint64_t slab);
  // Moves a candidate, or a slab being evicted, to the FIFO's tail: a second
  // chance, or a slab found pinned. With `clear_evicting`, stores 0 into its
  // evicting word (set by BeginEviction, or left by AbortEviction). Only
  // the evictor calls it, so no other eviction of the slab is under way.
  void Requeue(uint64_t slab, bool clear_evicting);
  // The slab's objects are unlinked (`objects` slots cleared): it stays
  // SEALED, marked evicted, until reclamation frees it.
  void FinishEviction(uint64_t slab, uint64_t objects);
  // The eviction could not finish (the slot clearing failed): the slab is a
  // candidate again, at the FIFO's head; its evicting word stays set (pins
  // on it keep failing, which is safe) until it is evicted or found pinned.
  void AbortEviction(uint64_t slab);
  // Whether a client touched the slab since the last call, clearing the
  // touched word.
  bool TakeTouched(uint64_t slab);

  // OK when [offset, offset + length) is non-empty and lies inside one slab
  // that a region holds (and has finished zero-filling): the only memory a
  // node digests. Errors: InvalidArgument naming the range otherwise
  // (outside the pool or the slab area, across a slab boundary, a slab that
  // is FREE, GRANTED, SEALED or still being zero-filled).
  absl::Status CheckRegionRange(uint64_t offset, uint64_t length) const;

  // Counts and states as of now; a lease past its end shows as GRANTED
  // until the next Reclaim pass seals it.
  SlabCounts Counts() const;
  // REQUIRES: slab < layout().slab_count.
  SlabState state(uint64_t slab) const;

  const format::PoolLayout& layout() const { return options_.layout; }
  absl::Duration lease() const { return options_.lease; }
  absl::Duration grace() const {
    return options_.max_read_lease + format::kReclaimMargin;
  }

 private:
  struct Slab {
    SlabState state = SlabState::kFree;
    uint64_t grant_token = 0;  // kGranted only
    std::string tenant;        // kGranted only: whom the lease counts against
    uint64_t region_id = 0;  // kRegion only
    absl::Time lease_end;    // node side, with margin
    absl::Time unreferenced_since = absl::InfiniteFuture();  // candidacy
    // Sealed after a grant (holds objects): an eviction candidate.
    bool kv = false;
    uint64_t fifo_seq = 0;  // eviction order: lower goes first
    bool evicting = false;  // BeginEviction .. Finish/Abort/Requeue
    bool evicted = false;   // FinishEviction .. FREE
    // May hold nonzero bytes: set when the slab is granted or given to a
    // region, and never cleared (zero-filling happens only on the way into
    // a region, which sets it again). False: untouched since the pool was
    // mapped, hence zero.
    bool written = false;
  };

  friend class SlabManagerTestPeer;
  SlabManager(SlabManagerOptions options, char* pool);
  // AllocateRegion's two halves: takes the slabs (REGION, zeroing) under
  // the lock, then clears them without it and finishes (or seals them, if
  // FreeRegion came meanwhile: Aborted).
  absl::StatusOr<std::vector<uint64_t>> ReserveRegion(uint64_t region_id,
                                                      uint64_t slabs);
  absl::Status ZeroRegion(uint64_t region_id,
                          const std::vector<uint64_t>& taken);
  absl::Time Now() const;
  void SealExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckTenantCapLocked(absl::string_view tenant,
                                    absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Seals; `kv`: after a grant (the slab joins the eviction FIFO's tail).
  void SealLocked(Slab& slab, bool kv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PendingLocked(const Slab& slab) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slab's SlabMeta words in the pool.
  std::atomic_ref<uint64_t> EvictingWord(uint64_t slab) const;
  std::atomic_ref<uint64_t> TouchedWord(uint64_t slab) const;
  std::atomic_ref<uint64_t> RegionWord(uint64_t slab) const;
  // Counts index references per slab; returns the occupied slot count.
  uint64_t ScanIndex(std::vector<uint32_t>& refs) const;

  const SlabManagerOptions options_;
  char* const pool_;
  uint64_t* const index_;  // bucket_count * kSlotsPerBucket words
  uint64_t* const meta_;   // slab_count SlabMeta, as kMetaWords words each

  absl::Mutex reclaim_mu_;  // serialises Reclaim passes; taken before mu_
  mutable absl::Mutex mu_;
  std::vector<Slab> slabs_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> free_ ABSL_GUARDED_BY(mu_);  // FIFO of FREE slabs
  uint64_t reclaimed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t grants_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t grant_requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t objects_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t regions_freed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t zeroed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_fifo_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::BitGen tokens_ ABSL_GUARDED_BY(mu_);
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t objects_evicted_ ABSL_GUARDED_BY(mu_) = 0;
  struct RegionSlabs {
    std::vector<uint64_t> slabs;  // in the order AllocateRegion returns them
    bool zeroing = true;          // AllocateRegion is still clearing them
    bool freed = false;           // FreeRegion came while zeroing
  };
  std::map<uint64_t, RegionSlabs> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_SLAB_MANAGER_H_
