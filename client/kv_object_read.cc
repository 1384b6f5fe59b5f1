#include "client/kv_object_read.h"

#include <algorithm>
#include <cstring>

#include "client/kv_retry.h"

namespace meshpool::client_internal {

ObjectRead PlanObjectRead(LaneOp& s, const KeyRef& key, int slot, uint64_t word,
                          const GetTarget& target, bool allow_direct,
                          uint64_t* cursor) {
  ObjectRead r;
  r.slot = slot;
  r.word = word;
  r.offset = format::DecodeSlot(word).offset;
  r.length = s.ObjectReadLength(word);
  uint64_t value_at = format::ValueOffset(key.key.size());
  // Over tcp and uc every READ is a request the node's responder handles:
  // below kZeroCopyMinBytes one staged READ and a copy beat three READs.
  const rdma::TransportKind kind = s.node().transport().kind();
  const bool small_over_tcp =
      (kind == rdma::TransportKind::kTcp || kind == rdma::TransportKind::kUc) &&
      target.out.size() < kZeroCopyMinBytes;
  r.direct = allow_direct && !small_over_tcp && target.lkey.has_value() &&
             !target.out.empty() && r.length > value_at;
  r.head_at = *cursor;
  if (!r.direct) {
    r.head_len = r.length;
    *cursor += r.length;
    return r;
  }
  r.head_len = value_at;
  r.out_len = std::min<uint64_t>(target.out.size(), r.length - value_at);
  r.tail_at = r.head_at + r.head_len;
  r.tail_len = r.length - value_at - r.out_len;
  *cursor += r.head_len + r.tail_len;
  return r;
}

void AddObjectReads(LaneOp& s, const ObjectRead& r, char* staging,
                    const GetTarget& target, rdma::WorkRequests& wrs) {
  s.AddRead(wrs, staging + r.head_at, r.offset, r.head_len);
  if (!r.direct) return;
  s.AddRead(wrs, target.out.data(), r.offset + r.head_len, r.out_len,
            *target.lkey);
  if (r.tail_len > 0) {
    s.AddRead(wrs, staging + r.tail_at, r.offset + r.head_len + r.out_len,
              r.tail_len);
  }
}

namespace {

// The direct case: the header and key are in staging, the value in the
// caller's buffer, the digests wherever the value's length puts them.
absl::StatusOr<size_t> FinishDirect(LaneOp& s, const KeyRef& key,
                                    const ObjectRead& r, const char* staging,
                                    const GetTarget& target) {
  format::ObjectHeader h;
  format::Verdict head = format::VerifyHeaderAndKey(
      absl::MakeConstSpan(staging + r.head_at, r.head_len), key.key, key.hash,
      s.node().incarnation(), &h);
  if (head == format::Verdict::kStale) return StaleRead();
  if (head != format::Verdict::kValid || Outdated(key, h)) {
    return absl::NotFoundError("not this key's current object");
  }
  if (h.value_length > target.out.size()) {
    return BufferTooSmall(h.value_length, target.out.size());
  }
  // The slot's bound covers the whole object; a header claiming more is
  // torn or reused.
  if (format::ObjectBytes(h.key_length, h.value_length) > r.length) {
    return Retry(RetryReason::kRereadIndex, "object larger than its slot says");
  }
  // Digest bytes, counted from the value's start, lie in out[0, out_len)
  // followed by tail[0, tail_len).
  uint64_t at = format::DigestOffset(h.key_length, h.value_length) - r.head_len;
  uint64_t n = 8 * format::DigestCount(h.value_length);
  std::vector<char> digests(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t p = at + i;
    digests[i] =
        p < r.out_len ? target.out[p] : staging[r.tail_at + p - r.out_len];
  }
  absl::Span<const char> value(target.out.data(), h.value_length);
  if (format::VerifyValue(h, value, digests) != format::Verdict::kValid) {
    return StaleRead();
  }
  return static_cast<size_t>(h.value_length);
}

}  // namespace

absl::StatusOr<size_t> FinishObjectRead(LaneOp& s, const KeyRef& key,
                                        const ObjectRead& r,
                                        const char* staging,
                                        const GetTarget& target) {
  if (r.direct) return FinishDirect(s, key, r, staging, target);
  absl::string_view value;
  format::Verdict v =
      format::VerifyObject(absl::MakeConstSpan(staging + r.head_at, r.head_len),
                           key.key, key.hash, s.node().incarnation(), &value);
  if (v == format::Verdict::kOtherKey) {
    return absl::NotFoundError("not this key's object");
  }
  if (v == format::Verdict::kShort) {
    return Retry(RetryReason::kRereadIndex,
                 "object shorter than its slot says");
  }
  if (v != format::Verdict::kValid) return StaleRead();
  if (OutdatedAt(key, staging + r.head_at)) {
    return absl::NotFoundError("not this key's current object");
  }
  size_t length = 0;
  MESHPOOL_RETURN_IF_ERROR(CopyValueTo(value, target.out, &length));
  return length;
}

}  // namespace meshpool::client_internal
