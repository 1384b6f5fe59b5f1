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
// the same stripe in `current`: the nodes digest source and target first
// and only pieces that differ move (read into this process, written to
// the target), then both are digested again and must match. Calls
// progress(bytes) after each step; false from it stops the copy
// (Cancelled). Errors: Unavailable (a node is down or did not answer),
// Aborted (a piece kept changing over kRepairCopyAttempts copies: it is
// being written), DataLoss (a stripe has no live copy to copy from),
// InvalidArgument (a malformed placement table).
absl::Status CopyNewStripeCopies(Client& client,
                                 const proto::RegionInfo& current,
                                 const proto::RegionInfo& repaired,
                                 const std::function<bool(uint64_t)>& progress);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_REGION_COPY_H_
