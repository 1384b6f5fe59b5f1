#include "store/slab_manager.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::store {
namespace {

absl::Status CheckLease(absl::string_view what, absl::Duration d) {
  if (d <= absl::ZeroDuration() || d > kMaxLease) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", absl::FormatDuration(d),
                     "; give a duration in (0, ",
                     absl::FormatDuration(kMaxLease), "]"));
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
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<SlabManager>> SlabManager::Create(
    SlabManagerOptions options, void* pool) {
  if (pool == nullptr || reinterpret_cast<uintptr_t>(pool) % 8 != 0) {
    return absl::InvalidArgumentError("pool must be non-null and 8-aligned");
  }
  const PoolLayout& l = options.layout;
  if (l.slab_count == 0 || l.slab_bytes == 0 || l.bucket_count == 0 ||
      l.slab_offset(l.slab_count) > l.pool_bytes) {
    return absl::InvalidArgumentError(
        "layout has no slabs or overruns the pool; build it with "
        "ComputeLayout");
  }
  MESHPOOL_RETURN_IF_ERROR(CheckLease("slab lease", options.lease));
  MESHPOOL_RETURN_IF_ERROR(
      CheckLease("max read lease", options.max_read_lease));
  if (!options.clock) options.clock = [] { return absl::Now(); };
  auto* index =
      reinterpret_cast<uint64_t*>(static_cast<char*>(pool) + l.index_offset);
  return std::unique_ptr<SlabManager>(
      new SlabManager(std::move(options), index));
}

SlabManager::SlabManager(SlabManagerOptions options, uint64_t* index)
    : options_(std::move(options)), index_(index) {
  slabs_.resize(options_.layout.slab_count);
  for (uint64_t s = 0; s < options_.layout.slab_count; ++s) free_.push_back(s);
}

absl::Time SlabManager::Now() const { return options_.clock(); }

absl::StatusOr<SlabGrant> SlabManager::Grant(absl::string_view client_id) {
  if (client_id.empty()) {
    return absl::InvalidArgumentError("GrantSlab needs a client_id");
  }
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  ++grant_requests_;
  // Expired leases are sealed by Reclaim, not here: Grant stays O(1), and a
  // sealed slab cannot be granted before reclamation frees it anyway.
  if (free_.empty()) {
    uint64_t granted = 0;
    for (const Slab& s : slabs_) granted += s.state == SlabState::kGranted;
    return absl::ResourceExhaustedError(absl::StrCat(
        "pool full: all ", slabs_.size(), " slabs hold live objects (",
        granted, " leased to writers, ", slabs_.size() - granted,
        " sealed); delete keys or add capacity"));
  }
  uint64_t id = free_.front();
  free_.pop_front();
  Slab& slab = slabs_[id];
  slab.state = SlabState::kGranted;
  ++grants_;
  slab.client = std::string(client_id);
  slab.lease_end = now + options_.lease + kLeaseMargin;
  slab.unreferenced_since = absl::InfiniteFuture();
  return SlabGrant{id, options_.layout.slab_offset(id),
                   options_.layout.slab_bytes, options_.lease};
}

absl::Status SlabManager::Release(absl::string_view client_id, uint64_t slab) {
  if (slab >= options_.layout.slab_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("no slab ", slab, "; this node has ",
                     options_.layout.slab_count));
  }
  absl::MutexLock lock(&mu_);
  Slab& s = slabs_[slab];
  if (s.state != SlabState::kGranted) return absl::OkStatus();
  if (s.client != client_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("slab ", slab, " is leased to another client, not '",
                     client_id, "'; release only slabs you were granted"));
  }
  SealLocked(s);
  return absl::OkStatus();
}

void SlabManager::SealLocked(Slab& slab) {
  slab.state = SlabState::kSealed;
  slab.client.clear();
  slab.unreferenced_since = absl::InfiniteFuture();
}

void SlabManager::SealExpiredLocked(absl::Time now) {
  for (Slab& s : slabs_) {
    if (s.state == SlabState::kGranted && now >= s.lease_end) SealLocked(s);
  }
}

uint64_t SlabManager::ScanIndex(std::vector<uint32_t>& refs) const {
  const PoolLayout& l = options_.layout;
  const uint64_t words = l.bucket_count * kSlotsPerBucket;
  uint64_t occupied = 0;
  for (uint64_t i = 0; i < words; ++i) {
    // Clients (through the transport's responder) CAS slots concurrently.
    uint64_t word =
        std::atomic_ref<uint64_t>(index_[i]).load(std::memory_order_acquire);
    if (word == 0) continue;
    ++occupied;
    uint64_t slab = l.slab_of(DecodeSlot(word).offset);
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
    } else if (now >= s.unreferenced_since + grace()) {
      s.state = SlabState::kFree;
      s.unreferenced_since = absl::InfiniteFuture();
      free_.push_back(id);
      ++reclaimed_;
      ++pass.freed;
    } else {
      ++pass.candidates;
    }
  }
  return pass;
}

SlabCounts SlabManager::Counts() const {
  absl::MutexLock lock(&mu_);
  SlabCounts c;
  c.total = slabs_.size();
  for (const Slab& s : slabs_) {
    c.free += s.state == SlabState::kFree;
    c.granted += s.state == SlabState::kGranted;
    c.sealed += s.state == SlabState::kSealed;
  }
  // A lease past its end still counts as granted until the next Reclaim
  // pass seals it.
  c.reclaimed = reclaimed_;
  c.grants = grants_;
  c.grant_requests = grant_requests_;
  c.objects = objects_;
  c.index_slots = options_.layout.bucket_count * kSlotsPerBucket;
  c.used_bytes = (c.granted + c.sealed) * options_.layout.slab_bytes;
  return c;
}

SlabState SlabManager::state(uint64_t slab) const {
  absl::MutexLock lock(&mu_);
  return slabs_[slab].state;
}

}  // namespace meshpool::store
