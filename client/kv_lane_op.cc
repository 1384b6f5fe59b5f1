#include "client/kv_lane_op.h"

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
                              ValueSink sink) {
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
                                     b.words[slot]);
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
    MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
    if (*old_value != b.words[target]) continue;  // lost a race: look again
    // Published. Never a Retry from here: the caller would publish again.
    cache.Remember(key.hash, b.slot_offset[target], word);
    if (mine->size() != 1) RemoveDuplicates(s, key);
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("gave up publishing after ",
                                             kMaxPublishRounds,
                                             " lost races on one key; retry"));
}

}  // namespace meshpool::client_internal
