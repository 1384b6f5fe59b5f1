#include "client/kv_lane_op.h"

#include <algorithm>
#include <utility>

#include "client/kv_retry.h"

namespace meshpool::client_internal {

absl::Status BufferTooSmall(uint64_t value_bytes, size_t buffer_bytes) {
  return absl::OutOfRangeError(
      absl::StrCat("value is ", value_bytes, " bytes but the buffer holds ",
                   buffer_bytes, "; pass a buffer of at least that size"));
}

absl::StatusOr<LaneOp> StartLaneOp(NodeConnection& node) {
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane, node.AcquireLane());
  return LaneOp(node, std::move(lane));
}

CandidatePlan PlanCandidates(LaneOp& s, const KeyRef& key, const Buckets& b,
                             uint64_t* cursor) {
  CandidatePlan plan;
  plan.slots = b.Candidates(key, s.node().layout());
  for (int c : plan.slots) {
    plan.offsets.push_back(*cursor);
    plan.lengths.push_back(s.ObjectReadLength(b.words[c]));
    *cursor += plan.lengths.back();
  }
  return plan;
}

void AddCandidateReads(LaneOp& s, const Buckets& b, const CandidatePlan& plan,
                       char* staging, rdma::WorkRequests& wrs) {
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    s.AddRead(wrs, staging + plan.offsets[i],
              format::DecodeSlot(b.words[plan.slots[i]]).offset,
              plan.lengths[i]);
  }
}

absl::Status VerifyCandidates(LaneOp& s, const KeyRef& key, const Buckets& b,
                              const CandidatePlan& plan, const char* staging,
                              ReadStart start, ValueSink sink) {
  bool stale = false;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    absl::string_view value;
    format::Verdict v = format::VerifyObject(
        absl::MakeConstSpan(staging + plan.offsets[i], plan.lengths[i]),
        key.key, key.hash, s.node().incarnation(), &value);
    if (v == format::Verdict::kValid) {
      if (OutdatedAt(key, staging + plan.offsets[i])) {
        return absl::NotFoundError("key not found");
      }
      int slot = plan.slots[i];
      s.node().slot_cache().Remember(key.hash, b.slot_offset[slot],
                                     b.words[slot], start);
      return sink(value);
    }
    if (v != format::Verdict::kOtherKey) stale = true;
  }
  return stale ? StaleRead() : absl::NotFoundError("key not found");
}

bool ReadLeasePassed(LaneOp& s, ReadStart start) {
  return ReadStartNow() - start >
         absl::ToChronoNanoseconds(s.node().read_lease());
}

absl::Status ReadAllBuckets(LaneOp& s, absl::Span<const KeyRef> keys,
                            std::vector<Buckets>* buckets) {
  buckets->resize(keys.size());
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            s.Staging(kBucketPairBytes * keys.size()));
  rdma::WorkRequests wrs;
  for (size_t i = 0; i < keys.size(); ++i) {
    s.AddBucketReads(wrs, keys[i], staging.data() + i * kBucketPairBytes,
                     &(*buckets)[i]);
  }
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memcpy((*buckets)[i].words, staging.data() + i * kBucketPairBytes,
                kBucketPairBytes);
  }
  return absl::OkStatus();
}

// The CAS protocol. A failed CAS means another writer changed the slot:
// look again.
namespace {

// After an insert: a concurrent writer may have filled another slot for the
// same key. Everyone keeps the first slot in bucket order (readers and
// writers prefer it too) and clears the rest, until one remains. Best
// effort: the value is already published, and a leftover duplicate is never
// read (the first slot wins) and is cleared by the key's next write.
void RemoveDuplicates(LaneOp& s, const KeyRef& key) {
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    Buckets b;
    if (!s.ReadBuckets(key, &b).ok()) return;
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (IsRetry(mine.status(), RetryReason::kRereadIndex)) continue;
    if (!mine.ok() || mine->size() <= 1) return;
    absl::StatusOr<absl::Span<char>> staging = s.Staging(8 * mine->size());
    if (!staging.ok()) return;
    rdma::WorkRequests wrs;
    for (size_t i = 1; i < mine->size(); ++i) {
      int dup = (*mine)[i];
      s.AddCas(wrs, reinterpret_cast<uint64_t*>(staging->data()) + i,
               b.slot_offset[dup], b.words[dup], 0);
    }
    if (!s.Run(wrs).ok()) return;
  }
}

}  // namespace

void RemoveDuplicateSlots(LaneOp& s, const KeyRef& key) {
  RemoveDuplicates(s, key);
}

bool HintHolds(const KeyRef& key, const Buckets& b,
               const format::PoolLayout& layout,
               const std::optional<SlotCache::Hint>& hint, int* slot) {
  if (!hint.has_value()) return false;
  SlotList candidates = b.Candidates(key, layout);
  if (candidates.empty()) return false;
  int first = candidates.front();
  if (b.words[first] != hint->word ||
      b.slot_offset[first] != hint->slot_offset) {
    return false;
  }
  *slot = first;
  return true;
}

absl::Status Publish(LaneOp& s, const KeyRef& key, uint64_t word,
                     absl::Time deadline, const PutPrefetch* prefetched) {
  auto too_late = [] {
    return Retry(RetryReason::kAllocateAgain,
                 "slab lease ended before publishing");
  };
  SlotCache& cache = s.node().slot_cache();
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    if (absl::Now() > deadline) return too_late();
    Buckets b;
    std::optional<SlotCache::Hint> hint;
    if (round == 0 && prefetched != nullptr) {
      b = prefetched->buckets;
      hint = prefetched->verified_hint;
    } else {
      MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    }
    // The hinted slot, whose object was just verified as this key, still
    // holds it and comes first: it is the target, without reading the
    // candidates' headers again. (A duplicate further on, left by a racing
    // first insert, is never read and goes with the key's next full-path
    // write or delete.)
    int hinted = -1;
    absl::StatusOr<std::vector<int>> mine =
        HintHolds(key, b, s.node().layout(), hint, &hinted)
            ? absl::StatusOr<std::vector<int>>(std::vector<int>{hinted})
            : s.FindKeySlots(key, b);
    if (IsRetry(mine.status(), RetryReason::kRereadIndex)) continue;
    if (!mine.ok()) return mine.status();
    int target = -1;
    if (!mine->empty()) {
      target = mine->front();
    } else {
      for (size_t i = 0; i < kSlotsPerKey && target < 0; ++i) {
        if (b.words[i] == 0) target = static_cast<int>(i);
      }
      if (target < 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "both index buckets of this key on ", s.node().Describe(),
            " are full; delete keys, add nodes, or restart the node with "
            "more index buckets"));
      }
    }
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(8));
    uint64_t* old_value = reinterpret_cast<uint64_t*>(staging.data());
    rdma::WorkRequests wrs;
    s.AddCas(wrs, old_value, b.slot_offset[target], b.words[target], word);
    // The reads above may have been slow: the lease is checked again as
    // close to the CAS as the client can.
    if (absl::Now() > deadline) return too_late();
    const ReadStart posted_at = ReadStartNow();
    MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
    if (*old_value != b.words[target]) continue;  // lost a race: look again
    // Published. Never a Retry from here: the caller would publish again.
    cache.Remember(key.hash, b.slot_offset[target], word, posted_at);
    if (mine->size() != 1) RemoveDuplicates(s, key);
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("gave up publishing after ",
                                             kMaxPublishRounds,
                                             " lost races on one key; retry"));
}

namespace {

// One CAS; true when it found `expected` (and so stored `desired`).
absl::StatusOr<bool> CasOnce(LaneOp& s, uint64_t slot_offset, uint64_t expected,
                             uint64_t desired) {
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(8));
  uint64_t* old_value = reinterpret_cast<uint64_t*>(staging.data());
  rdma::WorkRequests wrs;
  s.AddCas(wrs, old_value, slot_offset, expected, desired);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  return *old_value == expected;
}

// `word` already sits in one of the key's slots (a speculative CAS landed),
// maybe not the first, which is the one readers see. Makes the key's first
// slot hold it and clears the rest. If no slot holds it any more, a
// concurrent PUT or DELETE replaced it: this PUT is done, ordered before
// that one. Never publishes the object a second time after it was
// replaced, and never reports Retry(kAllocateAgain).
absl::Status SettleLandedPublish(LaneOp& s, const KeyRef& key, uint64_t word,
                                 absl::Time deadline) {
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    const ReadStart read_at = ReadStartNow();
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (IsRetry(mine.status(), RetryReason::kRereadIndex)) continue;
    if (!mine.ok()) return mine.status();
    auto ours = std::find_if(mine->begin(), mine->end(),
                             [&](int slot) { return b.words[slot] == word; });
    if (ours == mine->end()) return absl::OkStatus();
    const int first = mine->front();
    bool moved = ours == mine->begin();
    if (moved) {
      s.node().slot_cache().Remember(key.hash, b.slot_offset[first], word,
                                     read_at);
    } else {
      // Another copy of the key comes first. Move ours there, in time.
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "a PUT to ", s.node().Describe(),
            " landed in a duplicate slot of its key and its slab lease ended "
            "before it could take the key's first slot; retry the PUT"));
      }
      const ReadStart posted_at = ReadStartNow();
      MESHPOOL_ASSIGN_OR_RETURN(
          moved, CasOnce(s, b.slot_offset[first], b.words[first], word));
      if (!moved) continue;  // the first slot changed: look again
      s.node().slot_cache().Remember(key.hash, b.slot_offset[first], word,
                                     posted_at);
    }
    if (mine->size() > 1) RemoveDuplicates(s, key);
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("gave up settling a PUT after ",
                                             kMaxPublishRounds,
                                             " lost races on one key; retry"));
}

}  // namespace

absl::Status SettleSpeculativePublish(LaneOp& s, const KeyRef& key,
                                      uint64_t word, absl::Time deadline,
                                      const PutPrefetch& p) {
  const SlotCache::Hint& hint = *p.speculated;
  int slot = -1;
  for (size_t i = 0; i < kSlotsPerKey; ++i) {
    if (p.buckets.slot_offset[i] == hint.slot_offset)
      slot = static_cast<int>(i);
  }
  if (p.speculated_old != hint.word) {
    // The CAS found the slot changed and did nothing: publish as usual from
    // the buckets just read, with that slot's newer word.
    PutPrefetch fresh = p;
    fresh.verified_hint.reset();
    fresh.speculated.reset();
    if (slot >= 0) fresh.buckets.words[slot] = p.speculated_old;
    return Publish(s, key, word, deadline, slot >= 0 ? &fresh : nullptr);
  }
  // Landed. The common case: the hinted object is the key's, and the
  // buckets show that slot first among the key's candidates, holding the
  // hinted word (read before the CAS ran) or ours (tcp copies a READ's
  // bytes when it sends the response, which may be after the CAS).
  if (p.verified_hint.has_value() && slot >= 0) {
    const SlotList candidates = p.buckets.Candidates(key, s.node().layout());
    const uint64_t seen = p.buckets.words[slot];
    if (!candidates.empty() && candidates.front() == slot &&
        (seen == hint.word || seen == word)) {
      s.node().slot_cache().Remember(key.hash, hint.slot_offset, word,
                                     p.posted_at);
      return absl::OkStatus();
    }
  }
  if (!p.verified_hint.has_value()) {
    // The slot held its word but the object behind it was not this key's:
    // its memory was reused for another key within the hint's age, which the
    // reclaimer's grace forbids (a stall longer than the grace, or
    // corruption). Put the other key's word back, then publish as usual.
    MESHPOOL_ASSIGN_OR_RETURN(bool undone,
                              CasOnce(s, hint.slot_offset, word, hint.word));
    if (undone) return Publish(s, key, word, deadline);
  }
  return SettleLandedPublish(s, key, word, deadline);
}

}  // namespace meshpool::client_internal
