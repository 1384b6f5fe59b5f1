#include "store/evictor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/rdma.h"

namespace meshpool::store {

absl::Status CheckWatermarks(double high, double low) {
  if (!(low > 0 && low < high && high <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NodeOptions.evict_low_watermark (", low,
        ") and evict_high_watermark (", high,
        ") must satisfy 0 < low < high <= 1 (fractions of the slabs), e.g. "
        "0.8 and 0.9"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Evictor>> Evictor::Create(
    EvictorOptions options, SlabManager* slabs, PinTables* pins,
    std::unique_ptr<SlotClearer> clearer, const char* pool) {
  MESHPOOL_RETURN_IF_ERROR(
      CheckWatermarks(options.high_watermark, options.low_watermark));
  if (slabs == nullptr) {
    return absl::InvalidArgumentError("Evictor needs a slab manager");
  }
  if (options.enabled &&
      (pins == nullptr || clearer == nullptr || pool == nullptr)) {
    return absl::InvalidArgumentError(
        "an enabled Evictor needs pin tables, a slot clearer and the pool");
  }
  if (options.reclaim_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "EvictorOptions.reclaim_interval must be > 0");
  }
  options.env = EnvOrDefault(options.env);
  return std::unique_ptr<Evictor>(
      new Evictor(std::move(options), slabs, pins, std::move(clearer), pool));
}

Evictor::Evictor(EvictorOptions options, SlabManager* slabs, PinTables* pins,
                 std::unique_ptr<SlotClearer> clearer, const char* pool)
    : options_(std::move(options)),
      slabs_(slabs),
      pins_(pins),
      pool_(pool),
      clearer_(std::move(clearer)) {}

void Evictor::set_wake(std::function<void()> wake) {
  absl::MutexLock lock(&wake_mu_);
  wake_ = std::move(wake);
}

void Evictor::Shutdown() {
  absl::MutexLock lock(&mu_);
  clearer_.reset();
}

double Evictor::SlabsPerRefill() {
  const absl::Time now = options_.env->Now();
  const uint64_t calls = grant_calls_.load(std::memory_order_relaxed);
  if (rate_since_ == absl::InfinitePast()) {
    rate_since_ = now;
    rate_calls_ = calls;
    return refill_slabs_;
  }
  const double seconds = absl::ToDoubleSeconds(now - rate_since_);
  if (seconds >= absl::ToDoubleSeconds(options_.reclaim_interval)) {
    const double rate = static_cast<double>(calls - rate_calls_) / seconds;
    grants_per_second_ = kGrantRateSmoothing * rate +
                         (1 - kGrantRateSmoothing) * grants_per_second_;
    rate_since_ = now;
    rate_calls_ = calls;
  }
  const absl::Duration refill = slabs_->grace() + 2 * options_.reclaim_interval;
  refill_slabs_ = grants_per_second_ * absl::ToDoubleSeconds(refill);
  return refill_slabs_;
}

uint64_t Evictor::Needed(const EvictionView& view, bool urgent) const {
  const double total = static_cast<double>(view.total);
  // Both watermarks move down by the slabs one refill window takes.
  const double shift =
      std::min(refill_slabs_ / std::max(total, 1.0),
               options_.low_watermark -
                   std::min(kMinLowWatermark, options_.low_watermark));
  const uint64_t low = static_cast<uint64_t>(
      std::floor((options_.low_watermark - shift) * total));
  const uint64_t above_low = view.used > low ? view.used - low : 0;
  if (static_cast<double>(view.used) >
      (options_.high_watermark - shift) * total) {
    return above_low;
  }
  // A writer waits for a slab and none is on its way: make one.
  if (urgent && view.free == 0 && view.pending == 0) {
    return std::max<uint64_t>(1, above_low);
  }
  return 0;
}

EvictRound Evictor::RunOnce() {
  EvictRound round;
  if (!options_.enabled) return round;
  absl::MutexLock lock(&mu_);
  if (clearer_ == nullptr) return round;
  const bool urgent = urgent_.exchange(false);
  SlabsPerRefill();
  EvictionView view = slabs_->Eviction();
  round.needed = Needed(view, urgent);
  if (round.needed == 0 || view.candidates.empty()) return round;
  std::vector<uint64_t> queue = std::move(view.candidates);
  // Pins count only on objects an index slot still points at (a replaced
  // or deleted value's pin protects nothing). Nothing is ever published
  // into a sealed slab, so a snapshot taken now stays right for the round.
  const absl::flat_hash_set<uint64_t> referenced = ReferencedObjects(queue);
  auto is_referenced = [&referenced](uint64_t offset) {
    return referenced.contains(offset);
  };
  // Slabs pinned already are skipped without touching their evicting word
  // (setting it would fail clients' pins there for nothing). Whatever this
  // look misses, the look after marking catches.
  std::vector<bool> skip(view.total, false);
  {
    const std::vector<bool> pinned = pins_->PinnedSlabs(queue, is_referenced);
    for (size_t i = 0; i < queue.size(); ++i) skip[queue[i]] = pinned[i];
  }
  std::vector<bool> chanced(view.total, false);
  size_t next = 0;
  while (round.evicted < round.needed) {
    std::vector<uint64_t> batch =
        Select(queue, next, round.needed - round.evicted, skip, chanced, round);
    if (batch.empty()) break;
    // (2): the evicting words are stored; read the pin tables only now.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::vector<bool> pinned = pins_->PinnedSlabs(batch, is_referenced);
    std::vector<uint64_t> unpinned;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (pinned[i]) {
        slabs_->Requeue(batch[i], /*clear_evicting=*/true);
        ++round.pinned;
      } else {
        unpinned.push_back(batch[i]);
      }
    }
    if (unpinned.empty()) continue;
    round.status = Unlink(unpinned, round);
    if (!round.status.ok()) break;
  }
  return round;
}

void Evictor::ForEachSlot(
    const std::function<void(uint64_t slot_offset, uint64_t word)>& fn) const {
  const format::PoolLayout& l = slabs_->layout();
  uint64_t* index =
      reinterpret_cast<uint64_t*>(const_cast<char*>(pool_ + l.index_offset));
  const uint64_t words = l.bucket_count * format::kSlotsPerBucket;
  for (uint64_t i = 0; i < words; ++i) {
    // Clients CAS these words one-sidedly: read them atomically.
    const uint64_t word =
        std::atomic_ref<uint64_t>(index[i]).load(std::memory_order_acquire);
    if (word != 0) fn(l.index_offset + i * format::kSlotBytes, word);
  }
}

absl::flat_hash_set<uint64_t> Evictor::ReferencedObjects(
    const std::vector<uint64_t>& slabs) const {
  const format::PoolLayout& l = slabs_->layout();
  std::vector<bool> wanted(l.slab_count, false);
  for (uint64_t s : slabs) {
    if (s < l.slab_count) wanted[s] = true;
  }
  absl::flat_hash_set<uint64_t> out;
  ForEachSlot([&](uint64_t, uint64_t word) {
    const uint64_t offset = format::DecodeSlot(word).offset;
    const uint64_t slab = l.slab_of(offset);
    if (slab < l.slab_count && wanted[slab]) out.insert(offset);
  });
  return out;
}

std::vector<uint64_t> Evictor::Select(std::vector<uint64_t>& queue,
                                      size_t& next, uint64_t want,
                                      const std::vector<bool>& pinned,
                                      std::vector<bool>& chanced,
                                      EvictRound& round) {
  std::vector<uint64_t> batch;
  while (batch.size() < want && next < queue.size()) {
    const uint64_t slab = queue[next++];
    if (slab < pinned.size() && pinned[slab]) {
      // Stays, to the tail; a word an aborted round left set is cleared.
      slabs_->Requeue(slab, /*clear_evicting=*/true);
      ++round.pinned;
      continue;
    }
    if (slab < chanced.size() && !chanced[slab] && slabs_->TakeTouched(slab)) {
      // Second chance: to the tail, here and in the manager's FIFO. It
      // comes up again in this round only after every other candidate.
      chanced[slab] = true;
      slabs_->Requeue(slab, /*clear_evicting=*/false);
      ++round.second_chances;
      queue.push_back(slab);
      continue;
    }
    // (1): marks the slab and stores its evicting word.
    if (slabs_->BeginEviction(slab)) batch.push_back(slab);
  }
  return batch;
}

absl::Status Evictor::Unlink(const std::vector<uint64_t>& slabs,
                             EvictRound& round) {
  const format::PoolLayout& l = slabs_->layout();
  std::vector<bool> target(l.slab_count, false);
  for (uint64_t s : slabs) target[s] = true;
  auto slab_of_word = [&](uint64_t word) {
    return l.slab_of(format::DecodeSlot(word).offset);
  };
  auto in_target = [&](uint64_t word) {
    const uint64_t slab = slab_of_word(word);
    return slab < l.slab_count && target[slab];
  };
  // (3): one scan of the index for every slot pointing into the batch.
  std::vector<SlotClear> todo;
  ForEachSlot([&](uint64_t slot_offset, uint64_t word) {
    if (in_target(word)) todo.push_back({slot_offset, word});
  });
  std::vector<uint64_t> cleared(l.slab_count, 0);
  for (int pass = 0; pass < kMaxClearRounds && !todo.empty(); ++pass) {
    std::vector<SlotClear> again;
    for (size_t begin = 0; begin < todo.size(); begin += rdma::kMaxBatch) {
      const size_t n = std::min(rdma::kMaxBatch, todo.size() - begin);
      absl::Span<const SlotClear> chunk(todo.data() + begin, n);
      std::vector<uint64_t> old(n, 0);
      absl::Status s = clearer_->Clear(chunk, absl::MakeSpan(old));
      if (!s.ok()) {
        for (uint64_t slab : slabs) slabs_->AbortEviction(slab);
        return s;
      }
      for (size_t i = 0; i < n; ++i) {
        if (old[i] == chunk[i].expected) {
          ++cleared[slab_of_word(chunk[i].expected)];
        } else if (old[i] != 0 && in_target(old[i])) {
          again.push_back({chunk[i].offset, old[i]});
        }
      }
    }
    todo = std::move(again);
  }
  // (4): left SEALED, evicted; reclamation frees them after the grace.
  for (uint64_t slab : slabs) {
    slabs_->FinishEviction(slab, cleared[slab]);
    ++round.evicted;
    round.objects += cleared[slab];
  }
  return absl::OkStatus();
}

absl::Duration Evictor::RetryHint(const EvictionView& view,
                                  bool evictable) const {
  const absl::Time now = options_.env->Now();
  const absl::Duration interval = options_.reclaim_interval;
  const absl::Duration grace = slabs_->grace();
  absl::Duration best = absl::InfiniteDuration();
  if (view.next_free != absl::InfiniteFuture()) {
    // The first pass at or after next_free frees it.
    best = std::min(
        best, std::max(absl::ZeroDuration(), view.next_free - now) + interval);
  }
  if (view.pending_unscanned > 0 || evictable) {
    // Evicted on the next pass, seen unreferenced, a grace, freed.
    best = std::min(best, 2 * interval + grace);
  }
  if (view.granted > 0 && view.next_lease_end != absl::InfiniteFuture()) {
    best = std::min(best,
                    std::max(absl::ZeroDuration(), view.next_lease_end - now) +
                        2 * interval + grace);
  }
  if (best == absl::InfiniteDuration()) best = interval;
  return std::max(best, absl::Milliseconds(1));
}

absl::StatusOr<SlabGrant> Evictor::Grant(absl::string_view client_id,
                                         absl::string_view tenant) {
  grant_calls_.fetch_add(1, std::memory_order_relaxed);
  // A tenant at its cap is refused before anything is evicted for it.
  MESHPOOL_RETURN_IF_ERROR(slabs_->CheckTenantCap(tenant));
  absl::StatusOr<SlabGrant> grant = slabs_->Grant(client_id, tenant);
  if (grant.ok() || !options_.enabled ||
      grant.status().code() != absl::StatusCode::kResourceExhausted) {
    return grant;
  }
  urgent_ = true;
  {
    absl::MutexLock lock(&wake_mu_);
    if (wake_) wake_();
  }
  const EvictionView view = slabs_->Eviction();
  uint64_t evictable = 0;
  if (!view.candidates.empty()) {
    for (bool pinned : pins_->PinnedSlabs(view.candidates)) {
      evictable += !pinned;
    }
  }
  if (view.free > 0 || view.pending > 0 || view.granted > 0 || evictable > 0) {
    SlabGrant later;
    later.retry_after =
        view.free > 0
            ? absl::Milliseconds(1)  // one came free just now
            : absl::Ceil(RetryHint(view, evictable > 0), absl::Milliseconds(1));
    return later;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "pool full and nothing can be evicted: ", view.candidates.size(),
      " sealed slabs hold pinned objects and ", view.region,
      " slabs are held by regions (of ", view.total,
      "); unpin keys, close idle clients, delete regions, or add capacity"));
}

}  // namespace meshpool::store
