// Region data movement (internal to client/): one-sided READs and WRITEs of
// many byte ranges on many memory nodes at once. Nodes transfer
// concurrently (one thread per lane in use); a node's share of a large
// transfer is cut into contiguous parts moved on up to
// kMaxRegionLanesPerNode lanes at once; on each lane the requests are
// pipelined (several posts in flight, a bounded number of bytes and
// requests), never one round trip per range.
//
// Local memory inside a registered caller buffer (Client::RegisterBuffer)
// moves straight to or from the node's pool; other memory is staged through
// the lane's registered staging buffer, at most kRegionStagingBytes per lane
// at a time, in two halves so that copying one overlaps the transfer of the
// other.
//
// Region guards: a region's memory on a node is named by its allocation id
// in each of its slabs' SlabMeta.region word (format/layout.h): set before
// the region is handed out, cleared for all its slabs before any is freed,
// and freed memory is reused only after the node's read lease. A transfer
// with guards reads each guard word after its requests on every lane
// (reads: after the last post; writes: after every post) and fails NotFound
// when one no longer holds its id (the region was deleted or replaced):
// reads then never return reused bytes. Writes and atomics also make sure,
// before they post, that a guard was seen holding its id less than half a
// read lease ago (NodeConnection remembers when it last saw one; else one
// round trip reads them first), so they land in the region or in memory
// it freed and no one reuses yet, never in another's; a write whose proof
// is older than the lease when a guard fails is DataLoss.
//
// Functions are thread-safe as long as the NodeConnections are; each takes
// lanes for its duration only.
#ifndef MESHPOOL_CLIENT_REGION_TRANSFER_H_
#define MESHPOOL_CLIENT_REGION_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/node_connection.h"
#include "rdma/rdma.h"

namespace meshpool::client_internal {

// Staging one lane uses at most at a time (two halves).
inline constexpr uint64_t kRegionStagingBytes = uint64_t{4} << 20;
// Bytes of one direct (registered-memory) post; a lane keeps at most
// kDirectPostsInFlight of them in flight.
inline constexpr uint64_t kDirectPostBytes = uint64_t{8} << 20;
inline constexpr size_t kDirectPostsInFlight = 4;
// Lanes one node's share of a transfer uses at most at once...
inline constexpr size_t kMaxRegionLanesPerNode = 4;
// ...each taking at least this many bytes (smaller shares stay on one lane:
// a thread per lane costs more than it saves on small transfers).
inline constexpr uint64_t kMinBytesPerLane = uint64_t{2} << 20;
static_assert(kRegionStagingBytes % 2 == 0 &&
              kRegionStagingBytes / 2 <= rdma::kMaxTransferBytes);
static_assert(kDirectPostBytes <= rdma::kMaxTransferBytes);
// A post carries at most kMaxBatch requests, and a lane posts only while
// its requests in flight stay within kMaxOutstanding: two full posts must
// fit, or nothing would overlap.
static_assert(rdma::kMaxOutstanding >= 2 * rdma::kMaxBatch);
static_assert(kDirectPostsInFlight >= 2);

enum class TransferKind { kRead, kWrite };

// `length` bytes at `pool_offset` in a node's pool, to (READ) or from
// (WRITE) `local`.
struct Segment {
  char* local = nullptr;
  uint64_t pool_offset = 0;
  uint64_t length = 0;
};

// The SlabMeta.region word at `pool_offset` must hold `value` (an
// allocation id, never 0).
struct RegionGuard {
  uint64_t pool_offset = 0;
  uint64_t value = 0;
};
// Guards one transfer to one node checks at most (one per extent of the
// region the node holds): a post keeps room for them and the flush.
inline constexpr size_t kMaxRegionGuards = 16;
static_assert(rdma::kMaxBatch >= 2 * (kMaxRegionGuards + 2));

// Everything one operation moves to or from one node.
struct NodeTransfer {
  std::shared_ptr<NodeConnection> node;
  std::vector<Segment> segments;
  // Set when every segment's local memory lies in a buffer registered with
  // the node's transport: its lkey (direct transfer, no staging).
  std::optional<uint32_t> lkey;
  // At most kMaxRegionGuards (more: InvalidArgument); none: unchecked.
  std::vector<RegionGuard> guards;
};

// Moves every segment of every transfer, in parallel across nodes and
// lanes. Writes are flushed (a READ after them on the same lane) before
// this returns, so a later Read by anyone sees them. Returns OK or the
// first error: Unavailable when a node failed mid-way (its lane is
// discarded), ResourceExhausted when staging memory cannot be had. On
// error, READ destinations hold unspecified bytes and a WRITE may have
// landed in part. NotFound: a guard no longer holds its id (see above);
// DataLoss: a write may have landed in memory reused since. `failed`
// (optional) receives the nodes whose part failed Unavailable, each once.
absl::Status RunTransfers(TransferKind kind,
                          absl::Span<const NodeTransfer> transfers,
                          std::vector<NodeConnection*>* failed = nullptr);

// Cuts `segments` (total `bytes`) into `parts` contiguous shares of nearly
// equal size, splitting segments where needed. Exposed for tests.
std::vector<std::vector<Segment>> SplitSegments(
    absl::Span<const Segment> segments, uint64_t bytes, size_t parts);

// One 8-byte atomic (kCompareSwap or kFetchAdd) on the word at
// `pool_offset`, checked by `guards` as a write is; returns the word's
// previous value. Unavailable when the node fails; NotFound and DataLoss as
// RunTransfers.
absl::StatusOr<uint64_t> RunAtomic(NodeConnection& node, rdma::Opcode op,
                                   uint64_t pool_offset, uint64_t compare_add,
                                   uint64_t swap,
                                   absl::Span<const RegionGuard> guards = {});

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_REGION_TRANSFER_H_
