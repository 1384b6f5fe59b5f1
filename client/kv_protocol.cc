#include "client/kv_protocol.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/meshpool/client.h"
#include "common/common.h"

namespace meshpool::client_internal {
namespace {

constexpr size_t kSlotsPerKey = 2 * store::kSlotsPerBucket;
constexpr size_t kBucketPairBytes = 2 * store::kBucketBytes;
// A CAS that keeps losing to other writers gives up after this many rounds.
constexpr int kMaxPublishRounds = 64;
// A PUT whose slab lease ran out before publishing re-allocates this often.
constexpr int kMaxAllocateRounds = 4;
static_assert(kMaxKeyBytes == store::kMaxKeyBytes,
              "the public key limit is the format's");

// The index words a key may live in, and where each slot is.
struct Buckets {
  uint64_t words[kSlotsPerKey];
  uint64_t slot_offset[kSlotsPerKey];

  // Slots whose fingerprint matches and whose object lies in the pool.
  std::vector<int> Candidates(const KeyRef& key,
                              const store::PoolLayout& layout) const {
    std::vector<int> out;
    uint8_t fp = store::Fingerprint(key.hash);
    for (size_t i = 0; i < kSlotsPerKey; ++i) {
      if (words[i] == 0) continue;
      store::Slot slot = store::DecodeSlot(words[i]);
      if (slot.fingerprint != fp) continue;
      if (slot.offset < layout.slab_area_offset ||
          slot.offset + store::kObjectHeaderBytes > layout.pool_bytes) {
        continue;  // not an object pointer; never ours
      }
      out.push_back(static_cast<int>(i));
    }
    return out;
  }
};

// One operation's use of one lane on one node.
class Session {
 public:
  Session(NodeConnection& node, NodeConnection::LaneLease lane)
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
  void AddRead(std::vector<rdma::WorkRequest>& wrs, char* dst,
               uint64_t pool_offset, uint64_t length,
               std::optional<uint32_t> lkey = std::nullopt) {
    AddTransfer(wrs, rdma::Opcode::kRead, dst, pool_offset, length,
                lkey.value_or(this->lkey()));
  }
  void AddWrite(std::vector<rdma::WorkRequest>& wrs, const char* src,
                uint64_t pool_offset, uint64_t length,
                std::optional<uint32_t> lkey = std::nullopt) {
    AddTransfer(wrs, rdma::Opcode::kWrite, const_cast<char*>(src), pool_offset,
                length, lkey.value_or(this->lkey()));
  }
  void AddCas(std::vector<rdma::WorkRequest>& wrs, uint64_t* old_value,
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
    std::vector<rdma::Completion> done(std::min(wrs.size(), rdma::kMaxBatch));
    for (size_t i = 0; i < wrs.size(); i += rdma::kMaxBatch) {
      auto chunk = wrs.subspan(i, rdma::kMaxBatch);
      absl::Status s = rdma::PostAndWait(lane_->endpoint(), chunk,
                                         absl::MakeSpan(done), node_.op_timeout());
      if (!s.ok()) {
        lane_.Discard();
        return absl::UnavailableError(absl::StrCat(
            node_.Describe(), " failed mid-operation: ", s.message(),
            "; it may have died: retry once the cluster map updates"));
      }
    }
    return absl::OkStatus();
  }

  // Reads the key's two buckets.
  absl::Status ReadBuckets(const KeyRef& key, Buckets* b) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              Staging(kBucketPairBytes));
    std::vector<rdma::WorkRequest> wrs;
    AddBucketReads(wrs, key, staging.data(), b);
    MESHPOOL_RETURN_IF_ERROR(Run(wrs));
    std::memcpy(b->words, staging.data(), kBucketPairBytes);
    return absl::OkStatus();
  }
  void AddBucketReads(std::vector<rdma::WorkRequest>& wrs, const KeyRef& key,
                      char* dst, Buckets* b) {
    const store::PoolLayout& layout = node_.layout();
    store::BucketPair pair = store::BucketsFor(key.hash, layout.bucket_count);
    uint64_t first = layout.bucket_offset(pair.first);
    uint64_t second = layout.bucket_offset(pair.second);
    AddRead(wrs, dst, first, store::kBucketBytes);
    AddRead(wrs, dst + store::kBucketBytes, second, store::kBucketBytes);
    for (size_t i = 0; i < store::kSlotsPerBucket; ++i) {
      b->slot_offset[i] = first + i * store::kSlotBytes;
      b->slot_offset[store::kSlotsPerBucket + i] = second + i * store::kSlotBytes;
    }
  }

  // Length of a READ fetching an object through `word`, clipped to the pool.
  uint64_t ObjectReadLength(uint64_t word) const {
    store::Slot slot = store::DecodeSlot(word);
    return std::min(slot.size_bound, node_.layout().pool_bytes - slot.offset);
  }

  // The candidate slots that hold `key` (checked by header and key).
  // Aborted when a candidate is torn: the bucket view is stale.
  absl::StatusOr<std::vector<int>> FindKeySlots(
      const KeyRef& key, const Buckets& b,
      std::vector<store::ObjectHeader>* headers = nullptr) {
    std::vector<int> candidates = b.Candidates(key, node_.layout());
    std::vector<int> mine;
    if (candidates.empty()) return mine;
    uint64_t want = store::ValueOffset(key.key.size());
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              Staging(want * candidates.size()));
    std::vector<rdma::WorkRequest> wrs;
    std::vector<uint64_t> lengths;
    for (size_t c = 0; c < candidates.size(); ++c) {
      lengths.push_back(
          std::min(want, ObjectReadLength(b.words[candidates[c]])));
      AddRead(wrs, staging.data() + c * want,
              store::DecodeSlot(b.words[candidates[c]]).offset, lengths[c]);
    }
    MESHPOOL_RETURN_IF_ERROR(Run(wrs));
    for (size_t c = 0; c < candidates.size(); ++c) {
      store::ObjectHeader header;
      absl::Status s = store::VerifyHeaderAndKey(
          absl::MakeConstSpan(staging.data() + c * want, lengths[c]), key.key,
          key.hash, node_.incarnation(), &header);
      if (s.ok()) {
        mine.push_back(candidates[c]);
        if (headers != nullptr) headers->push_back(header);
      } else if (s.code() == absl::StatusCode::kAborted) {
        return s;
      }  // NotFound / OutOfRange: another key's object.
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

  void AddTransfer(std::vector<rdma::WorkRequest>& wrs, rdma::Opcode op,
                   char* local, uint64_t pool_offset, uint64_t length,
                   uint32_t lkey) {
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

absl::Status BufferTooSmall(uint64_t value_bytes, size_t buffer_bytes) {
  return absl::OutOfRangeError(absl::StrCat(
      "value is ", value_bytes, " bytes but the buffer holds ", buffer_bytes,
      "; pass a buffer of at least that size"));
}

absl::StatusOr<Session> OpenSession(NodeConnection& node) {
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane, node.AcquireLane());
  return Session(node, std::move(lane));
}

absl::Status NeverVerified(const KeyRef& key, NodeConnection& node,
                           int retries) {
  return absl::DataLossError(absl::StrCat(
      "value of key (", key.key.size(), " bytes) on ", node.Describe(),
      " failed verification ", retries + 1,
      " times; the node's memory may be corrupt: delete and put it again"));
}

// Where each candidate object of one key lands in a staging buffer.
struct CandidatePlan {
  std::vector<int> slots;
  std::vector<uint64_t> offsets;  // into staging
  std::vector<uint64_t> lengths;
};

// Plans READs of every candidate of `key` into staging from `*cursor` on.
CandidatePlan PlanCandidates(Session& s, const KeyRef& key, const Buckets& b,
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

void AddCandidateReads(Session& s, const Buckets& b, const CandidatePlan& plan,
                       char* staging, std::vector<rdma::WorkRequest>& wrs) {
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    s.AddRead(wrs, staging + plan.offsets[i],
              store::DecodeSlot(b.words[plan.slots[i]]).offset,
              plan.lengths[i]);
  }
}

// Hands the first candidate that verifies to `sink`; NotFound when none is
// the key; Aborted when one is torn (the bucket view is stale).
absl::Status VerifyCandidates(Session& s, const KeyRef& key,
                              const CandidatePlan& plan, const char* staging,
                              ValueSink sink) {
  bool stale = false;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    absl::string_view value;
    absl::Status v = store::VerifyObject(
        absl::MakeConstSpan(staging + plan.offsets[i], plan.lengths[i]),
        key.key, key.hash, s.node().incarnation(), &value);
    if (v.ok()) return sink(value);
    if (v.code() != absl::StatusCode::kNotFound) stale = true;
  }
  return stale ? absl::AbortedError("torn object")
               : absl::NotFoundError("key not found");
}

// Past the read lease, the slab we read from may have been reclaimed and
// reused: what we fetched could be stale even if it verifies. Start over.
bool ReadLeasePassed(Session& s, absl::Time start) {
  return absl::Now() - start > s.node().read_lease();
}

// Reads the candidates of `key` found in `b` and verifies them.
absl::Status ReadCandidates(Session& s, const KeyRef& key, const Buckets& b,
                            absl::Time start, ValueSink sink) {
  uint64_t total = 0;
  CandidatePlan plan = PlanCandidates(s, key, b, &total);
  if (plan.slots.empty()) return absl::NotFoundError("key not found");
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(total));
  std::vector<rdma::WorkRequest> wrs;
  AddCandidateReads(s, b, plan, staging.data(), wrs);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  if (ReadLeasePassed(s, start)) return absl::AbortedError("read lease passed");
  return VerifyCandidates(s, key, plan, staging.data(), sink);
}

// The zero-copy GET step: header and key of each candidate first, then the
// value of the one that is `key` straight into direct.out and its digests
// into staging. Aborted when the view is stale.
absl::Status ReadCandidateDirect(Session& s, const KeyRef& key,
                                 const Buckets& b, absl::Time start,
                                 const DirectBuffer& direct, ValueSink sink) {
  std::vector<store::ObjectHeader> headers;
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<int> mine,
                            s.FindKeySlots(key, b, &headers));
  if (mine.empty()) return absl::NotFoundError("key not found");
  const store::ObjectHeader& h = headers.front();
  if (h.value_length > direct.out.size()) {
    return BufferTooSmall(h.value_length, direct.out.size());
  }
  uint64_t offset = store::DecodeSlot(b.words[mine.front()]).offset;
  uint64_t digest_bytes = 8 * store::DigestCount(h.value_length);
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(digest_bytes));
  std::vector<rdma::WorkRequest> wrs;
  s.AddRead(wrs, direct.out.data(), offset + store::ValueOffset(h.key_length),
            h.value_length, direct.lkey);
  s.AddRead(wrs, staging.data(),
            offset + store::DigestOffset(h.key_length, h.value_length),
            digest_bytes);
  MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
  if (ReadLeasePassed(s, start)) return absl::AbortedError("read lease passed");
  absl::Span<const char> value(direct.out.data(), h.value_length);
  MESHPOOL_RETURN_IF_ERROR(store::VerifyValue(h, value, staging));
  return sink(absl::string_view(value.data(), value.size()));
}

// CAS protocol: makes the key's slot point at `word` (or 0 to delete is a
// separate path). Aborted when `deadline` passed before publishing.
absl::Status Publish(Session& s, const KeyRef& key, uint64_t word,
                     absl::Time deadline) {
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    if (absl::Now() > deadline) {
      return absl::AbortedError("slab lease ended before publishing");
    }
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (mine.status().code() == absl::StatusCode::kAborted) continue;
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
    std::vector<rdma::WorkRequest> wrs;
    s.AddCas(wrs, old_value, b.slot_offset[target], b.words[target], word);
    MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
    if (*old_value != b.words[target]) continue;  // lost a race: look again
    if (mine->empty()) {
      // We filled an empty slot; a concurrent writer may have filled another
      // for the same key. Everyone keeps the first slot in bucket order and
      // clears the rest, so exactly one survives.
      for (int again = 0; again < kMaxPublishRounds; ++again) {
        MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
        mine = s.FindKeySlots(key, b);
        if (mine.status().code() == absl::StatusCode::kAborted) continue;
        break;
      }
      if (!mine.ok()) return mine.status();
    }
    if (mine->size() > 1) {
      MESHPOOL_ASSIGN_OR_RETURN(staging, s.Staging(8 * mine->size()));
      wrs.clear();
      for (size_t i = 1; i < mine->size(); ++i) {
        int dup = (*mine)[i];
        s.AddCas(wrs, reinterpret_cast<uint64_t*>(staging.data()) + i,
                 b.slot_offset[dup], b.words[dup], 0);
      }
      MESHPOOL_RETURN_IF_ERROR(s.Run(wrs));
    }
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "gave up publishing after ", kMaxPublishRounds,
      " lost races on one key; retry"));
}

}  // namespace

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) {
    return absl::InvalidArgumentError("empty key: keys are 1 to 4096 bytes");
  }
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key of ", key.size(), " bytes exceeds the limit of ", kMaxKeyBytes,
        " bytes; hash long keys down first"));
  }
  return absl::OkStatus();
}

absl::Status CopyValueTo(absl::string_view value, absl::Span<char> out,
                         size_t* length) {
  if (value.size() > out.size()) return BufferTooSmall(value.size(), out.size());
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
  MESHPOOL_ASSIGN_OR_RETURN(Session s, OpenSession(node));
  for (int attempt = 0; attempt <= max_verify_retries; ++attempt) {
    absl::Time start = absl::Now();
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    uint64_t largest = 0;
    for (int c : b.Candidates(key, node.layout())) {
      largest = std::max(largest, store::DecodeSlot(b.words[c]).size_bound);
    }
    absl::Status st =
        direct != nullptr && largest >= kZeroCopyMinBytes
            ? ReadCandidateDirect(s, key, b, start, *direct, sink)
            : ReadCandidates(s, key, b, start, sink);
    if (st.code() != absl::StatusCode::kAborted) return st;
  }
  return NeverVerified(key, node, max_verify_retries);
}

namespace {

// Stages the whole object and WRITEs it, then READs its last word back on the
// same lane: the READ flushes the WRITE into node memory before anyone can
// reach the object through the index.
absl::Status WriteStagedObject(Session& s, NodeConnection& node,
                               const KeyRef& key, absl::string_view value,
                               uint64_t sequence, uint64_t offset,
                               uint64_t bytes) {
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging, s.Staging(bytes + 8));
  store::EncodeObject(staging.subspan(0, bytes), key.key, value,
                      node.incarnation(), sequence);
  std::vector<rdma::WorkRequest> wrs;
  s.AddWrite(wrs, staging.data(), offset, bytes);
  s.AddRead(wrs, staging.data() + bytes, offset + bytes - 8, 8);
  return s.Run(wrs);
}

// The same object, with the value gathered straight from registered caller
// memory: header+key and digests come from staging.
absl::Status WriteGatheredObject(Session& s, NodeConnection& node,
                                 const KeyRef& key, absl::string_view value,
                                 uint32_t value_lkey, uint64_t sequence,
                                 uint64_t offset) {
  uint64_t prefix = store::ValueOffset(key.key.size());
  uint64_t digests = 8 * store::DigestCount(value.size());
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            s.Staging(prefix + digests + 8));
  uint64_t checksum = store::EncodeObjectPrefix(
      staging, key.key, value.size(), node.incarnation(), sequence);
  store::EncodeDigests(value, checksum, staging.subspan(prefix, digests));
  uint64_t digest_offset =
      offset + store::DigestOffset(key.key.size(), value.size());
  std::vector<rdma::WorkRequest> wrs;
  s.AddWrite(wrs, staging.data(), offset, prefix);
  s.AddWrite(wrs, value.data(), offset + prefix, value.size(), value_lkey);
  s.AddWrite(wrs, staging.data() + prefix, digest_offset, digests);
  s.AddRead(wrs, staging.data() + prefix + digests,
            digest_offset + digests - 8, 8);
  return s.Run(wrs);
}

}  // namespace

absl::Status PutValue(NodeConnection& node, const KeyRef& key,
                      absl::string_view value, uint64_t sequence,
                      std::optional<uint32_t> value_lkey) {
  uint64_t bytes = store::ObjectBytes(key.key.size(), value.size());
  bool gather = value_lkey.has_value() && value.size() >= kZeroCopyMinBytes;
  MESHPOOL_ASSIGN_OR_RETURN(Session s, OpenSession(node));
  for (int round = 0; round < kMaxAllocateRounds; ++round) {
    MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::Allocation a,
                              node.Allocate(bytes));
    MESHPOOL_RETURN_IF_ERROR(
        gather ? WriteGatheredObject(s, node, key, value, *value_lkey,
                                     sequence, a.offset)
               : WriteStagedObject(s, node, key, value, sequence, a.offset,
                                   bytes));
    uint64_t word =
        store::EncodeSlot(store::Fingerprint(key.hash), bytes, a.offset);
    absl::Status st = Publish(s, key, word, a.publish_deadline);
    if (st.code() != absl::StatusCode::kAborted) return st;
  }
  return absl::UnavailableError(
      "slab leases kept expiring before the value could be published; the "
      "node or network is too slow: retry");
}

absl::Status DeleteKey(NodeConnection& node, const KeyRef& key,
                       int max_verify_retries) {
  MESHPOOL_ASSIGN_OR_RETURN(Session s, OpenSession(node));
  bool removed = false;
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (mine.status().code() == absl::StatusCode::kAborted) continue;
    if (!mine.ok()) return mine.status();
    if (mine->empty()) {
      return removed ? absl::OkStatus() : absl::NotFoundError("key not found");
    }
    MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                              s.Staging(8 * mine->size()));
    std::vector<rdma::WorkRequest> wrs;
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

absl::StatusOr<bool> KeyExists(NodeConnection& node, const KeyRef& key,
                               int max_verify_retries) {
  MESHPOOL_ASSIGN_OR_RETURN(Session s, OpenSession(node));
  for (int attempt = 0; attempt <= max_verify_retries; ++attempt) {
    Buckets b;
    MESHPOOL_RETURN_IF_ERROR(s.ReadBuckets(key, &b));
    absl::StatusOr<std::vector<int>> mine = s.FindKeySlots(key, b);
    if (mine.status().code() == absl::StatusCode::kAborted) continue;
    if (!mine.ok()) return mine.status();
    return !mine->empty();
  }
  return NeverVerified(key, node, max_verify_retries);
}

void BatchGetValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const absl::Span<char>> outs,
                    int max_verify_retries,
                    absl::Span<absl::StatusOr<size_t>> results) {
  auto fail_all = [&](const absl::Status& st) {
    for (auto& r : results) r = st;
  };
  absl::StatusOr<Session> session = OpenSession(node);
  if (!session.ok()) return fail_all(session.status());
  Session& s = *session;
  absl::Time start = absl::Now();
  // Phase 1: every key's buckets in one post.
  std::vector<Buckets> buckets(keys.size());
  absl::StatusOr<absl::Span<char>> staging =
      s.Staging(kBucketPairBytes * keys.size());
  if (!staging.ok()) return fail_all(staging.status());
  std::vector<rdma::WorkRequest> wrs;
  for (size_t i = 0; i < keys.size(); ++i) {
    s.AddBucketReads(wrs, keys[i], staging->data() + i * kBucketPairBytes,
                     &buckets[i]);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_all(st);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memcpy(buckets[i].words, staging->data() + i * kBucketPairBytes,
                kBucketPairBytes);
  }
  // Phase 2: every key's candidate objects in one post; a key that needs
  // more (torn object, lease passed) takes the single-key path.
  std::vector<CandidatePlan> plans(keys.size());
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    plans[i] = PlanCandidates(s, keys[i], buckets[i], &total);
  }
  staging = s.Staging(total);
  if (!staging.ok()) return fail_all(staging.status());
  wrs.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    AddCandidateReads(s, buckets[i], plans[i], staging->data(), wrs);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_all(st);
  bool lease_passed = ReadLeasePassed(s, start);
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t length = 0;
    auto copy_out = [&](absl::string_view value) {
      return CopyValueTo(value, outs[i], &length);
    };
    absl::Status st =
        lease_passed
            ? absl::AbortedError("read lease passed")
            : VerifyCandidates(s, keys[i], plans[i], staging->data(), copy_out);
    if (st.code() == absl::StatusCode::kAborted) {
      st = GetValue(node, keys[i], max_verify_retries, copy_out);
    }
    if (st.ok()) {
      results[i] = length;
    } else {
      results[i] = st;
    }
  }
}

void BatchPutValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const absl::string_view> values,
                    uint64_t first_sequence,
                    absl::Span<absl::Status> results) {
  absl::StatusOr<Session> session = OpenSession(node);
  if (!session.ok()) {
    for (auto& r : results) r = session.status();
    return;
  }
  Session& s = *session;
  // Phase 1: allocate and write every object, then one flush READ.
  std::vector<NodeConnection::Allocation> allocs(keys.size());
  std::vector<uint64_t> sizes(keys.size()), staged(keys.size());
  std::vector<bool> written(keys.size(), false);
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    sizes[i] = store::ObjectBytes(keys[i].key.size(), values[i].size());
    absl::StatusOr<NodeConnection::Allocation> a = node.Allocate(sizes[i]);
    if (!a.ok()) {
      results[i] = a.status();
      continue;
    }
    allocs[i] = *a;
    staged[i] = total;
    total += sizes[i];
    written[i] = true;
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(total + 8);
  std::vector<rdma::WorkRequest> wrs;
  int64_t last = -1;
  for (size_t i = 0; staging.ok() && i < keys.size(); ++i) {
    if (!written[i]) continue;
    store::EncodeObject(staging->subspan(staged[i], sizes[i]), keys[i].key,
                        values[i], node.incarnation(), first_sequence + i);
    s.AddWrite(wrs, staging->data() + staged[i], allocs[i].offset, sizes[i]);
    last = static_cast<int64_t>(i);
  }
  absl::Status st = staging.status();
  if (st.ok() && last >= 0) {
    s.AddRead(wrs, staging->data() + total,
              allocs[last].offset + sizes[last] - 8, 8);
    st = s.Run(wrs);
  }
  // Phase 2: publish each.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!written[i]) continue;
    if (!st.ok()) {
      results[i] = st;
      continue;
    }
    uint64_t word = store::EncodeSlot(store::Fingerprint(keys[i].hash),
                                      sizes[i], allocs[i].offset);
    results[i] = Publish(s, keys[i], word, allocs[i].publish_deadline);
    if (results[i].code() == absl::StatusCode::kAborted) {
      results[i] = PutValue(node, keys[i], values[i], first_sequence + i);
    }
  }
}

}  // namespace meshpool::client_internal
