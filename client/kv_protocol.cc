#include "client/kv_protocol.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/kv_lane_op.h"
#include "client/kv_retry.h"
#include "client/meshpool/client.h"
#include "common/common.h"

namespace meshpool::client_internal {
namespace {

// A PUT whose slab lease ran out before publishing re-allocates this often.
constexpr int kMaxAllocateRounds = 4;
static_assert(kMaxKeyBytes == format::kMaxKeyBytes,
              "the public key limit is the format's");

absl::Status NeverVerified(const KeyRef& key, NodeConnection& node,
                           int retries) {
  return absl::DataLossError(absl::StrCat(
      "value of key (", key.key.size(), " bytes) on ", node.Describe(),
      " failed verification ", retries + 1,
      " times; the node's memory may be corrupt: delete and put it again"));
}

// Reads the candidates of `key` found in `b` and verifies them.
absl::Status ReadCandidates(LaneOp& s, const KeyRef& key, const Buckets& b,
                            ReadStart start, ValueSink sink) {
  uint64_t total = 0;
  CandidatePlan plan = PlanCandidates(s, key, b, &total);
  if (plan.slots.empty()) return absl::NotFoundError("key not found");
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(total + 8));
  const uint64_t one = 1;
  std::memcpy(staging.data() + total, &one, 8);
  rdma::WorkRequests wrs;
  AddCandidateReads(s, b, plan, staging.data(), wrs);
  s.AddTouch(wrs, format::DecodeSlot(b.words[plan.slots.front()]).offset,
             staging.data() + total);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  if (ReadLeasePassed(s, start)) return ReadLeaseExpired();
  return VerifyCandidates(s, key, b, plan, staging.data(), start, sink);
}

// The one-round-trip GET: the key's buckets and the object its slot held
// when this client last saw it, in one post. The object counts only if the
// fresh buckets show that slot first among the key's candidates, still
// holding that word: objects are immutable and their memory is reused only
// a read lease after they are unlinked, so it is the current value (and it
// is verified as always). Otherwise *served stays false and `b` holds the
// fresh buckets for the usual second step.
absl::Status ReadWithHint(LaneOp& s, const KeyRef& key,
                          const SlotCache::Hint& hint, ReadStart start,
                          Buckets* b, ValueSink sink, bool* served) {
  *served = false;
  uint64_t length = s.ObjectReadLength(hint.word);
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            s.Staging(kBucketPairBytes + length + 8));
  const uint64_t one = 1;
  char* one_at = staging.data() + kBucketPairBytes + length;
  std::memcpy(one_at, &one, 8);
  rdma::WorkRequests wrs;
  s.AddBucketReads(wrs, key, staging.data(), b);
  s.AddRead(wrs, staging.data() + kBucketPairBytes,
            format::DecodeSlot(hint.word).offset, length);
  s.AddTouch(wrs, format::DecodeSlot(hint.word).offset, one_at);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  std::memcpy(b->words, staging.data(), kBucketPairBytes);
  int slot = -1;
  if (!HintHolds(key, *b, s.node().layout(), hint, &slot))
    return absl::OkStatus();
  if (ReadLeasePassed(s, start)) return ReadLeaseExpired();
  absl::string_view value;
  format::Verdict v = format::VerifyObject(
      absl::MakeConstSpan(staging.data() + kBucketPairBytes, length), key.key,
      key.hash, s.node().incarnation(), &value);
  if (v == format::Verdict::kOtherKey) return absl::OkStatus();
  if (v != format::Verdict::kValid) return StaleRead();
  // Outdated: the full path below finds it again and answers NotFound.
  if (OutdatedAt(key, staging.data() + kBucketPairBytes)) {
    return absl::OkStatus();
  }
  // Seen again: the hint stays young (a PUT after GETs publishes in one
  // round trip).
  s.node().slot_cache().Remember(key.hash, hint.slot_offset, hint.word, start);
  *served = true;
  return sink(value);
}

// The zero-copy GET step: header and key of each candidate first, then the
// value of the one that is `key` straight into direct.out and its digests
// into staging. StaleRead() when the view is stale.
absl::Status ReadCandidateDirect(LaneOp& s, const KeyRef& key, const Buckets& b,
                                 ReadStart start, const DirectBuffer& direct,
                                 ValueSink sink) {
  std::vector<format::ObjectHeader> headers;
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<int> mine,
                            s.FindKeySlots(key, b, &headers));
  if (mine.empty()) return absl::NotFoundError("key not found");
  const format::ObjectHeader& h = headers.front();
  if (Outdated(key, h)) return absl::NotFoundError("key not found");
  if (h.value_length > direct.out.size()) {
    return BufferTooSmall(h.value_length, direct.out.size());
  }
  s.node().slot_cache().Remember(key.hash, b.slot_offset[mine.front()],
                                 b.words[mine.front()], start);
  uint64_t offset = format::DecodeSlot(b.words[mine.front()]).offset;
  uint64_t digest_bytes = 8 * format::DigestCount(h.value_length);
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(digest_bytes));
  rdma::WorkRequests wrs;
  s.AddRead(wrs, direct.out.data(), offset + format::ValueOffset(h.key_length),
            h.value_length, direct.lkey);
  s.AddRead(wrs, staging.data(),
            offset + format::DigestOffset(h.key_length, h.value_length),
            digest_bytes);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  if (ReadLeasePassed(s, start)) return ReadLeaseExpired();
  absl::Span<const char> value(direct.out.data(), h.value_length);
  if (format::VerifyValue(h, value, staging) != format::Verdict::kValid) {
    return StaleRead();
  }
  return sink(absl::string_view(value.data(), value.size()));
}

}  // namespace

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) {
    return absl::InvalidArgumentError("empty key: keys are 1 to 4096 bytes");
  }
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes exceeds the limit of ",
                     kMaxKeyBytes, " bytes; hash long keys down first"));
  }
  return absl::OkStatus();
}

absl::Status CopyValueTo(absl::string_view value, absl::Span<char> out,
                         size_t* length) {
  if (value.size() > out.size())
    return BufferTooSmall(value.size(), out.size());
  // A zero-copy GET hands over a value already in `out`.
  if (!value.empty() && value.data() != out.data()) {
    std::memcpy(out.data(), value.data(), value.size());
  }
  *length = value.size();
  return absl::OkStatus();
}

absl::Status GetValue(NodeConnection& node, const KeyRef& key,
                      int max_verify_retries, ValueSink sink,
                      const DirectBuffer* direct) {
  MESHPOOL_ASSIGN_OR_RETURN(LaneOp s, StartLaneOp(node));
  bool slow = false;  // the last attempt outlived the read lease
  for (int attempt = 0; attempt <= max_verify_retries; ++attempt) {
    const ReadStart start = ReadStartNow();
    Buckets b;
    // First attempt: one round trip when the slot cache knows where the key
    // was (and the value is not one for the zero-copy path).
    std::optional<SlotCache::Hint> hint;
    if (attempt == 0) hint = node.slot_cache().Find(key.hash);
    if (hint.has_value() &&
        !(direct != nullptr &&
          format::DecodeSlot(hint->word).size_bound >= kZeroCopyMinBytes)) {
      bool served = false;
      absl::Status st = ReadWithHint(s, key, *hint, start, &b, sink, &served);
      if (served || !st.ok()) {
        if (!IsRetryableRead(st)) return st;
        slow = IsRetry(st, RetryReason::kReadLeasePassed);
        continue;
      }
    } else {
      MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    }
    uint64_t largest = 0;
    for (int c : b.Candidates(key, node.layout())) {
      largest = std::max(largest, format::DecodeSlot(b.words[c]).size_bound);
    }
    absl::Status st = direct != nullptr && largest >= kZeroCopyMinBytes
                          ? ReadCandidateDirect(s, key, b, start, *direct, sink)
                          : ReadCandidates(s, key, b, start, sink);
    if (!IsRetryableRead(st)) return st;
    slow = IsRetry(st, RetryReason::kReadLeasePassed);
  }
  if (slow) {
    return absl::UnavailableError(absl::StrCat(
        "GET from ", node.Describe(), " kept taking longer than the node's ",
        absl::FormatDuration(node.read_lease()),
        " read lease; the node or network is overloaded: retry"));
  }
  return NeverVerified(key, node, max_verify_retries);
}

namespace {

// Where a PUT's object goes and what publishes it.
struct PutTarget {
  uint64_t offset = 0;  // of the object in the pool
  uint64_t word = 0;    // the slot word that publishes it
  absl::Time deadline;  // publish before this (the slab lease)
};

// What a PUT adds to the post that writes its object: READs of the key's
// buckets and, when the slot cache has a hint, of the hinted object's header
// and key; and, when that hint is young, the fenced CAS that publishes the
// object into the hinted slot in the same round trip.
//
// Why the speculative CAS is safe: it executes after the object's WRITE and
// flush READ (fenced, rdma.h), so a reader that follows the new word finds
// the whole object. It replaces the slot only if the slot still holds the
// hinted word, which pointed at this key's object when the hint was taken
// (at `seen`). That word can point at another key's object again only after
// the memory behind it was unreferenced for the reclaimer's grace (the read
// lease plus kReclaimMargin, 500 ms) and reused; a CAS posted within a read
// lease of `seen` lands before that unless the network holds it back for
// longer than the margin (the same bound the slab deadline rests on). The
// header and bucket READs before it in the same post show after the fact
// what it replaced: SettleSpeculativePublish undoes a CAS that hit another
// key and completes one that hit a duplicate of this key.
class Prefetch {
 public:
  Prefetch(LaneOp& s, const KeyRef& key)
      : s_(s), key_(key), hint_(s.node().slot_cache().Find(key.hash)) {
    if (hint_.has_value()) {
      header_bytes_ = std::min<uint64_t>(format::ValueOffset(key.key.size()),
                                         s.ObjectReadLength(hint_->word));
    }
  }
  // Staging bytes to reserve; AddRequests needs them at an 8-aligned spot.
  uint64_t bytes() const { return 8 + kBucketPairBytes + header_bytes_; }
  // REQUIRES: `dst` is 8-byte aligned, holds bytes() and stays valid until
  // Finish(); the object's WRITE and flush READ are already in `wrs`.
  void AddRequests(char* dst, const PutTarget& target,
                   rdma::WorkRequests& wrs) {
    dst_ = dst;
    s_.AddBucketReads(wrs, key_, dst + 8, &out_.buckets);
    if (!hint_.has_value()) return;
    s_.AddRead(wrs, dst + 8 + kBucketPairBytes,
               format::DecodeSlot(hint_->word).offset, header_bytes_);
    const ReadStart now = ReadStartNow();
    if (now - hint_->seen >=
            absl::ToChronoNanoseconds(s_.node().read_lease()) ||
        absl::Now() > target.deadline) {
      return;  // too old to trust the word, or too late to publish
    }
    s_.AddCas(wrs, reinterpret_cast<uint64_t*>(dst), hint_->slot_offset,
              hint_->word, target.word);
    wrs.back().fence = true;
    out_.speculated = hint_;
    out_.posted_at = now;
  }
  // After the post completed: the buckets, whether the hinted object is
  // this key, and what the speculative CAS found.
  void Finish(PutPrefetch* out) {
    std::memcpy(out_.buckets.words, dst_ + 8, kBucketPairBytes);
    if (hint_.has_value() &&
        format::VerifyHeaderAndKey(
            absl::MakeConstSpan(dst_ + 8 + kBucketPairBytes, header_bytes_),
            key_.key, key_.hash, s_.node().incarnation(),
            nullptr) == format::Verdict::kValid) {
      out_.verified_hint = hint_;
    }
    std::memcpy(&out_.speculated_old, dst_, 8);
    *out = out_;
  }

 private:
  LaneOp& s_;
  const KeyRef& key_;
  std::optional<SlotCache::Hint> hint_;
  uint64_t header_bytes_ = 0;
  char* dst_ = nullptr;
  PutPrefetch out_;
};

uint64_t AlignUp8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

// Stages the whole object and WRITEs it, then READs its last word back on the
// same lane: the READ flushes the WRITE into node memory before anyone can
// reach the object through the index. The prefetch goes in the same post
// (into *p).
absl::Status WriteStagedObject(LaneOp& s, NodeConnection& node,
                               const KeyRef& key, absl::string_view value,
                               uint64_t sequence, const PutTarget& target,
                               uint64_t bytes, PutPrefetch* p) {
  Prefetch prefetch(s, key);
  const uint64_t prefetch_at = AlignUp8(bytes + 8);
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            s.Staging(prefetch_at + prefetch.bytes()));
  format::EncodeObject(staging.subspan(0, bytes), key.key, key.hash, value,
                       node.incarnation(), sequence, key.map_epoch);
  rdma::WorkRequests wrs;
  s.AddWrite(wrs, staging.data(), target.offset, bytes);
  s.AddRead(wrs, staging.data() + bytes, target.offset + bytes - 8, 8);
  prefetch.AddRequests(staging.data() + prefetch_at, target, wrs);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  prefetch.Finish(p);
  return absl::OkStatus();
}

// The same object, with the value gathered straight from registered caller
// memory: header+key and digests come from staging.
absl::Status WriteGatheredObject(LaneOp& s, NodeConnection& node,
                                 const KeyRef& key, absl::string_view value,
                                 uint32_t value_lkey, uint64_t sequence,
                                 const PutTarget& target, PutPrefetch* p) {
  uint64_t prefix = format::ValueOffset(key.key.size());
  uint64_t digests = 8 * format::DigestCount(value.size());
  Prefetch prefetch(s, key);
  const uint64_t prefetch_at = AlignUp8(prefix + digests + 8);
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            s.Staging(prefetch_at + prefetch.bytes()));
  uint64_t checksum =
      format::EncodeObjectPrefix(staging, key.key, key.hash, value.size(),
                                 node.incarnation(), sequence, key.map_epoch);
  format::EncodeDigests(value, checksum, staging.subspan(prefix, digests));
  uint64_t digest_offset =
      target.offset + format::DigestOffset(key.key.size(), value.size());
  rdma::WorkRequests wrs;
  s.AddWrite(wrs, staging.data(), target.offset, prefix);
  s.AddWrite(wrs, value.data(), target.offset + prefix, value.size(),
             value_lkey);
  s.AddWrite(wrs, staging.data() + prefix, digest_offset, digests);
  s.AddRead(wrs, staging.data() + prefix + digests, digest_offset + digests - 8,
            8);
  prefetch.AddRequests(staging.data() + prefetch_at, target, wrs);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  prefetch.Finish(p);
  return absl::OkStatus();
}

}  // namespace

absl::Status PutValue(NodeConnection& node, const KeyRef& key,
                      absl::string_view value, uint64_t sequence,
                      std::optional<uint32_t> value_lkey) {
  uint64_t bytes = format::ObjectBytes(key.key.size(), value.size());
  bool gather = value_lkey.has_value() && value.size() >= kZeroCopyMinBytes;
  MESHPOOL_ASSIGN_OR_RETURN(LaneOp s, StartLaneOp(node));
  for (int round = 0; round < kMaxAllocateRounds; ++round) {
    MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::Allocation a,
                              node.Allocate(bytes));
    const PutTarget target{
        a.offset(),
        format::EncodeSlot(format::Fingerprint(key.hash), bytes, a.offset()),
        a.publish_deadline()};
    PutPrefetch p;
    MESHPOOL_RETURN_IF_ERROR(
        gather ? WriteGatheredObject(s, node, key, value, *value_lkey, sequence,
                                     target, &p)
               : WriteStagedObject(s, node, key, value, sequence, target, bytes,
                                   &p));
    absl::Status st =
        p.speculated.has_value()
            ? SettleSpeculativePublish(s, key, target.word, target.deadline, p)
            : Publish(s, key, target.word, target.deadline, &p);
    if (!IsRetry(st, RetryReason::kAllocateAgain)) return st;
  }
  return absl::UnavailableError(
      "slab leases kept expiring before the value could be published; the "
      "node or network is too slow: retry");
}

absl::Status DeleteKey(NodeConnection& node, const KeyRef& key,
                       int max_verify_retries) {
  node.slot_cache().Forget(key.hash);
  MESHPOOL_ASSIGN_OR_RETURN(LaneOp s, StartLaneOp(node));
  bool removed = false;
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (IsRetry(mine.status(), RetryReason::kRereadIndex)) continue;
    if (!mine.ok()) return mine.status();
    if (mine->empty()) {
      return removed ? absl::OkStatus() : absl::NotFoundError("key not found");
    }
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              s.Staging(8 * mine->size()));
    rdma::WorkRequests wrs;
    for (size_t i = 0; i < mine->size(); ++i) {
      int slot = (*mine)[i];
      s.AddCas(wrs, reinterpret_cast<uint64_t*>(staging.data()) + i,
               b.slot_offset[slot], b.words[slot], 0);
    }
    MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
    for (size_t i = 0; i < mine->size(); ++i) {
      uint64_t old;
      std::memcpy(&old, staging.data() + 8 * i, 8);
      if (old == b.words[(*mine)[i]]) removed = true;
    }
  }
  return absl::UnavailableError("delete kept racing with writers; retry");
}

bool OutdatedAt(const KeyRef& key, const char* object) {
  format::ObjectHeader header;
  std::memcpy(&header, object, sizeof(header));
  return Outdated(key, header);
}

absl::StatusOr<bool> KeyExists(NodeConnection& node, const KeyRef& key,
                               int max_verify_retries) {
  MESHPOOL_ASSIGN_OR_RETURN(LaneOp s, StartLaneOp(node));
  for (int attempt = 0; attempt <= max_verify_retries; ++attempt) {
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    std::vector<format::ObjectHeader> headers;
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b, &headers);
    if (IsRetry(mine.status(), RetryReason::kRereadIndex)) continue;
    if (!mine.ok()) return mine.status();
    return !mine->empty() && !Outdated(key, headers.front());
  }
  return NeverVerified(key, node, max_verify_retries);
}

}  // namespace meshpool::client_internal
