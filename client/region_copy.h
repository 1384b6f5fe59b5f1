// Internal to client/ (the coordinator's repairer reaches it through
// tools/): the data movement of a region repair — filling new stripe
// copies from surviving ones, node to node through this client.
//
// Thread-safe as the Client is.
#ifndef MESHPOOL_CLIENT_REGION_COPY_H_
#define MESHPOOL_CLIENT_REGION_COPY_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "meshpool/client.h"
#include "proto/meshpool.pb.h"

namespace meshpool::client_internal {

// Bytes one step of a repair moves at most (the staging it holds).
inline constexpr uint64_t kRepairBatchBytes = uint64_t{64} << 20;
// A stripe is handled in pieces of at most this many bytes.
inline constexpr uint64_t kRepairPieceBytes = uint64_t{8} << 20;
// A piece whose source changes under concurrent writes is copied again at
// most this many times.
inline constexpr int kRepairCopyAttempts = 3;
static_assert(kRepairPieceBytes <= kRepairBatchBytes);

// Makes every stripe copy of `repaired` whose extent (node, incarnation,
// allocation id) `current` does not have hold the bytes of a live copy of
// the same stripe in `current`, and checks it: the nodes digest source and
// target, and pieces that differ are moved again (read into this process,
// written to the target) until they agree. `check_first` false (new,
// zero-filled copies): every piece is moved first, reading batch i + 1
// while batch i is written and checked; true (a re-check): pieces are
// digested first and only those that differ move. Calls progress(bytes)
// after each batch; false from it stops the copy (Cancelled). Errors:
// Unavailable (a node is down or did not answer), Aborted (a piece still
// differed after kRepairCopyAttempts moves: it is being written), DataLoss
// (a stripe has no live copy to copy from), InvalidArgument (a malformed
// placement table).
absl::Status CopyNewStripeCopies(Client& client,
                                 const proto::RegionInfo& current,
                                 const proto::RegionInfo& repaired,
                                 bool check_first,
                                 const std::function<bool(uint64_t)>& progress);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_REGION_COPY_H_
