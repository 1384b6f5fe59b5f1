#include "store/slab_manager.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::store {
namespace {

// 8-byte words per SlabMeta entry.
constexpr size_t kMetaWords = format::kSlabMetaBytes / 8;

absl::Status CheckLease(absl::string_view what, absl::Duration d) {
  if (d <= absl::ZeroDuration() || d > format::kMaxLease) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", absl::FormatDuration(d), "; give a duration in (0, ",
        absl::FormatDuration(format::kMaxLease), "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view SlabStateName(SlabState state) {
  switch (state) {
    case SlabState::kFree:
      return "FREE";
    case SlabState::kGranted:
      return "GRANTED";
    case SlabState::kSealed:
      return "SEALED";
    case SlabState::kRegion:
      return "REGION";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<SlabManager>> SlabManager::Create(
    SlabManagerOptions options, void* pool) {
  if (pool == nullptr || reinterpret_cast<uintptr_t>(pool) % 8 != 0) {
    return absl::InvalidArgumentError("pool must be non-null and 8-aligned");
  }
  const format::PoolLayout& l = options.layout;
  if (l.slab_count == 0 || l.slab_bytes == 0 || l.bucket_count == 0 ||
      l.slab_offset(l.slab_count) > l.pool_bytes ||
      l.slab_meta_offset < format::kSuperblockBytes ||
      l.slab_meta_offset % 8 != 0 || l.slab_meta(l.slab_count) > l.pool_bytes) {
    return absl::InvalidArgumentError(
        "layout has no slabs or slab table, or overruns the pool; build it "
        "with ComputeLayout");
  }
  MESHPOOL_RETURN_IF_ERROR(CheckLease("slab lease", options.lease));
  MESHPOOL_RETURN_IF_ERROR(
      CheckLease("max read lease", options.max_read_lease));
  options.env = EnvOrDefault(options.env);
  return std::unique_ptr<SlabManager>(
      new SlabManager(std::move(options), static_cast<char*>(pool)));
}

SlabManager::SlabManager(SlabManagerOptions options, char* pool)
    : options_(std::move(options)),
      pool_(pool),
      index_(reinterpret_cast<uint64_t*>(pool + options_.layout.index_offset)),
      meta_(reinterpret_cast<uint64_t*>(pool +
                                        options_.layout.slab_meta_offset)) {
  slabs_.resize(options_.layout.slab_count);
  for (uint64_t s = 0; s < options_.layout.slab_count; ++s) free_.push_back(s);
}

absl::Time SlabManager::Now() const { return options_.env->Now(); }

std::atomic_ref<uint64_t> SlabManager::EvictingWord(uint64_t slab) const {
  static_assert(offsetof(format::SlabMeta, evicting) == 0);
  return std::atomic_ref<uint64_t>(meta_[kMetaWords * slab]);
}

std::atomic_ref<uint64_t> SlabManager::TouchedWord(uint64_t slab) const {
  static_assert(offsetof(format::SlabMeta, touched) == 8);
  return std::atomic_ref<uint64_t>(meta_[kMetaWords * slab + 1]);
}

std::atomic_ref<uint64_t> SlabManager::RegionWord(uint64_t slab) const {
  static_assert(offsetof(format::SlabMeta, region) == 16);
  return std::atomic_ref<uint64_t>(meta_[kMetaWords * slab + 2]);
}

absl::Status SlabManager::CheckTenantCap(absl::string_view tenant) const {
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  return CheckTenantCapLocked(tenant, now);
}

absl::Status SlabManager::CheckTenantCapLocked(absl::string_view tenant,
                                               absl::Time now) const {
  const uint64_t cap = options_.max_granted_per_tenant;
  if (cap == 0) return absl::OkStatus();
  // O(slabs), only with a cap. A lease past its end writes no more.
  uint64_t held = 0;
  for (const Slab& s : slabs_) {
    held += s.state == SlabState::kGranted && now < s.lease_end &&
            s.tenant == tenant;
  }
  if (held < cap) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      tenant.empty() ? std::string("callers without a tenant")
                     : absl::StrCat("'", tenant, "'"),
      " lease ", held, " of this node's ", slabs_.size(),
      " slabs for writing, the most one tenant may (--tenant-slabs); retry "
      "once their writers fill or release them"));
}

absl::StatusOr<SlabGrant> SlabManager::Grant(absl::string_view client_id,
                                             absl::string_view tenant) {
  if (client_id.empty()) {
    return absl::InvalidArgumentError("GrantSlab needs a client_id");
  }
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  ++grant_requests_;
  MESHPOOL_RETURN_IF_ERROR(CheckTenantCapLocked(tenant, now));
  // Expired leases are sealed by Reclaim, not here: Grant stays O(1), and a
  // sealed slab cannot be granted before reclamation frees it anyway.
  if (free_.empty()) {
    uint64_t granted = 0;
    uint64_t region = 0;
    for (const Slab& s : slabs_) {
      granted += s.state == SlabState::kGranted;
      region += s.state == SlabState::kRegion;
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "pool full: all ", slabs_.size(), " slabs are in use (", granted,
        " leased to writers, ", slabs_.size() - granted - region,
        " sealed, holding objects, ", region,
        " held by regions); delete keys or regions, or add capacity"));
  }
  uint64_t id = free_.front();
  free_.pop_front();
  Slab& slab = slabs_[id];
  // Pins on the slab's new objects must hold: clear what an eviction of its
  // previous contents left (clients only read these words of a FREE slab).
  EvictingWord(id).store(0, std::memory_order_seq_cst);
  TouchedWord(id).store(0, std::memory_order_seq_cst);
  slab.state = SlabState::kGranted;
  slab.tenant = std::string(tenant);
  slab.written = true;
  ++grants_;
  do {
    slab.grant_token = absl::Uniform<uint64_t>(tokens_);
  } while (slab.grant_token == 0);
  slab.lease_end = now + options_.lease + format::kLeaseMargin;
  slab.unreferenced_since = absl::InfiniteFuture();
  SlabGrant grant{id, options_.layout.slab_offset(id),
                  options_.layout.slab_bytes, options_.lease};
  grant.token = slab.grant_token;
  return grant;
}

absl::Status SlabManager::Release(uint64_t slab, uint64_t token) {
  if (slab >= options_.layout.slab_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no slab ", slab, "; this node has ", options_.layout.slab_count));
  }
  absl::MutexLock lock(&mu_);
  Slab& s = slabs_[slab];
  if (s.state != SlabState::kGranted) return absl::OkStatus();
  if (s.grant_token != token) {
    return absl::PermissionDeniedError(absl::StrCat(
        "slab ", slab,
        " is not leased under this token; release only slabs you were "
        "granted, with the token their GrantSlab returned"));
  }
  SealLocked(s, /*kv=*/true);
  return absl::OkStatus();
}

void SlabManager::SealLocked(Slab& slab, bool kv) {
  slab.state = SlabState::kSealed;
  slab.grant_token = 0;
  slab.region_id = 0;
  slab.unreferenced_since = absl::InfiniteFuture();
  slab.kv = kv;
  slab.fifo_seq = next_fifo_seq_++;
  slab.evicting = false;
  slab.evicted = false;
}

absl::StatusOr<std::vector<uint64_t>> SlabManager::AllocateRegion(
    uint64_t region_id, uint64_t slabs) {
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<uint64_t> taken,
                            ReserveRegion(region_id, slabs));
  MESHPOOL_RETURN_IF_ERROR(ZeroRegion(region_id, taken));
  return taken;
}

absl::StatusOr<std::vector<uint64_t>> SlabManager::ReserveRegion(
    uint64_t region_id, uint64_t slabs) {
  if (slabs == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region ", region_id, " asks for 0 slabs; ask for 1 or more"));
  }
  std::vector<uint64_t> taken;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = regions_.find(region_id); it != regions_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "region ", region_id, " already has ", it->second.slabs.size(),
          " slabs on this node; free it before allocating again"));
    }
    if (slabs > free_.size()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "region ", region_id, " needs ", slabs, " free slabs of ",
          FormatSize(options_.layout.slab_bytes), " and this node has ",
          free_.size(), " of ", slabs_.size(),
          " free; delete keys or regions, or add capacity"));
    }
    taken.assign(free_.begin(), free_.begin() + slabs);
    free_.erase(free_.begin(), free_.begin() + slabs);
    for (uint64_t id : taken) {
      Slab& s = slabs_[id];
      s.state = SlabState::kRegion;
      s.region_id = region_id;
      s.grant_token = 0;
      s.unreferenced_since = absl::InfiniteFuture();
    }
    regions_[region_id].slabs = taken;
  }
  return taken;
}

absl::Status SlabManager::ZeroRegion(uint64_t region_id,
                                     const std::vector<uint64_t>& taken) {
  // Only slabs that may have been written need clearing; all of them count
  // as written from now on (the region's owner writes them).
  std::vector<uint64_t> dirty;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : taken) {
      if (slabs_[id].written) dirty.push_back(id);
      slabs_[id].written = true;
    }
    zeroed_bytes_ += dirty.size() * options_.layout.slab_bytes;
  }
  // Outside the lock: no client has these addresses until the coordinator
  // records the region, and earlier readers of the slabs finished within
  // their grace before reclamation freed them. The slabs stay REGION (out
  // of reclamation's reach) until this is done, even if freed meanwhile.
  for (uint64_t id : dirty) {
    std::memset(pool_ + options_.layout.slab_offset(id), 0,
                options_.layout.slab_bytes);
  }
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end() || it->second.freed) {
    for (uint64_t id : taken) SealLocked(slabs_[id], /*kv=*/false);
    if (it != regions_.end()) regions_.erase(it);
    return absl::AbortedError(
        absl::StrCat("region ", region_id,
                     " was freed while its memory was being "
                     "cleared; create the region again"));
  }
  // Published last: a reader that finds the id here reads cleared memory.
  for (uint64_t id : taken) {
    RegionWord(id).store(region_id, std::memory_order_release);
  }
  it->second.zeroing = false;
  return absl::OkStatus();
}

uint64_t SlabManager::FreeRegion(uint64_t region_id) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end() || it->second.freed) return 0;
  const uint64_t held = it->second.slabs.size();
  ++regions_freed_;
  if (it->second.zeroing) {
    it->second.freed = true;  // AllocateRegion seals them when done
    return held;
  }
  // Every slab's word first: a handle that still reads its id on any of
  // them knows none of them has been freed yet.
  for (uint64_t id : it->second.slabs) {
    RegionWord(id).store(0, std::memory_order_release);
  }
  for (uint64_t id : it->second.slabs) SealLocked(slabs_[id], /*kv=*/false);
  regions_.erase(it);
  return held;
}

std::vector<uint64_t> SlabManager::RegionIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, region] : regions_) {
    if (!region.freed) ids.push_back(id);
  }
  return ids;
}

void SlabManager::SealExpiredLocked(absl::Time now) {
  for (Slab& s : slabs_) {
    if (s.state == SlabState::kGranted && now >= s.lease_end) {
      SealLocked(s, /*kv=*/true);
    }
  }
}

uint64_t SlabManager::ScanIndex(std::vector<uint32_t>& refs) const {
  const format::PoolLayout& l = options_.layout;
  const uint64_t words = l.bucket_count * format::kSlotsPerBucket;
  uint64_t occupied = 0;
  for (uint64_t i = 0; i < words; ++i) {
    // Clients (through the transport's responder) CAS slots concurrently.
    uint64_t word =
        std::atomic_ref<uint64_t>(index_[i]).load(std::memory_order_acquire);
    if (word == 0) continue;
    ++occupied;
    uint64_t slab = l.slab_of(format::DecodeSlot(word).offset);
    if (slab < l.slab_count) ++refs[slab];
  }
  return occupied;
}

ReclaimPass SlabManager::Reclaim() {
  absl::MutexLock pass_lock(&reclaim_mu_);
  // Only slabs already SEALED before the scan starts are considered: nothing
  // can be published into them while the scan runs (kLeaseMargin), so a
  // zero count is not an artefact of the scan racing a publisher.
  std::vector<bool> sealed_before;
  {
    absl::Time now = Now();
    absl::MutexLock lock(&mu_);
    SealExpiredLocked(now);
    sealed_before.resize(slabs_.size());
    for (size_t s = 0; s < slabs_.size(); ++s) {
      sealed_before[s] = slabs_[s].state == SlabState::kSealed;
    }
  }
  std::vector<uint32_t> refs(options_.layout.slab_count, 0);
  ReclaimPass pass;
  pass.occupied_slots = ScanIndex(refs);
  // Candidacy starts when the scan ended: a reader that fetched a slot before
  // it changed did so before the scan saw the change.
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  objects_ = pass.occupied_slots;
  for (size_t id = 0; id < slabs_.size(); ++id) {
    Slab& s = slabs_[id];
    if (!sealed_before[id] || s.state != SlabState::kSealed) continue;
    if (refs[id] > 0) {
      s.unreferenced_since = absl::InfiniteFuture();
    } else if (s.unreferenced_since == absl::InfiniteFuture()) {
      s.unreferenced_since = now;
      ++pass.candidates;
    } else if (now >= s.unreferenced_since + grace() && !s.evicting) {
      s.state = SlabState::kFree;
      s.unreferenced_since = absl::InfiniteFuture();
      s.kv = s.evicted = false;
      free_.push_back(id);
      ++reclaimed_;
      ++pass.freed;
    } else {
      ++pass.candidates;
    }
  }
  return pass;
}

absl::Status SlabManager::CheckRegionRange(uint64_t offset,
                                           uint64_t length) const {
  const format::PoolLayout& l = options_.layout;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", offset, ", +", length, ") ", why,
                     "; digest only ranges inside one slab of a region"));
  };
  if (length == 0) return bad("is empty");
  if (offset < l.slab_area_offset || offset > l.pool_bytes ||
      length > l.pool_bytes - offset) {
    return bad("is outside this node's slab area");
  }
  const uint64_t slab = l.slab_of(offset);
  if (slab >= l.slab_count || l.slab_of(offset + length - 1) != slab) {
    return bad(slab >= l.slab_count ? "is past the last slab"
                                    : "crosses a slab boundary");
  }
  absl::MutexLock lock(&mu_);
  const Slab& s = slabs_[slab];
  if (s.state != SlabState::kRegion) {
    return bad(absl::StrCat("lies in slab ", slab, ", which is ",
                            SlabStateName(s.state), ", not held by a region"));
  }
  auto it = regions_.find(s.region_id);
  if (it == regions_.end() || it->second.zeroing) {
    return bad(absl::StrCat("lies in slab ", slab,
                            ", whose region is still being created"));
  }
  return absl::OkStatus();
}

SlabCounts SlabManager::Counts() const {
  absl::MutexLock lock(&mu_);
  SlabCounts c;
  c.total = slabs_.size();
  for (const Slab& s : slabs_) {
    c.free += s.state == SlabState::kFree;
    c.granted += s.state == SlabState::kGranted;
    c.sealed += s.state == SlabState::kSealed;
    c.region += s.state == SlabState::kRegion;
  }
  // A lease past its end still counts as granted until the next Reclaim
  // pass seals it.
  c.reclaimed = reclaimed_;
  c.grants = grants_;
  c.grant_requests = grant_requests_;
  c.objects = objects_;
  c.index_slots = options_.layout.bucket_count * format::kSlotsPerBucket;
  c.used_bytes = (c.granted + c.sealed + c.region) * options_.layout.slab_bytes;
  c.regions_freed = regions_freed_;
  c.zeroed_bytes = zeroed_bytes_;
  c.evicted = evicted_;
  c.objects_evicted = objects_evicted_;
  return c;
}

bool SlabManager::PendingLocked(const Slab& s) const {
  return s.state == SlabState::kSealed &&
         (s.evicted || s.evicting || !s.kv ||
          s.unreferenced_since != absl::InfiniteFuture());
}

EvictionView SlabManager::Eviction() const {
  EvictionView v;
  std::vector<std::pair<uint64_t, uint64_t>> fifo;  // (seq, slab)
  absl::MutexLock lock(&mu_);
  v.total = slabs_.size();
  for (uint64_t id = 0; id < slabs_.size(); ++id) {
    const Slab& s = slabs_[id];
    switch (s.state) {
      case SlabState::kFree:
        ++v.free;
        break;
      case SlabState::kGranted:
        ++v.granted;
        v.next_lease_end = std::min(v.next_lease_end, s.lease_end);
        break;
      case SlabState::kRegion:
        ++v.region;
        break;
      case SlabState::kSealed:
        if (!PendingLocked(s)) {
          fifo.emplace_back(s.fifo_seq, id);
        } else if (s.unreferenced_since == absl::InfiniteFuture()) {
          ++v.pending;
          ++v.pending_unscanned;
        } else {
          ++v.pending;
          v.next_free = std::min(v.next_free, s.unreferenced_since + grace());
        }
        break;
    }
  }
  v.used = v.total - v.free - v.pending;
  std::sort(fifo.begin(), fifo.end());
  v.candidates.reserve(fifo.size());
  for (const auto& [seq, id] : fifo) v.candidates.push_back(id);
  return v;
}

bool SlabManager::BeginEviction(uint64_t slab) {
  absl::MutexLock lock(&mu_);
  if (slab >= slabs_.size()) return false;
  Slab& s = slabs_[slab];
  if (s.state != SlabState::kSealed || PendingLocked(s)) return false;
  s.evicting = true;
  // Under the lock, so a Grant cannot clear the word before this store and
  // leave it set on a slab handed out again.
  EvictingWord(slab).store(1, std::memory_order_seq_cst);
  return true;
}

void SlabManager::Requeue(uint64_t slab, bool clear_evicting) {
  absl::MutexLock lock(&mu_);
  if (slab >= slabs_.size()) return;
  Slab& s = slabs_[slab];
  if (s.state != SlabState::kSealed || s.evicted) return;
  if (clear_evicting) {
    EvictingWord(slab).store(0, std::memory_order_seq_cst);
  }
  s.evicting = false;
  s.fifo_seq = next_fifo_seq_++;
}

void SlabManager::FinishEviction(uint64_t slab, uint64_t objects) {
  absl::MutexLock lock(&mu_);
  if (slab >= slabs_.size()) return;
  Slab& s = slabs_[slab];
  if (!s.evicting) return;
  s.evicting = false;
  s.evicted = true;
  ++evicted_;
  objects_evicted_ += objects;
}

void SlabManager::AbortEviction(uint64_t slab) {
  absl::MutexLock lock(&mu_);
  if (slab >= slabs_.size()) return;
  Slab& s = slabs_[slab];
  if (!s.evicting) return;
  s.evicting = false;
  s.fifo_seq = 0;  // before every other candidate: retried first
}

bool SlabManager::TakeTouched(uint64_t slab) {
  if (slab >= options_.layout.slab_count) return false;
  std::atomic_ref<uint64_t> touched = TouchedWord(slab);
  if (touched.load(std::memory_order_acquire) == 0) return false;
  touched.store(0, std::memory_order_release);
  return true;
}

SlabState SlabManager::state(uint64_t slab) const {
  absl::MutexLock lock(&mu_);
  return slabs_[slab].state;
}

}  // namespace meshpool::store
