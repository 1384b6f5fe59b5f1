// Weighted rendezvous hashing of virtual buckets (HomeNode, RankNodes,
// OldestCurrentObjectEpoch) and the table of every bucket's answer
// (BucketTable).
//
// For each eligible node, hash the key's bucket with XXH3-64 seeded by the
// node id's hash, map the 53 high bits to u in (0,1) (never 0 nor 1), and
// score the node -capacity / ln(u). -1/ln(u) is distributed so that the node
// with the largest score wins with probability capacity_i / sum(capacity):
// this is the "logarithmic method" of weighted rendezvous hashing. A node's
// score depends only on the bucket and that node, so a joining node takes
// buckets only from whoever held them, and the other nodes' buckets stay
// put. That locality is also what lets BucketTable::Build update an older
// table: a bucket whose home is still there can only move to a node that
// joined or changed weight.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "placement/placement.h"

// Inlined: a table build scores every bucket against every node.
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace meshpool::placement {
namespace {

uint64_t NodeSeed(const std::string& node_id) {
  return XXH3_64bits(node_id.data(), node_id.size());
}

// One node's (or departure's) standing for one bucket. The rendezvous order
// (Before): between equal capacities, the larger hash first (the score is a
// non-decreasing function of it); otherwise the larger score first; ties to
// the smaller node id, then the smaller index. Comparing equal capacities by
// hash alone is what lets a table build skip the logarithm for all but one
// node per capacity.
struct Scored {
  uint64_t hash;  // 53 bits
  uint64_t capacity;
  const std::string* id;
  int index;  // into the map's nodes; -1 for a departure
};

uint64_t BucketHash(uint64_t seed, uint32_t bucket) {
  const unsigned char bytes[4] = {static_cast<unsigned char>(bucket),
                                  static_cast<unsigned char>(bucket >> 8),
                                  static_cast<unsigned char>(bucket >> 16),
                                  static_cast<unsigned char>(bucket >> 24)};
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), seed) >> 11;
}

// -capacity / ln(u), u in (0,1) from the 53-bit hash offset by half a step.
double ScoreOf(const Scored& s) {
  constexpr double kStep = 1.0 / static_cast<double>(uint64_t{1} << 53);
  const double u = (static_cast<double>(s.hash) + 0.5) * kStep;
  return -static_cast<double>(s.capacity) / std::log(u);
}

bool Before(const Scored& a, const Scored& b) {
  if (a.capacity == b.capacity) {
    if (a.hash != b.hash) return a.hash > b.hash;
  } else {
    const double score_a = ScoreOf(a), score_b = ScoreOf(b);
    if (score_a != score_b) return score_a > score_b;
  }
  if (*a.id != *b.id) return *a.id < *b.id;
  return a.index < b.index;
}

uint64_t EligibleCapacity(const proto::NodeEntry& entry) {
  return entry.state() == proto::NODE_ALIVE ? entry.info().capacity_bytes() : 0;
}

std::vector<BucketTable::Node> NodesOf(const proto::ClusterMap& map) {
  std::vector<BucketTable::Node> nodes;
  nodes.reserve(map.nodes_size());
  for (const proto::NodeEntry& entry : map.nodes()) {
    const std::string& id = entry.info().node_id();
    nodes.push_back(
        BucketTable::Node{id, NodeSeed(id), EligibleCapacity(entry)});
  }
  return nodes;
}

Scored ScoreNode(const std::vector<BucketTable::Node>& nodes, int index,
                 uint32_t bucket) {
  const BucketTable::Node& n = nodes[index];
  return Scored{BucketHash(n.seed, bucket), n.capacity, &n.id, index};
}

// The eligible nodes grouped by capacity: within a group the largest hash
// wins, so ranking a bucket takes one hash per node and one logarithm per
// group. Seeds sit in one array per group for the table build's inner loop.
struct CapacityGroup {
  std::vector<int> index;      // into the map's nodes
  std::vector<uint64_t> seed;  // of nodes[index[k]]
};
using CapacityGroups = std::vector<CapacityGroup>;

CapacityGroups GroupsOf(const std::vector<BucketTable::Node>& nodes) {
  absl::flat_hash_map<uint64_t, size_t> group_of;
  CapacityGroups groups;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].capacity == 0) continue;
    auto [it, added] = group_of.emplace(nodes[i].capacity, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].index.push_back(static_cast<int>(i));
    groups[it->second].seed.push_back(nodes[i].seed);
  }
  return groups;
}

// The bucket's home, or -1 when no node is eligible.
int RankFirst(const std::vector<BucketTable::Node>& nodes,
              const CapacityGroups& groups, uint32_t bucket) {
  bool found = false;
  Scored best{};
  for (const CapacityGroup& group : groups) {
    Scored group_best = ScoreNode(nodes, group.index[0], bucket);
    const size_t size = group.seed.size();
    for (size_t k = 1; k < size; ++k) {
      const uint64_t hash = BucketHash(group.seed[k], bucket);
      if (hash < group_best.hash) continue;
      const BucketTable::Node& n = nodes[group.index[k]];
      const Scored candidate{hash, n.capacity, &n.id, group.index[k]};
      if (Before(candidate, group_best)) group_best = candidate;
    }
    if (!found || Before(group_best, best)) best = group_best;
    found = true;
  }
  return found ? best.index : -1;
}

// The departures that count (newer than history, with a capacity), newest
// first.
std::vector<const proto::Departure*> CountingDepartures(
    const proto::ClusterMap& map) {
  std::vector<const proto::Departure*> counting;
  for (int i = map.departures_size() - 1; i >= 0; --i) {
    const proto::Departure& d = map.departures(i);
    if (d.epoch() <= map.history_epoch()) break;
    if (d.capacity_bytes() > 0) counting.push_back(&d);
  }
  return counting;
}

// Whether departure `d` (with its id's seed) outranked the home for the
// bucket. The same id is the home itself under another weight: its objects
// were all written since it (re)joined.
bool Outranked(const proto::Departure& d, uint64_t d_seed, const Scored& home,
               uint32_t bucket) {
  if (d.node_id() == *home.id) return false;
  const Scored departed{BucketHash(d_seed, bucket), d.capacity_bytes(),
                        &d.node_id(), -1};
  return Before(departed, home);
}

}  // namespace

int HomeNode(const proto::ClusterMap& map, uint64_t key_hash_lo, uint64_t key_hash_hi) {
  const std::vector<BucketTable::Node> nodes = NodesOf(map);
  return RankFirst(nodes, GroupsOf(nodes), BucketOf(key_hash_lo, key_hash_hi));
}

std::vector<int> RankNodes(const proto::ClusterMap& map, uint64_t key_hash_lo,
                           uint64_t key_hash_hi, size_t count) {
  const std::vector<BucketTable::Node> nodes = NodesOf(map);
  const uint32_t bucket = BucketOf(key_hash_lo, key_hash_hi);
  std::vector<Scored> scored;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].capacity > 0) scored.push_back(ScoreNode(nodes, i, bucket));
  }
  const size_t keep = std::min(count, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + keep, scored.end(),
                    Before);
  std::vector<int> ranked;
  ranked.reserve(keep);
  for (size_t i = 0; i < keep; ++i) ranked.push_back(scored[i].index);
  return ranked;
}

uint64_t OldestCurrentObjectEpoch(const proto::ClusterMap& map, int home,
                                  uint64_t key_hash_lo, uint64_t key_hash_hi) {
  if (map.departures().empty()) return map.history_epoch();
  const std::vector<BucketTable::Node> nodes = NodesOf(map);
  const uint32_t bucket = BucketOf(key_hash_lo, key_hash_hi);
  const Scored home_scored = ScoreNode(nodes, home, bucket);
  // Newest first: the first that outranks home is the newest.
  for (const proto::Departure* d : CountingDepartures(map)) {
    if (Outranked(*d, NodeSeed(d->node_id()), home_scored, bucket)) {
      return d->epoch();
    }
  }
  return map.history_epoch();
}

std::shared_ptr<const BucketTable> BucketTable::Build(
    const proto::ClusterMap& map, const BucketTable* previous) {
  std::shared_ptr<BucketTable> table(new BucketTable());
  table->epoch_ = map.epoch();
  table->history_epoch_ = map.history_epoch();
  table->nodes_ = NodesOf(map);
  const std::vector<Node>& nodes = table->nodes_;
  const CapacityGroups groups = GroupsOf(nodes);
  size_t eligible = 0;
  for (const CapacityGroup& group : groups) eligible += group.index.size();
  std::vector<int32_t>& home = table->home_;
  home.assign(kBuckets, -1);

  // With a previous table: which of its nodes are still here with the same
  // capacity (kept: previous index -> index here, or -1), and which eligible
  // nodes here are new or changed (gained). Only with unique ids.
  std::vector<int> kept;
  std::vector<int> gained;
  bool incremental = previous != nullptr;
  if (incremental) {
    absl::flat_hash_map<std::string, int> here;
    for (size_t i = 0; i < nodes.size() && incremental; ++i) {
      incremental = here.emplace(nodes[i].id, static_cast<int>(i)).second;
    }
    absl::flat_hash_map<std::string, uint64_t> before;
    kept.assign(previous->nodes_.size(), -1);
    for (size_t j = 0; j < previous->nodes_.size() && incremental; ++j) {
      const Node& old = previous->nodes_[j];
      incremental = before.emplace(old.id, old.capacity).second;
      auto it = here.find(old.id);
      if (it != here.end() && old.capacity > 0 &&
          nodes[it->second].capacity == old.capacity) {
        kept[j] = it->second;
      }
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].capacity == 0) continue;
      auto it = before.find(nodes[i].id);
      if (it == before.end() || it->second != nodes[i].capacity) {
        gained.push_back(static_cast<int>(i));
      }
    }
    // Past half the nodes, ranking every bucket afresh costs about the same.
    incremental = incremental && 2 * gained.size() <= eligible;
  }

  for (uint32_t b = 0; b < kBuckets; ++b) {
    const int old = incremental ? previous->home_[b] : -1;
    const int stayed = old >= 0 ? kept[old] : -1;
    if (stayed < 0) {
      home[b] = RankFirst(nodes, groups, b);
      continue;
    }
    // The home is still here and still outranks every node that was; only
    // a gained node can outrank it now.
    Scored best = ScoreNode(nodes, stayed, b);
    for (int g : gained) {
      const Scored candidate = ScoreNode(nodes, g, b);
      if (Before(candidate, best)) best = candidate;
    }
    home[b] = best.index;
  }

  const std::vector<const proto::Departure*> departures =
      CountingDepartures(map);
  if (!departures.empty()) {
    std::vector<uint64_t> seeds;
    for (const proto::Departure* d : departures) {
      seeds.push_back(NodeSeed(d->node_id()));
      table->departure_epochs_.push_back(d->epoch());
    }
    table->departure_.assign(kBuckets, 0);
    for (uint32_t b = 0; b < kBuckets; ++b) {
      if (home[b] < 0) continue;
      const Scored home_scored = ScoreNode(nodes, home[b], b);
      for (size_t k = 0; k < departures.size(); ++k) {
        if (Outranked(*departures[k], seeds[k], home_scored, b)) {
          table->departure_[b] = static_cast<uint16_t>(k + 1);
          break;
        }
      }
    }
  }
  return table;
}

}  // namespace meshpool::placement
