// The batched PUT on one node: for a batch of new keys (the KV-cache case)
// two posts, one doorbell each, whatever the batch size.
//
//   post 1: every object (a value in registered memory is written straight
//           from it: header+key, value, digests), one flush READ, then the
//           buckets of every key and the header of each hinted object.
//   (post 2: the headers of the candidates of keys already present whose
//           hint did not hold — only when there are such keys.)
//   post 3: every key's publishing CAS, and after the CASes of new keys
//           their buckets again: a duplicate left by a racing insert of the
//           same key is cleared (the single-key rule: keep the first slot).
//
// A key whose CAS loses a race takes the single-key publish loop.
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/kv_lane_op.h"
#include "client/kv_protocol.h"
#include "client/kv_retry.h"

namespace meshpool::client_internal {
namespace {

struct Item {
  NodeConnection::Allocation alloc;
  bool live = false;      // allocated and written in post 1
  bool gather = false;    // value written straight from registered memory
  uint64_t bytes = 0;     // object size
  uint64_t word = 0;      // the slot word publishing it
  uint64_t stage_at = 0;  // staged object, or header+key then digests
  uint64_t buckets_at = 0;
  std::optional<SlotCache::Hint> hint;
  uint64_t hint_at = 0;
  uint64_t hint_len = 0;
  Buckets b;
  // The publish decision.
  int target = -1;
  bool insert = false;
  std::vector<int> mine;  // slots already holding the key
  bool fallback = false;  // publish through the single-key loop
};

// Writes item i's object (staged or gathered) into its allocation.
void AddObjectWrites(LaneOp& s, const NodeConnection& node, const KeyRef& key,
                     const PutSource& src, uint64_t sequence, Item& it,
                     char* base, rdma::WorkRequests& wrs, uint64_t* last_byte) {
  uint64_t at = it.alloc.offset();
  if (!it.gather) {
    format::EncodeObject(absl::MakeSpan(base + it.stage_at, it.bytes), key.key,
                         key.hash, src.value, node.incarnation(), sequence,
                         key.map_epoch);
    s.AddWrite(wrs, base + it.stage_at, at, it.bytes);
    *last_byte = at + it.bytes;
    return;
  }
  uint64_t prefix = format::ValueOffset(key.key.size());
  uint64_t digests = 8 * format::DigestCount(src.value.size());
  uint64_t checksum = format::EncodeObjectPrefix(
      absl::MakeSpan(base + it.stage_at, prefix), key.key, key.hash,
      src.value.size(), node.incarnation(), sequence, key.map_epoch);
  format::EncodeDigests(src.value, checksum,
                        absl::MakeSpan(base + it.stage_at + prefix, digests));
  uint64_t digest_at =
      at + format::DigestOffset(key.key.size(), src.value.size());
  s.AddWrite(wrs, base + it.stage_at, at, prefix);
  s.AddWrite(wrs, src.value.data(), at + prefix, src.value.size(), *src.lkey);
  s.AddWrite(wrs, base + it.stage_at + prefix, digest_at, digests);
  *last_byte = digest_at + digests;
}

// Picks the first empty slot of the key's buckets no other key of this
// batch claimed.
int PickEmpty(const Buckets& b, absl::flat_hash_set<uint64_t>& claimed) {
  for (size_t i = 0; i < kSlotsPerKey; ++i) {
    if (b.words[i] == 0 && claimed.insert(b.slot_offset[i]).second) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

absl::Status BucketsFull(NodeConnection& node) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "both index buckets of this key on ", node.Describe(),
      " are full; delete keys, add nodes, or restart the node with more "
      "index buckets"));
}

// One batch's journey through the three posts, one method per step. A
// step that fails the whole post marks every live key with the failure and
// returns false; the caller stops there.
class BatchPut {
 public:
  BatchPut(LaneOp& s, NodeConnection& node, absl::Span<const KeyRef> keys,
           absl::Span<const PutSource> sources, uint64_t first_sequence,
           absl::Span<absl::Status> results)
      : s_(s),
        node_(node),
        keys_(keys),
        sources_(sources),
        first_sequence_(first_sequence),
        results_(results),
        items_(keys.size()) {}

  // Space for every object, and where each piece lands in staging.
  void Allocate();
  // Post 1: the objects, one flush READ, every key's buckets and hinted
  // headers.
  bool WriteObjects();
  // Each key's target slot from what post 1 read; keys whose candidates
  // need their headers read go to post 2.
  void ChooseTargets();
  // Post 2 (rare for a KV cache: keys already present).
  bool ProbeCandidates();
  // Post 3: every CAS, then new keys' buckets again.
  bool CasAll();
  // Per key: published (clearing a duplicate a racing insert left), or
  // through the single-key publish loop.
  void Finish();

 private:
  void FailLive(const absl::Status& st) {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (items_[i].live) results_[i] = st;
    }
  }

  LaneOp& s_;
  NodeConnection& node_;
  const absl::Span<const KeyRef> keys_;
  const absl::Span<const PutSource> sources_;
  const uint64_t first_sequence_;
  const absl::Span<absl::Status> results_;
  std::vector<Item> items_;
  uint64_t flush_at_ = 0;  // the flush READ's 8 bytes in post 1 staging
  uint64_t staging_bytes_ = 0;
  char* base_ = nullptr;                     // the current post's staging
  absl::flat_hash_set<uint64_t> claimed_;    // slots taken by this batch
  std::vector<size_t> probe_;                // keys for post 2
  std::vector<uint64_t> old_at_, again_at_;  // post 3 staging, per key
  ReadStart cas_posted_at_;                  // before post 3 went out
};

void BatchPut::Allocate() {
  // A node that is full or unreachable fails every later key the same way:
  // asking again per key would wait again.
  absl::Status node_failure;
  uint64_t cursor = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    it.bytes =
        format::ObjectBytes(keys_[i].key.size(), sources_[i].value.size());
    if (!node_failure.ok()) {
      results_[i] = node_failure;
      continue;
    }
    absl::StatusOr<NodeConnection::Allocation> a = node_.Allocate(it.bytes);
    if (!a.ok()) {
      results_[i] = a.status();
      if (a.status().code() != absl::StatusCode::kInvalidArgument) {
        node_failure = a.status();
      }
      continue;
    }
    it.alloc = *std::move(a);
    it.live = true;
    it.gather = sources_[i].lkey.has_value() && !sources_[i].value.empty();
    it.word = format::EncodeSlot(format::Fingerprint(keys_[i].hash), it.bytes,
                                 it.alloc.offset());
    it.stage_at = cursor;
    cursor += it.gather ? format::ValueOffset(keys_[i].key.size()) +
                              8 * format::DigestCount(sources_[i].value.size())
                        : it.bytes;
  }
  flush_at_ = cursor;
  cursor += 8;
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live) continue;
    it.buckets_at = cursor;
    cursor += kBucketPairBytes;
    it.hint = node_.slot_cache().Find(keys_[i].hash);
    if (it.hint.has_value()) {
      it.hint_at = cursor;
      it.hint_len = std::min<uint64_t>(format::ValueOffset(keys_[i].key.size()),
                                       s_.ObjectReadLength(it.hint->word));
      cursor += it.hint_len;
    }
  }
  staging_bytes_ = cursor;
}

bool BatchPut::WriteObjects() {
  absl::StatusOr<absl::Span<char>> staging = s_.Staging(staging_bytes_);
  if (!staging.ok()) {
    FailLive(staging.status());
    return false;
  }
  base_ = staging->data();
  rdma::WorkRequests wrs;
  uint64_t last_byte = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (!items_[i].live) continue;
    AddObjectWrites(s_, node_, keys_[i], sources_[i], first_sequence_ + i,
                    items_[i], base_, wrs, &last_byte);
  }
  if (wrs.empty()) return false;  // no key allocated: results are set
  // On one endpoint a READ observes every earlier WRITE: one flush for all.
  s_.AddRead(wrs, base_ + flush_at_, last_byte - 8, 8);
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live) continue;
    s_.AddBucketReads(wrs, keys_[i], base_ + it.buckets_at, &it.b);
    if (it.hint.has_value()) {
      s_.AddRead(wrs, base_ + it.hint_at,
                 format::DecodeSlot(it.hint->word).offset, it.hint_len);
    }
  }
  if (absl::Status st = s_.Run(wrs); !st.ok()) {
    FailLive(st);
    return false;
  }
  return true;
}

void BatchPut::ChooseTargets() {
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live) continue;
    std::memcpy(it.b.words, base_ + it.buckets_at, kBucketPairBytes);
    std::optional<SlotCache::Hint> verified;
    if (it.hint.has_value() &&
        format::VerifyHeaderAndKey(
            absl::MakeConstSpan(base_ + it.hint_at, it.hint_len), keys_[i].key,
            keys_[i].hash, node_.incarnation()) == format::Verdict::kValid) {
      verified = it.hint;
    }
    int slot = -1;
    if (HintHolds(keys_[i], it.b, node_.layout(), verified, &slot)) {
      it.target = slot;
      it.mine = {slot};
    } else if (!it.b.Candidates(keys_[i], node_.layout()).empty()) {
      probe_.push_back(i);
    } else {
      it.insert = true;
      it.target = PickEmpty(it.b, claimed_);
    }
  }
}

bool BatchPut::ProbeCandidates() {
  for (size_t i : probe_) {
    Item& it = items_[i];
    absl::StatusOr<std::vector<int>> mine = s_.FindKeySlots(keys_[i], it.b);
    if (!mine.ok() && !IsRetry(mine.status(), RetryReason::kRereadIndex)) {
      FailLive(mine.status());
      return false;
    }
    if (!mine.ok()) {
      it.fallback = true;  // stale: the single-key loop re-reads
    } else if (!mine->empty()) {
      it.mine = *mine;
      it.target = mine->front();
    } else {
      it.insert = true;
      it.target = PickEmpty(it.b, claimed_);
    }
  }
  return true;
}

bool BatchPut::CasAll() {
  size_t cas_count = 0, inserts = 0;
  for (const Item& it : items_) {
    cas_count += it.live && it.target >= 0 && !it.fallback;
    inserts += it.live && it.target >= 0 && !it.fallback && it.insert;
  }
  absl::StatusOr<absl::Span<char>> staging =
      s_.Staging(8 * cas_count + kBucketPairBytes * inserts);
  if (!staging.ok()) {
    FailLive(staging.status());
    return false;
  }
  base_ = staging->data();
  rdma::WorkRequests wrs;
  old_at_.assign(items_.size(), 0);
  again_at_.assign(items_.size(), 0);
  uint64_t cas_at = 0;
  absl::Time now = absl::Now();
  cas_posted_at_ = ReadStartNow();
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live || it.fallback) continue;
    if (it.target < 0) {
      results_[i] = BucketsFull(node_);
      it.live = false;
      continue;
    }
    // Checked as close to the CAS as the client can (see Publish).
    if (now > it.alloc.publish_deadline()) {
      it.fallback = true;
      continue;
    }
    old_at_[i] = cas_at;
    s_.AddCas(wrs, reinterpret_cast<uint64_t*>(base_ + cas_at),
              it.b.slot_offset[it.target], it.b.words[it.target], it.word);
    cas_at += 8;
  }
  uint64_t again_at = 8 * cas_count;
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live || it.fallback || !it.insert) continue;
    again_at_[i] = again_at;
    Buckets unused;
    s_.AddBucketReads(wrs, keys_[i], base_ + again_at, &unused);
    again_at += kBucketPairBytes;
  }
  if (wrs.empty()) return true;
  if (absl::Status st = s_.Run(wrs); !st.ok()) {
    FailLive(st);
    return false;
  }
  return true;
}

void BatchPut::Finish() {
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (!it.live) continue;
    bool published = false;
    if (!it.fallback) {
      uint64_t old;
      std::memcpy(&old, base_ + old_at_[i], 8);
      published = old == it.b.words[it.target];
    }
    if (published) {
      node_.slot_cache().Remember(keys_[i].hash, it.b.slot_offset[it.target],
                                  it.word, cas_posted_at_);
      bool maybe_dup = it.mine.size() > 1;
      if (it.insert) {
        Buckets fresh = it.b;
        std::memcpy(fresh.words, base_ + again_at_[i], kBucketPairBytes);
        maybe_dup = fresh.Candidates(keys_[i], node_.layout()).size() > 1;
      }
      if (maybe_dup) RemoveDuplicateSlots(s_, keys_[i]);
      results_[i] = absl::OkStatus();
    } else {
      results_[i] = Publish(s_, keys_[i], it.word, it.alloc.publish_deadline());
      if (IsRetry(results_[i], RetryReason::kAllocateAgain)) {
        it.alloc = {};
        results_[i] = PutValue(node_, keys_[i], sources_[i].value,
                               first_sequence_ + i, sources_[i].lkey);
      }
    }
    it.alloc = {};  // published or abandoned: the slab may be released
  }
}

}  // namespace

void BatchPutValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const PutSource> sources,
                    uint64_t first_sequence, absl::Span<absl::Status> results) {
  absl::StatusOr<LaneOp> op = StartLaneOp(node);
  if (!op.ok()) {
    for (auto& r : results) r = op.status();
    return;
  }
  BatchPut put(*op, node, keys, sources, first_sequence, results);
  put.Allocate();
  if (!put.WriteObjects()) return;
  put.ChooseTargets();
  if (!put.ProbeCandidates() || !put.CasAll()) return;
  put.Finish();
}

}  // namespace meshpool::client_internal
