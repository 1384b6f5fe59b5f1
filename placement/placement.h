// meshpool/placement/placement.h: where keys live. Weighted rendezvous
// hashing over a ClusterMap (HomeNode, RankNodes); region stripes are laid
// out by placement/region_layout.h. The coordinator server that keeps the
// map is coordinator/coordinator.h; its client stub is
// placement/coordinator_client.h. NodeLayout and ValidateNodeLayout read
// and check the pool layout a node registered, for the coordinator that
// accepts it and the clients that address its memory by it.
//
// Pure functions of their arguments; thread-safe.
#ifndef MESHPOOL_PLACEMENT_PLACEMENT_H_
#define MESHPOOL_PLACEMENT_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "format/layout.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

// Node ids are at most this long (RegisterNode rejects longer ones).
inline constexpr size_t kMaxNodeIdBytes = 64;
static_assert(kMaxNodeIdBytes >= 5 + 20, "assigned ids \"node-<uint64>\" must fit");

// Rendezvous (highest random weight) hashing, weighted by capacity: score of
// node i = -capacity_i / ln(u_i) where u_i in (0,1) comes from XXH3-64 of
// (key_hash_lo, key_hash_hi, node_id) (the two words little-endian, then the
// id's bytes). A node gets a share of keys proportional to its
// info.capacity_bytes, and adding or removing a node moves only the keys that
// node wins or held.
// Only NODE_ALIVE nodes with capacity_bytes > 0 count. Ties (vanishingly rare)
// go to the smaller node_id, so the result does not depend on node order.
// Returns the index into map.nodes() of the key's home node, or -1 when no
// node is eligible.
int HomeNode(const proto::ClusterMap& map, uint64_t key_hash_lo, uint64_t key_hash_hi);

// The first min(count, eligible nodes) nodes in rendezvous order, as distinct
// indices into map.nodes(); element 0 is HomeNode's answer. Empty when no
// node is eligible or count is 0.
std::vector<int> RankNodes(const proto::ClusterMap& map, uint64_t key_hash_lo,
                           uint64_t key_hash_hi, size_t count);

// The map keeps at most this many departures (ClusterMap.departures); the
// oldest ones past it are dropped and history_epoch rises instead. Bounds
// the work OldestCurrentObjectEpoch may do per key.
inline constexpr size_t kMaxDepartures = 256;

// The oldest map epoch a KV object of the key, found at map.nodes(home),
// may have been written under and still be the key's latest value: the
// newest departure (ClusterMap.departures) that outranks that node for the
// key in rendezvous order (the key lived there for a while, so a newer
// value may have been written there while this one stayed behind), else
// map.history_epoch. Readers treat older objects as absent. Cost: one
// rendezvous score per departure newer than history_epoch, newest first,
// stopping at the first that outranks `home`; none without departures.
// REQUIRES: 0 <= home < map.nodes_size().
uint64_t OldestCurrentObjectEpoch(const proto::ClusterMap& map, int home,
                                  uint64_t key_hash_lo, uint64_t key_hash_hi);

// The pool layout `info` registered, as the format module's struct.
format::PoolLayout NodeLayout(const proto::NodeInfo& info);

// Checks what a node registered about its memory before anything is sized,
// addressed or weighed by it: its layout fits its pool region
// (format::ValidateLayout against info.pool().length()), and capacity_bytes,
// which placement weighs the node by, is at most the layout's pool_bytes.
// InvalidArgument naming the first field that does not hold.
absl::Status ValidateNodeLayout(const proto::NodeInfo& info);

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_PLACEMENT_H_
