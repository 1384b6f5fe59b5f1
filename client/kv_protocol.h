// The one-sided key-value protocols on one memory node (DESIGN §4,
// docs/ARCHITECTURE.md "GET and PUT"):
//
//   GET    READ both index buckets; READ every slot whose fingerprint
//          matches; verify header, key and digests; re-read the index on a
//          torn or reused object (bounded, then DataLoss).
//   PUT    encode the object in a staging buffer; WRITE it into our slab and
//          READ its last word back on the same lane (flush); READ the
//          buckets; CAS the slot holding the key (or an empty one) from the
//          value we saw to the new object; retry the CAS step on a race.
//          With a young slot hint, the CAS goes fenced into the post that
//          writes the object: one round trip (kv_protocol.cc says why that
//          is safe).
//   DELETE CAS every slot holding the key to 0.
//
// Functions are thread-safe as long as the NodeConnection is; each takes a
// lane for its duration.
#ifndef MESHPOOL_CLIENT_KV_PROTOCOL_H_
#define MESHPOOL_CLIENT_KV_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/node_connection.h"
#include "format/layout.h"

namespace meshpool::client_internal {

struct KeyRef {
  absl::string_view key;
  format::KeyHash hash;
  // Set when the key is routed (ClientCore::Route): the epoch of the map
  // that chose its home, which the objects a PUT writes record, and the
  // oldest epoch an object there may carry and still be current
  // (placement::OldestCurrentObjectEpoch; older ones read as absent).
  uint64_t map_epoch = 0;
  uint64_t oldest_epoch = 0;
};
// True when a verified object of `key` with this header was written under
// an epoch older than key.oldest_epoch: the key has lived on a node that
// has left since, and a newer value may have been written there. GETs,
// batch GETs and Exists treat it as absent; PUT and Delete still replace
// and clear it.
inline bool Outdated(const KeyRef& key, const format::ObjectHeader& header) {
  return format::ObjectMapEpoch(header) < key.oldest_epoch;
}
// The same for a verified object starting at `object`.
bool OutdatedAt(const KeyRef& key, const char* object);
// InvalidArgument for an empty key or one over kMaxKeyBytes.
absl::Status ValidateKey(absl::string_view key);
// `key` hashed in `key_space` (format::KeySpaceOf its writer's tenant).
inline KeyRef MakeKeyRef(absl::string_view key, uint64_t key_space) {
  return {key, format::HashKey(key, key_space)};
}

// Receives a verified value; the view is valid only during the call.
using ValueSink = absl::FunctionRef<absl::Status(absl::string_view value)>;

// Values at least this large move straight between registered caller memory
// and the pool (an extra round trip buys skipping a copy); smaller ones go
// through the lane's staging buffer.
inline constexpr uint64_t kZeroCopyMinBytes = 64 << 10;

// A caller buffer registered with the transport (Client::RegisterBuffer).
struct DirectBuffer {
  absl::Span<char> out;
  uint32_t lkey = 0;
};

// NotFound, Unavailable (node unreachable), DataLoss (never verified), or
// whatever `sink` returns. With `direct`, a large value is READ straight
// into direct->out (header and digests first/around it, into staging) and
// `sink` then sees that memory; OutOfRange when it does not fit. On error
// the contents of direct->out are unspecified.
absl::Status GetValue(NodeConnection& node, const KeyRef& key,
                      int max_verify_retries, ValueSink sink,
                      const DirectBuffer* direct = nullptr);

// InvalidArgument (too large for a slab), ResourceExhausted (pool or the
// key's buckets full), Unavailable. With `value_lkey` (the value lies in
// registered memory), a large value is written straight from it.
absl::Status PutValue(NodeConnection& node, const KeyRef& key,
                      absl::string_view value, uint64_t sequence,
                      std::optional<uint32_t> value_lkey = std::nullopt);

// NotFound if no slot held the key.
absl::Status DeleteKey(NodeConnection& node, const KeyRef& key,
                       int max_verify_retries);

absl::StatusOr<bool> KeyExists(NodeConnection& node, const KeyRef& key,
                               int max_verify_retries);

// Where a batched GET's value goes: the caller's buffer, and its
// registration (lkey) with the node's transport when it has one (then the
// value moves straight into it).
struct GetTarget {
  absl::Span<char> out;
  std::optional<uint32_t> lkey;
};
// A batched PUT's value, and its registration when it has one (then the
// value is written straight from it).
struct PutSource {
  absl::string_view value;
  std::optional<uint32_t> lkey;
};

// Batched forms on one node, one status per key in `results`; each phase
// is one post (one doorbell) for the whole batch, and a key that needs
// more falls back to the single-key protocol (kv_batch_get.cc,
// kv_batch_put.cc say which posts).
void BatchGetValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const GetTarget> targets, int max_verify_retries,
                    absl::Span<absl::StatusOr<size_t>> results);
// Bucket reads for all keys in one post, header+key reads of every candidate
// in the next; a key whose candidate is torn falls back to KeyExists.
// With `found`, the slot word and slot offset of each present key (for
// pinning; 0 for absent keys).
struct FoundSlot {
  uint64_t slot_offset = 0;
  uint64_t word = 0;
};
void BatchKeysExist(NodeConnection& node, absl::Span<const KeyRef> keys,
                    int max_verify_retries,
                    absl::Span<absl::StatusOr<bool>> results,
                    std::vector<FoundSlot>* found = nullptr);
void BatchPutValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const PutSource> sources,
                    uint64_t first_sequence, absl::Span<absl::Status> results);

// Copies a value into `out`: OutOfRange naming the needed size when short.
absl::Status CopyValueTo(absl::string_view value, absl::Span<char> out,
                         size_t* length);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_KV_PROTOCOL_H_
