// Internal to client/: one READ of a whole object (the size its slot
// bounds), planned so that, when the caller's buffer is registered, the
// value lands straight in it: the header and key go to staging, the bytes
// from the value's start go to the caller's buffer (as many as it holds),
// and whatever follows (padding, digests) to staging again. The key's
// length is known before the header is read, so the value's offset is
// too; its length is not, so the read fills the buffer and verification
// finds the digests wherever they landed. One round trip, no copy.
//
// Not thread-safe: a plan belongs to one operation.
#ifndef MESHPOOL_CLIENT_KV_OBJECT_READ_H_
#define MESHPOOL_CLIENT_KV_OBJECT_READ_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/kv_lane_op.h"
#include "client/kv_protocol.h"

namespace meshpool::client_internal {

struct ObjectRead {
  int slot = -1;         // index into the key's Buckets
  uint64_t word = 0;     // the slot word the read follows
  uint64_t offset = 0;   // pool offset of the object
  uint64_t length = 0;   // bytes read (the slot's bound, clipped)
  bool direct = false;   // the value part goes to the caller's buffer
  uint64_t head_at = 0;  // staging offset of the first head_len bytes
  uint64_t head_len = 0;
  uint64_t out_len = 0;  // direct: bytes read into the caller's buffer
  uint64_t tail_at = 0;  // direct: staging offset of the rest
  uint64_t tail_len = 0;
};

// Plans the READ of the object `word` points at, taking staging space
// from *cursor on. Direct when `target` is registered and `allow_direct`.
ObjectRead PlanObjectRead(LaneOp& s, const KeyRef& key, int slot, uint64_t word,
                          const GetTarget& target, bool allow_direct,
                          uint64_t* cursor);
void AddObjectReads(LaneOp& s, const ObjectRead& r, char* staging,
                    const GetTarget& target, rdma::WorkRequests& wrs);
// Verifies what the read fetched and leaves the value in target.out.
// Returns the value's length; NotFound (another key's object),
// Retry(kRereadIndex) (torn or reused: re-read the index), OutOfRange (the
// buffer is too small; the message names the size needed).
absl::StatusOr<size_t> FinishObjectRead(LaneOp& s, const KeyRef& key,
                                        const ObjectRead& r,
                                        const char* staging,
                                        const GetTarget& target);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_KV_OBJECT_READ_H_
