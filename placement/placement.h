// meshpool/placement/placement.h: where keys live. Weighted rendezvous
// hashing over a ClusterMap (HomeNode, RankNodes); region stripes are laid
// out by placement/region_layout.h. The coordinator server that keeps the
// map is coordinator/coordinator.h; its client stub is
// placement/coordinator_client.h.
//
// Pure functions of their arguments; thread-safe.
#ifndef MESHPOOL_PLACEMENT_PLACEMENT_H_
#define MESHPOOL_PLACEMENT_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

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

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_PLACEMENT_H_
