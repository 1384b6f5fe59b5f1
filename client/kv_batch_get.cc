// The batched GET on one node: two posts (one doorbell each) for the whole
// batch, one when the slot cache knows every key's slot.
//
//   post 1: both buckets of every key; for a key with a slot hint, the
//           hinted object too (value straight into a registered buffer).
//   post 2: the candidates of every key the hint did not serve (the first
//           candidate direct), and the slab "touched" words of the slabs
//           read (rate-limited: the evictor's second chance).
//
// A key that needs more (a torn object, a lease that passed) takes the
// single-key path; that is rare and costs only that key.
#include <cstring>
#include <utility>

#include "client/kv_lane_op.h"
#include "client/kv_object_read.h"
#include "client/kv_protocol.h"
#include "client/kv_retry.h"

namespace meshpool::client_internal {
namespace {

struct KeyState {
  std::optional<SlotCache::Hint> hint;
  std::optional<ObjectRead> hinted;  // post 1's read of the hinted object
  std::vector<ObjectRead> reads;     // post 2's candidate reads
  bool done = false;
};

// The single-key path, for a key whose batched read was torn or slow: it
// re-reads the index until the value verifies.
absl::StatusOr<size_t> GetOne(NodeConnection& node, const KeyRef& key,
                              const GetTarget& target, int max_verify_retries) {
  size_t length = 0;
  DirectBuffer direct{target.out, target.lkey.value_or(0)};
  MESHPOOL_RETURN_IF_ERROR(GetValue(
      node, key, max_verify_retries,
      [&](absl::string_view value) {
        return CopyValueTo(value, target.out, &length);
      },
      target.lkey.has_value() ? &direct : nullptr));
  return length;
}

}  // namespace

void BatchGetValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const GetTarget> targets, int max_verify_retries,
                    absl::Span<absl::StatusOr<size_t>> results) {
  auto fail_rest = [&](const std::vector<KeyState>& states,
                       const absl::Status& st) {
    for (size_t i = 0; i < results.size(); ++i) {
      if (states.empty() || !states[i].done) results[i] = st;
    }
  };
  absl::StatusOr<LaneOp> op = StartLaneOp(node);
  if (!op.ok()) return fail_rest({}, op.status());
  LaneOp& s = *op;
  const ReadStart start = ReadStartNow();
  const size_t n = keys.size();
  std::vector<KeyState> states(n);
  std::vector<Buckets> buckets(n);

  // Post 1: buckets, plus hinted objects.
  uint64_t cursor = kBucketPairBytes * n;
  for (size_t i = 0; i < n; ++i) {
    states[i].hint = node.slot_cache().Find(keys[i].hash);
    if (states[i].hint.has_value()) {
      states[i].hinted = PlanObjectRead(s, keys[i], -1, states[i].hint->word,
                                        targets[i], true, &cursor);
    }
  }
  const uint64_t one = 1;
  absl::StatusOr<absl::Span<char>> staging = s.Staging(cursor + 8);
  if (!staging.ok()) return fail_rest({}, staging.status());
  char* base = staging->data();
  std::memcpy(base + cursor, &one, 8);
  rdma::WorkRequests wrs;
  for (size_t i = 0; i < n; ++i) {
    s.AddBucketReads(wrs, keys[i], base + i * kBucketPairBytes, &buckets[i]);
    if (states[i].hinted) {
      AddObjectReads(s, *states[i].hinted, base, targets[i], wrs);
      s.AddTouch(wrs, states[i].hinted->offset, base + cursor);
    }
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_rest({}, st);
  bool lease_passed = ReadLeasePassed(s, start);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(buckets[i].words, base + i * kBucketPairBytes,
                kBucketPairBytes);
    int slot = -1;
    if (!states[i].hinted || lease_passed ||
        !HintHolds(keys[i], buckets[i], node.layout(), states[i].hint, &slot)) {
      continue;
    }
    absl::StatusOr<size_t> got =
        FinishObjectRead(s, keys[i], *states[i].hinted, base, targets[i]);
    // Torn or another key's: the candidates below decide.
    if (!got.ok() && got.status().code() != absl::StatusCode::kOutOfRange) {
      continue;
    }
    states[i].done = true;
    results[i] = std::move(got);
  }

  // Post 2: the candidates of every key not yet served.
  cursor = 0;
  for (size_t i = 0; i < n; ++i) {
    if (states[i].done) continue;
    SlotList candidates = buckets[i].Candidates(keys[i], node.layout());
    for (size_t c = 0; c < candidates.size(); ++c) {
      states[i].reads.push_back(PlanObjectRead(
          s, keys[i], candidates[c], buckets[i].words[candidates[c]],
          targets[i], /*allow_direct=*/c == 0, &cursor));
    }
  }
  staging = s.Staging(cursor + 8);
  if (!staging.ok()) return fail_rest(states, staging.status());
  base = staging->data();
  std::memcpy(base + cursor, &one, 8);
  wrs.clear();
  for (size_t i = 0; i < n; ++i) {
    if (states[i].done) continue;
    for (const ObjectRead& r : states[i].reads) {
      AddObjectReads(s, r, base, targets[i], wrs);
    }
  }
  if (!wrs.empty()) {
    for (const KeyState& k : states) {
      if (!k.done && !k.reads.empty()) {
        s.AddTouch(wrs, k.reads.front().offset, base + cursor);
      }
    }
    if (absl::Status st = s.Run(wrs); !st.ok()) return fail_rest(states, st);
  }
  lease_passed = ReadLeasePassed(s, start);
  for (size_t i = 0; i < n; ++i) {
    if (states[i].done) continue;
    // The first candidate that verifies wins; a torn one means the view
    // was stale unless another verifies.
    absl::Status st = absl::NotFoundError("key not found");
    bool stale = false;
    for (const ObjectRead& read : states[i].reads) {
      if (lease_passed) {
        st = ReadLeaseExpired();
        break;
      }
      absl::StatusOr<size_t> got =
          FinishObjectRead(s, keys[i], read, base, targets[i]);
      if (got.ok()) {
        node.slot_cache().Remember(
            keys[i].hash, buckets[i].slot_offset[read.slot], read.word, start);
        results[i] = *got;
        st = absl::OkStatus();
        break;
      }
      if (got.status().code() == absl::StatusCode::kOutOfRange) {
        st = got.status();  // ours, and the buffer is too small
        break;
      }
      if (got.status().code() != absl::StatusCode::kNotFound) stale = true;
    }
    if (st.ok()) continue;
    if (stale && st.code() == absl::StatusCode::kNotFound) st = StaleRead();
    results[i] = IsRetryableRead(st)
                     ? GetOne(node, keys[i], targets[i], max_verify_retries)
                     : absl::StatusOr<size_t>(st);
  }
}

}  // namespace meshpool::client_internal
