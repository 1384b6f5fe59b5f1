// meshpool/placement/placement.h: where keys live. A key falls in one of
// kBuckets virtual buckets; a bucket lives where weighted rendezvous hashing
// over the ClusterMap puts it (HomeNode, RankNodes), and a BucketTable holds
// every bucket's answer for one map, so routing a key costs one lookup at
// any cluster size. Region stripes are laid out by
// placement/region_layout.h. The coordinator server that keeps the
// map is coordinator/coordinator.h; its client stub is
// placement/coordinator_client.h. NodeLayout and ValidateNodeLayout read
// and check the pool layout a node registered, for the coordinator that
// accepts it and the clients that address its memory by it.
//
// Pure functions of their arguments; thread-safe. A BucketTable is immutable
// once built: share it freely between threads.
#ifndef MESHPOOL_PLACEMENT_PLACEMENT_H_
#define MESHPOOL_PLACEMENT_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "format/layout.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

// Node ids are at most this long (RegisterNode rejects longer ones).
inline constexpr size_t kMaxNodeIdBytes = 64;
static_assert(kMaxNodeIdBytes >= 5 + 20, "assigned ids \"node-<uint64>\" must fit");

// Keys are grouped into kBuckets virtual buckets by the top kBucketBits of
// their hash's low word (BucketOf). Nodes own buckets, not keys: a join or
// leave moves whole buckets. 2^18 buckets keep a node's share within a few
// percent of its weight up to thousands of nodes (64 buckets per node at
// 4,096) while a table of them stays at 1 MiB.
inline constexpr int kBucketBits = 18;
inline constexpr uint32_t kBuckets = uint32_t{1} << kBucketBits;
static_assert(kBucketBits >= 8 && kBucketBits <= 24,
              "enough buckets to balance, few enough to tabulate");

// The key's bucket. The index (format::BucketsFor) and the fingerprint use
// other bits, so the keys one node holds still spread over its whole index.
inline uint32_t BucketOf(uint64_t key_hash_lo, uint64_t /*key_hash_hi*/) {
  return static_cast<uint32_t>(key_hash_lo >> (64 - kBucketBits));
}

// Rendezvous (highest random weight) hashing of buckets, weighted by
// capacity: score of node i for bucket b = -capacity_i / ln(u_i) where u_i
// in (0,1) comes from XXH3-64 of b (4 bytes, little-endian) seeded with the
// XXH3-64 of node_id. A node gets a share of buckets proportional to its
// info.capacity_bytes, and adding or removing a node moves only the buckets
// that node wins or held.
// Only NODE_ALIVE nodes with capacity_bytes > 0 count. Ties (vanishingly rare)
// go to the smaller node_id, so the result does not depend on node order.
// Returns the index into map.nodes() of the key's home node, or -1 when no
// node is eligible. Cost: one score per node (BucketTable::Home is the
// same answer in one lookup).
int HomeNode(const proto::ClusterMap& map, uint64_t key_hash_lo, uint64_t key_hash_hi);

// The first min(count, eligible nodes) nodes in rendezvous order for the
// key's bucket, as distinct indices into map.nodes(); element 0 is
// HomeNode's answer. Empty when no node is eligible or count is 0.
std::vector<int> RankNodes(const proto::ClusterMap& map, uint64_t key_hash_lo,
                           uint64_t key_hash_hi, size_t count);

// The map keeps at most this many departures (ClusterMap.departures); the
// oldest ones past it are dropped and history_epoch rises instead. Bounds
// the work OldestCurrentObjectEpoch may do per key.
inline constexpr size_t kMaxDepartures = 256;

// The oldest map epoch a KV object of the key, found at map.nodes(home),
// may have been written under and still be the key's latest value: the
// newest departure (ClusterMap.departures) that outranks that node for the
// key's bucket in rendezvous order (the bucket lived there for a while, so a
// newer value may have been written there while this one stayed behind),
// else map.history_epoch. Readers treat older objects as absent. Cost: one
// rendezvous score per departure newer than history_epoch, newest first,
// stopping at the first that outranks `home`; none without departures.
// REQUIRES: 0 <= home < map.nodes_size().
uint64_t OldestCurrentObjectEpoch(const proto::ClusterMap& map, int home,
                                  uint64_t key_hash_lo, uint64_t key_hash_hi);

// Every bucket's HomeNode and OldestCurrentObjectEpoch for one cluster map,
// so that routing a key is one array lookup whatever the cluster's size.
// Immutable once built; thread-safe. 4 bytes per bucket (1 MiB), 6 while
// the map lists departures.
class BucketTable {
 public:
  // The table of `map`. `previous`, when given, is a table built from an
  // older map of the same cluster: buckets whose home stayed eligible with
  // the same capacity are then re-scored only against the nodes that joined
  // or changed (cost: kBuckets scores per such node, plus a full ranking of
  // the buckets whose home left), instead of against every node (kBuckets
  // scores per node). The result is the same either way.
  static std::shared_ptr<const BucketTable> Build(
      const proto::ClusterMap& map, const BucketTable* previous = nullptr);

  // HomeNode(map, lo, hi) for the map this table was built from.
  int Home(uint64_t key_hash_lo, uint64_t key_hash_hi) const {
    return home_[BucketOf(key_hash_lo, key_hash_hi)];
  }
  // OldestCurrentObjectEpoch(map, Home(lo, hi), lo, hi) for that map.
  // REQUIRES: Home(lo, hi) >= 0.
  uint64_t OldestCurrentObjectEpoch(uint64_t key_hash_lo,
                                    uint64_t key_hash_hi) const {
    if (departure_.empty()) return history_epoch_;
    const uint16_t d = departure_[BucketOf(key_hash_lo, key_hash_hi)];
    return d == 0 ? history_epoch_ : departure_epochs_[d - 1];
  }
  // The map's epoch.
  uint64_t epoch() const { return epoch_; }

  // One node of the map the table was built from, as placement weighs it.
  struct Node {
    std::string id;
    uint64_t seed;      // XXH3-64 of id
    uint64_t capacity;  // 0 when not eligible
  };

 private:
  BucketTable() = default;

  uint64_t epoch_ = 0;
  uint64_t history_epoch_ = 0;
  std::vector<Node> nodes_;    // map.nodes(), in order
  std::vector<int32_t> home_;  // per bucket: index into nodes_, or -1
  // Per bucket: 0 for history_epoch_, else 1 + the index of the departure's
  // epoch in departure_epochs_. Empty when no departure is newer than
  // history_epoch_.
  std::vector<uint16_t> departure_;
  std::vector<uint64_t> departure_epochs_;
  static_assert(kMaxDepartures < 0xffff, "a departure index fits a uint16_t");
};

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
