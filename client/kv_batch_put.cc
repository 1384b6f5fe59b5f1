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
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/kv_lane_op.h"
#include "client/kv_protocol.h"

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
                     char* base, std::vector<rdma::WorkRequest>& wrs,
                     uint64_t* last_byte) {
  uint64_t at = it.alloc.offset();
  if (!it.gather) {
    format::EncodeObject(absl::MakeSpan(base + it.stage_at, it.bytes), key.key,
                         src.value, node.incarnation(), sequence);
    s.AddWrite(wrs, base + it.stage_at, at, it.bytes);
    *last_byte = at + it.bytes;
    return;
  }
  uint64_t prefix = format::ValueOffset(key.key.size());
  uint64_t digests = 8 * format::DigestCount(src.value.size());
  uint64_t checksum = format::EncodeObjectPrefix(
      absl::MakeSpan(base + it.stage_at, prefix), key.key, src.value.size(),
      node.incarnation(), sequence);
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

}  // namespace

void BatchPutValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const PutSource> sources,
                    uint64_t first_sequence, absl::Span<absl::Status> results) {
  const size_t n = keys.size();
  absl::StatusOr<LaneOp> op = StartLaneOp(node);
  if (!op.ok()) {
    for (auto& r : results) r = op.status();
    return;
  }
  LaneOp& s = *op;
  std::vector<Item> items(n);
  // Space for every object. A node that is full or unreachable fails every
  // later key the same way: asking again per key would wait again.
  absl::Status node_failure;
  uint64_t cursor = 0;
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    it.bytes = format::ObjectBytes(keys[i].key.size(), sources[i].value.size());
    if (!node_failure.ok()) {
      results[i] = node_failure;
      continue;
    }
    absl::StatusOr<NodeConnection::Allocation> a = node.Allocate(it.bytes);
    if (!a.ok()) {
      results[i] = a.status();
      if (a.status().code() != absl::StatusCode::kInvalidArgument) {
        node_failure = a.status();
      }
      continue;
    }
    it.alloc = *std::move(a);
    it.live = true;
    it.gather = sources[i].lkey.has_value() && !sources[i].value.empty();
    it.word = format::EncodeSlot(format::Fingerprint(keys[i].hash), it.bytes,
                                 it.alloc.offset());
    it.stage_at = cursor;
    cursor += it.gather ? format::ValueOffset(keys[i].key.size()) +
                              8 * format::DigestCount(sources[i].value.size())
                        : it.bytes;
  }
  const uint64_t flush_at = cursor;
  cursor += 8;
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live) continue;
    it.buckets_at = cursor;
    cursor += kBucketPairBytes;
    it.hint = node.slot_cache().Find(keys[i].hash);
    if (it.hint.has_value()) {
      it.hint_at = cursor;
      it.hint_len = std::min<uint64_t>(format::ValueOffset(keys[i].key.size()),
                                       s.ObjectReadLength(it.hint->word));
      cursor += it.hint_len;
    }
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(cursor);
  auto fail_live = [&](const absl::Status& st) {
    for (size_t i = 0; i < n; ++i) {
      if (items[i].live) results[i] = st;
    }
  };
  if (!staging.ok()) return fail_live(staging.status());
  char* base = staging->data();

  // Post 1.
  std::vector<rdma::WorkRequest> wrs;
  uint64_t last_byte = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!items[i].live) continue;
    AddObjectWrites(s, node, keys[i], sources[i], first_sequence + i, items[i],
                    base, wrs, &last_byte);
  }
  if (wrs.empty()) return;
  // On one endpoint a READ observes every earlier WRITE: one flush for all.
  s.AddRead(wrs, base + flush_at, last_byte - 8, 8);
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live) continue;
    s.AddBucketReads(wrs, keys[i], base + it.buckets_at, &it.b);
    if (it.hint.has_value()) {
      s.AddRead(wrs, base + it.hint_at,
                format::DecodeSlot(it.hint->word).offset, it.hint_len);
    }
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_live(st);

  // Decide each key's target slot; collect keys whose candidates need a
  // header read.
  absl::flat_hash_set<uint64_t> claimed;
  std::vector<size_t> probe;
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live) continue;
    std::memcpy(it.b.words, base + it.buckets_at, kBucketPairBytes);
    std::optional<SlotCache::Hint> verified;
    if (it.hint.has_value() &&
        format::VerifyHeaderAndKey(
            absl::MakeConstSpan(base + it.hint_at, it.hint_len), keys[i].key,
            keys[i].hash, node.incarnation())
            .ok()) {
      verified = it.hint;
    }
    int slot = -1;
    if (HintHolds(keys[i], it.b, node.layout(), verified, &slot)) {
      it.target = slot;
      it.mine = {slot};
    } else if (!it.b.Candidates(keys[i], node.layout()).empty()) {
      probe.push_back(i);
    } else {
      it.insert = true;
      it.target = PickEmpty(it.b, claimed);
    }
  }
  // Post 2 (rare for a KV cache: keys already present): candidates' headers.
  for (size_t i : probe) {
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(keys[i], items[i].b);
    if (!mine.ok() && mine.status().code() != absl::StatusCode::kAborted) {
      return fail_live(mine.status());
    }
    Item& it = items[i];
    if (!mine.ok()) {
      it.fallback = true;  // torn: the single-key loop re-reads
    } else if (!mine->empty()) {
      it.mine = *mine;
      it.target = mine->front();
    } else {
      it.insert = true;
      it.target = PickEmpty(it.b, claimed);
    }
  }

  // Post 3: every CAS, then new keys' buckets again.
  uint64_t cas_at = 0, again_at = 0;
  size_t cas_count = 0, inserts = 0;
  for (const Item& it : items) {
    cas_count += it.live && it.target >= 0 && !it.fallback;
    inserts += it.live && it.target >= 0 && !it.fallback && it.insert;
  }
  staging = s.Staging(8 * cas_count + kBucketPairBytes * inserts);
  if (!staging.ok()) return fail_live(staging.status());
  base = staging->data();
  again_at = 8 * cas_count;
  wrs.clear();
  std::vector<uint64_t> old_at(n), again(n);
  absl::Time now = absl::Now();
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live || it.fallback) continue;
    if (it.target < 0) {
      results[i] = BucketsFull(node);
      it.live = false;
      continue;
    }
    // Checked as close to the CAS as the client can (see Publish).
    if (now > it.alloc.publish_deadline()) {
      it.fallback = true;
      continue;
    }
    old_at[i] = cas_at;
    s.AddCas(wrs, reinterpret_cast<uint64_t*>(base + cas_at),
             it.b.slot_offset[it.target], it.b.words[it.target], it.word);
    cas_at += 8;
  }
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live || it.fallback || !it.insert) continue;
    again[i] = again_at;
    Buckets unused;
    s.AddBucketReads(wrs, keys[i], base + again_at, &unused);
    again_at += kBucketPairBytes;
  }
  if (!wrs.empty()) {
    if (absl::Status st = s.Run(wrs); !st.ok()) return fail_live(st);
  }
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!it.live) continue;
    bool published = false;
    if (!it.fallback) {
      uint64_t old;
      std::memcpy(&old, base + old_at[i], 8);
      published = old == it.b.words[it.target];
    }
    if (published) {
      node.slot_cache().Remember(keys[i].hash, it.b.slot_offset[it.target],
                                 it.word);
      bool maybe_dup = it.mine.size() > 1;
      if (it.insert) {
        Buckets fresh = it.b;
        std::memcpy(fresh.words, base + again[i], kBucketPairBytes);
        maybe_dup = fresh.Candidates(keys[i], node.layout()).size() > 1;
      }
      if (maybe_dup) RemoveDuplicateSlots(s, keys[i]);
      results[i] = absl::OkStatus();
    } else {
      results[i] = Publish(s, keys[i], it.word, it.alloc.publish_deadline());
      if (results[i].code() == absl::StatusCode::kAborted) {
        it.alloc = {};
        results[i] = PutValue(node, keys[i], sources[i].value,
                              first_sequence + i, sources[i].lkey);
      }
    }
    it.alloc = {};  // published or abandoned: the slab may be released
  }
}

}  // namespace meshpool::client_internal
