// Internal to client/: the pieces the single-key protocols (kv_protocol.cc)
// and the batched ones (kv_batch.cc) share — the bucket view of a key, one
// operation's use of a lane (LaneOp), candidate reads, and the publishing
// CAS loop. Not thread-safe: a LaneOp belongs to one operation.
#ifndef MESHPOOL_CLIENT_KV_LANE_OP_H_
#define MESHPOOL_CLIENT_KV_LANE_OP_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/kv_protocol.h"
#include "client/kv_retry.h"
#include "client/node_connection.h"
#include "client/slot_cache.h"
#include "common/common.h"
#include "format/layout.h"
#include "rdma/rdma.h"

namespace meshpool::client_internal {

inline constexpr size_t kSlotsPerKey = 2 * format::kSlotsPerBucket;
inline constexpr size_t kBucketPairBytes = 2 * format::kBucketBytes;
// A CAS that keeps losing to other writers gives up after this many rounds.
inline constexpr int kMaxPublishRounds = 64;

// Slot indices into a key's Buckets: never more than kSlotsPerKey, so kept
// inline (no allocation per operation).
using SlotList = absl::InlinedVector<int, kSlotsPerKey>;

// The index words a key may live in, and where each slot is.
struct Buckets {
  uint64_t words[kSlotsPerKey];
  uint64_t slot_offset[kSlotsPerKey];

  // Slots whose fingerprint matches and whose object lies in the pool.
  SlotList Candidates(const KeyRef& key,
                      const format::PoolLayout& layout) const {
    SlotList out;
    uint8_t fp = format::Fingerprint(key.hash);
    for (size_t i = 0; i < kSlotsPerKey; ++i) {
      if (words[i] == 0) continue;
      format::Slot slot = format::DecodeSlot(words[i]);
      if (slot.fingerprint != fp) continue;
      if (slot.offset < layout.slab_area_offset ||
          slot.offset + format::kObjectHeaderBytes > layout.pool_bytes) {
        continue;  // not an object pointer; never ours
      }
      out.push_back(static_cast<int>(i));
    }
    return out;
  }
};

// One operation's use of one lane on one node.
class LaneOp {
 public:
  LaneOp(NodeConnection& node, NodeConnection::LaneLease lane)
      : node_(node), lane_(std::move(lane)) {}

  NodeConnection& node() { return node_; }
  absl::StatusOr<absl::Span<char>> Staging(size_t bytes) {
    MESHPOOL_RETURN_IF_ERROR(CheckLane());
    return lane_->Staging(bytes);
  }

  // One-sided requests against the node's pool; `pool_offset` is from the
  // pool start. Transfers over the transport limit are split.
  // `lkey` names the registration holding the local memory; by default the
  // lane's staging buffer.
  void AddRead(rdma::WorkRequests& wrs, char* dst, uint64_t pool_offset,
               uint64_t length, std::optional<uint32_t> lkey = std::nullopt) {
    AddTransfer(wrs, rdma::Opcode::kRead, dst, pool_offset, length,
                lkey.value_or(this->lkey()));
  }
  void AddWrite(rdma::WorkRequests& wrs, const char* src, uint64_t pool_offset,
                uint64_t length, std::optional<uint32_t> lkey = std::nullopt) {
    AddTransfer(wrs, rdma::Opcode::kWrite, const_cast<char*>(src), pool_offset,
                length, lkey.value_or(this->lkey()));
  }
  void AddCas(rdma::WorkRequests& wrs, uint64_t* old_value,
              uint64_t pool_offset, uint64_t expected, uint64_t desired) {
    rdma::WorkRequest wr;
    wr.wr_id = wrs.size();
    wr.opcode = rdma::Opcode::kCompareSwap;
    wr.local = old_value;
    wr.length = rdma::kAtomicBytes;
    wr.lkey = lkey();
    wr.remote_addr = node_.pool_addr() + pool_offset;
    wr.rkey = node_.pool_rkey();
    wr.compare_add = expected;
    wr.swap = desired;
    wrs.push_back(wr);
  }

  // Posts `wrs` (in chunks of kMaxBatch) and waits for every completion.
  // Any failure discards the lane and reads as Unavailable.
  absl::Status Run(absl::Span<const rdma::WorkRequest> wrs) {
    MESHPOOL_RETURN_IF_ERROR(CheckLane());
    absl::InlinedVector<rdma::Completion, rdma::kInlineWorkRequests> done(
        std::min(wrs.size(), rdma::kMaxBatch));
    for (size_t i = 0; i < wrs.size(); i += rdma::kMaxBatch) {
      auto chunk = wrs.subspan(i, rdma::kMaxBatch);
      absl::Status s = rdma::PostAndWait(
          lane_->endpoint(), chunk, absl::MakeSpan(done), node_.op_timeout());
      if (!s.ok()) {
        lane_.Discard();
        return absl::UnavailableError(absl::StrCat(
            node_.Describe(), " failed mid-operation: ", s.message(),
            "; it may have died: retry once the cluster map updates"));
      }
    }
    return absl::OkStatus();
  }

  // Adds a WRITE of the nonzero word at `one` (in staging) to the slab
  // table's "touched" word of the slab holding the object at
  // `object_offset`, unless this client touched that slab lately: what
  // earns the slab the evictor's second chance.
  void AddTouch(rdma::WorkRequests& wrs, uint64_t object_offset, char* one) {
    const format::PoolLayout& layout = node_.layout();
    if (layout.slab_meta_offset == 0) return;
    uint64_t slab = layout.slab_of(object_offset);
    if (slab >= layout.slab_count || !node_.ShouldTouch(slab)) return;
    AddWrite(wrs, one, layout.slab_meta(slab) + 8, 8);
  }

  // Reads the key's two buckets.
  absl::Status ReadBuckets(const KeyRef& key, Buckets* b) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              Staging(kBucketPairBytes));
    rdma::WorkRequests wrs;
    AddBucketReads(wrs, key, staging.data(), b);
    MESHPOOL_RETURN_IF_ERROR(Run(wrs));
    std::memcpy(b->words, staging.data(), kBucketPairBytes);
    return absl::OkStatus();
  }
  void AddBucketReads(rdma::WorkRequests& wrs, const KeyRef& key, char* dst,
                      Buckets* b) {
    const format::PoolLayout& layout = node_.layout();
    format::BucketPair pair = format::BucketsFor(key.hash, layout.bucket_count);
    uint64_t first = layout.bucket_offset(pair.first);
    uint64_t second = layout.bucket_offset(pair.second);
    AddRead(wrs, dst, first, format::kBucketBytes);
    AddRead(wrs, dst + format::kBucketBytes, second, format::kBucketBytes);
    for (size_t i = 0; i < format::kSlotsPerBucket; ++i) {
      b->slot_offset[i] = first + i * format::kSlotBytes;
      b->slot_offset[format::kSlotsPerBucket + i] =
          second + i * format::kSlotBytes;
    }
  }

  // Length of a READ fetching an object through `word`, clipped to the pool
  // and to a slab (no object is larger; a corrupt word cannot make the
  // client fetch or stage more).
  uint64_t ObjectReadLength(uint64_t word) const {
    format::Slot slot = format::DecodeSlot(word);
    const format::PoolLayout& layout = node_.layout();
    return std::min(
        {slot.size_bound, layout.slab_bytes, layout.pool_bytes - slot.offset});
  }

  // The candidate slots that hold `key` (checked by header and key).
  // Retry(kRereadIndex) when a candidate is stale: so is the bucket view.
  absl::StatusOr<std::vector<int>> FindKeySlots(
      const KeyRef& key, const Buckets& b,
      std::vector<format::ObjectHeader>* headers = nullptr) {
    SlotList candidates = b.Candidates(key, node_.layout());
    std::vector<int> mine;
    if (candidates.empty()) return mine;
    uint64_t want = format::ValueOffset(key.key.size());
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              Staging(want * candidates.size()));
    rdma::WorkRequests wrs;
    std::vector<uint64_t> lengths;
    for (size_t c = 0; c < candidates.size(); ++c) {
      lengths.push_back(
          std::min(want, ObjectReadLength(b.words[candidates[c]])));
      AddRead(wrs, staging.data() + c * want,
              format::DecodeSlot(b.words[candidates[c]]).offset, lengths[c]);
    }
    MESHPOOL_RETURN_IF_ERROR(Run(wrs));
    for (size_t c = 0; c < candidates.size(); ++c) {
      format::ObjectHeader header;
      format::Verdict v = format::VerifyHeaderAndKey(
          absl::MakeConstSpan(staging.data() + c * want, lengths[c]), key.key,
          key.hash, node_.incarnation(), &header);
      if (v == format::Verdict::kValid) {
        mine.push_back(candidates[c]);
        if (headers != nullptr) headers->push_back(header);
      } else if (v == format::Verdict::kStale) {
        return StaleRead();
      }  // kOtherKey, or kShort (clipped by the pool's end): not this key.
    }
    return mine;
  }

 private:
  // After a transport failure the lane is gone; later steps of the same
  // operation (e.g. the rest of a batch) fail the same way.
  uint32_t lkey() const { return lane_.valid() ? lane_->staging_lkey() : 0; }
  absl::Status CheckLane() const {
    if (lane_.valid()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        node_.Describe(), " failed earlier in this operation; retry"));
  }

  void AddTransfer(rdma::WorkRequests& wrs, rdma::Opcode op, char* local,
                   uint64_t pool_offset, uint64_t length, uint32_t lkey) {
    while (length > 0) {
      uint32_t n = static_cast<uint32_t>(
          std::min<uint64_t>(length, rdma::kMaxTransferBytes));
      rdma::WorkRequest wr;
      wr.wr_id = wrs.size();
      wr.opcode = op;
      wr.local = local;
      wr.length = n;
      wr.lkey = lkey;
      wr.remote_addr = node_.pool_addr() + pool_offset;
      wr.rkey = node_.pool_rkey();
      wrs.push_back(wr);
      local += n;
      pool_offset += n;
      length -= n;
    }
  }

  NodeConnection& node_;
  NodeConnection::LaneLease lane_;
};

absl::StatusOr<LaneOp> StartLaneOp(NodeConnection& node);
// OutOfRange naming both sizes.
absl::Status BufferTooSmall(uint64_t value_bytes, size_t buffer_bytes);

// Where each candidate object of one key lands in a staging buffer.
struct CandidatePlan {
  SlotList slots;
  absl::InlinedVector<uint64_t, kSlotsPerKey> offsets;  // into staging
  absl::InlinedVector<uint64_t, kSlotsPerKey> lengths;
};

// Plans READs of every candidate of `key` into staging from `*cursor` on.
CandidatePlan PlanCandidates(LaneOp& s, const KeyRef& key, const Buckets& b,
                             uint64_t* cursor);
void AddCandidateReads(LaneOp& s, const Buckets& b, const CandidatePlan& plan,
                       char* staging, rdma::WorkRequests& wrs);
// When a read began, on a monotonic clock: a wall-clock step backwards
// must never make a read that outlived its lease look young (and
// steady_clock is a third of absl::Now's cost per read).
using ReadStart = std::chrono::steady_clock::time_point;
static_assert(std::is_same_v<ReadStart, SlotCache::Clock::time_point>);
inline ReadStart ReadStartNow() { return std::chrono::steady_clock::now(); }
// Hands the first candidate that verifies to `sink` (and remembers its slot
// in the node's SlotCache, as seen at `start`, before the bucket READ);
// NotFound when none is the key; StaleRead() when one is stale (so is the
// bucket view).
absl::Status VerifyCandidates(LaneOp& s, const KeyRef& key, const Buckets& b,
                              const CandidatePlan& plan, const char* staging,
                              ReadStart start, ValueSink sink);
// Past the read lease, the slab we read from may have been reclaimed and
// reused: what we fetched could be stale even if it verifies (the step then
// returns ReadLeaseExpired()).
bool ReadLeasePassed(LaneOp& s, ReadStart start);
// Phase one of every batch: all keys' buckets in one post.
absl::Status ReadAllBuckets(LaneOp& s, absl::Span<const KeyRef> keys,
                            std::vector<Buckets>* buckets);
// True when the first candidate slot in `b` is the one `hint` names, still
// holding the word it held when this client last verified or published the
// key there: then that slot holds the key, with no header to re-read.
bool HintHolds(const KeyRef& key, const Buckets& b,
               const format::PoolLayout& layout,
               const std::optional<SlotCache::Hint>& hint, int* slot);
// What a PUT read in the round trip that wrote its object: the key's
// buckets and, when the slot cache had a hint, the header and key of the
// hinted object — so the first publish round needs no further READ.
struct PutPrefetch {
  Buckets buckets;
  // Set only when the hinted object's header and key verified as this key:
  // a slot word alone does not name a key (an offset is reused after
  // reclamation, and fingerprints collide), so an unverified hint must never
  // pick the slot a PUT replaces.
  std::optional<SlotCache::Hint> verified_hint;
  // Set when the same post also carried the fenced CAS that published the
  // object into the hinted slot (the one-round-trip PUT, kv_protocol.cc):
  // the hint it used, the word that slot held when the CAS ran, and a time
  // before the post went out.
  std::optional<SlotCache::Hint> speculated;
  uint64_t speculated_old = 0;
  ReadStart posted_at;
};
// Makes the key's slot point at `word` with one CAS (retrying lost races),
// and remembers it in the node's SlotCache. `prefetched`, when given, serves
// the first round instead of READs. Retry(kAllocateAgain) when `deadline`
// passed before publishing; ResourceExhausted when both buckets are full.
absl::Status Publish(LaneOp& s, const KeyRef& key, uint64_t word,
                     absl::Time deadline,
                     const PutPrefetch* prefetched = nullptr);
// Finishes a PUT whose post carried the speculative publish (p.speculated
// set): OK at once when the CAS landed on the key's first slot, as the
// header and bucket READs before it show; otherwise it undoes a CAS that
// landed on another key's slot, moves a copy that landed behind the key's
// first slot there, or publishes normally when the CAS found the slot
// changed. Errors as Publish, and Unavailable (retry) when the object is
// already in a slot but the deadline passed before it could be made the
// key's first: it must not be allocated and published again.
absl::Status SettleSpeculativePublish(LaneOp& s, const KeyRef& key,
                                      uint64_t word, absl::Time deadline,
                                      const PutPrefetch& p);
// After an insert raced another writer's insert of the same key: clears
// every slot holding the key but the first in bucket order (best effort).
void RemoveDuplicateSlots(LaneOp& s, const KeyRef& key);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_KV_LANE_OP_H_
