// Weighted rendezvous hashing (HomeNode, RankNodes).
//
// For each eligible node, hash (key_hash_lo, key_hash_hi, node_id) with
// XXH3-64, map the 53 high bits to u in (0,1) (never 0 nor 1), and score the
// node -capacity / ln(u). -1/ln(u) is distributed so that the node with the
// largest score wins with probability capacity_i / sum(capacity): this is
// the "logarithmic method" of weighted rendezvous hashing. A node's score
// depends only on the key and that node, so a joining node takes keys only
// from whoever held them, and the other nodes' keys stay put.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "placement/placement.h"
#include "xxhash.h"

namespace meshpool::placement {
namespace {

constexpr size_t kKeyHashBytes = 2 * sizeof(uint64_t);
// Stack buffer for (key hash, node id); longer ids (only in hand-built maps,
// the coordinator rejects them) fall back to the heap.
constexpr size_t kHashBufferBytes = kKeyHashBytes + kMaxNodeIdBytes;
static_assert(kHashBufferBytes <= 256, "keep the hash buffer on the stack small");

void PutLittleEndian64(uint64_t value, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t NodeHash(uint64_t key_hash_lo, uint64_t key_hash_hi, const std::string& node_id) {
  unsigned char stack[kHashBufferBytes];
  std::string heap;
  unsigned char* buffer = stack;
  const size_t length = kKeyHashBytes + node_id.size();
  if (length > sizeof(stack)) {
    heap.resize(length);
    buffer = reinterpret_cast<unsigned char*>(heap.data());
  }
  PutLittleEndian64(key_hash_lo, buffer);
  PutLittleEndian64(key_hash_hi, buffer + 8);
  std::memcpy(buffer + kKeyHashBytes, node_id.data(), node_id.size());
  return XXH3_64bits(buffer, length);
}

// u in (0,1): the 53 high bits, offset by half a step.
double UnitInterval(uint64_t hash) {
  constexpr double kStep = 1.0 / static_cast<double>(uint64_t{1} << 53);
  return (static_cast<double>(hash >> 11) + 0.5) * kStep;
}

bool Eligible(const proto::NodeEntry& entry) {
  return entry.state() == proto::NODE_ALIVE && entry.info().capacity_bytes() > 0;
}

struct Scored {
  double score;
  int index;
};

// Higher score first; ties to the smaller node id, then smaller index.
struct RendezvousOrder {
  const proto::ClusterMap* map;
  bool operator()(const Scored& a, const Scored& b) const {
    if (a.score != b.score) return a.score > b.score;
    const std::string& id_a = map->nodes(a.index).info().node_id();
    const std::string& id_b = map->nodes(b.index).info().node_id();
    if (id_a != id_b) return id_a < id_b;
    return a.index < b.index;
  }
};

double ScoreOf(const std::string& node_id, uint64_t capacity, uint64_t lo,
               uint64_t hi) {
  const double u = UnitInterval(NodeHash(lo, hi, node_id));
  return -static_cast<double>(capacity) / std::log(u);
}

Scored Score(const proto::ClusterMap& map, int index, uint64_t lo, uint64_t hi) {
  const proto::NodeInfo& info = map.nodes(index).info();
  return Scored{ScoreOf(info.node_id(), info.capacity_bytes(), lo, hi), index};
}

}  // namespace

int HomeNode(const proto::ClusterMap& map, uint64_t key_hash_lo, uint64_t key_hash_hi) {
  const RendezvousOrder before{&map};
  bool found = false;
  Scored best{0.0, -1};
  for (int i = 0; i < map.nodes_size(); ++i) {
    if (!Eligible(map.nodes(i))) continue;
    const Scored candidate = Score(map, i, key_hash_lo, key_hash_hi);
    if (!found || before(candidate, best)) {
      best = candidate;
      found = true;
    }
  }
  return best.index;
}

std::vector<int> RankNodes(const proto::ClusterMap& map, uint64_t key_hash_lo,
                           uint64_t key_hash_hi, size_t count) {
  std::vector<Scored> scored;
  scored.reserve(map.nodes_size());
  for (int i = 0; i < map.nodes_size(); ++i) {
    if (Eligible(map.nodes(i))) scored.push_back(Score(map, i, key_hash_lo, key_hash_hi));
  }
  const size_t keep = std::min(count, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + keep, scored.end(),
                    RendezvousOrder{&map});
  std::vector<int> ranked;
  ranked.reserve(keep);
  for (size_t i = 0; i < keep; ++i) ranked.push_back(scored[i].index);
  return ranked;
}

uint64_t OldestCurrentObjectEpoch(const proto::ClusterMap& map, int home,
                                  uint64_t key_hash_lo, uint64_t key_hash_hi) {
  const uint64_t history = map.history_epoch();
  const auto& departures = map.departures();
  if (departures.empty()) return history;
  const std::string& home_id = map.nodes(home).info().node_id();
  const double home_score = Score(map, home, key_hash_lo, key_hash_hi).score;
  // Departures are appended in epoch order: the first one (from the newest)
  // that outranks home is the newest, and none older than history counts.
  for (int i = departures.size() - 1; i >= 0; --i) {
    const proto::Departure& d = departures[i];
    if (d.epoch() <= history) break;
    // The same id is the home itself under another weight: its objects
    // were all written since it (re)joined.
    if (d.node_id() == home_id || d.capacity_bytes() == 0) continue;
    const double score =
        ScoreOf(d.node_id(), d.capacity_bytes(), key_hash_lo, key_hash_hi);
    if (score > home_score || (score == home_score && d.node_id() < home_id)) {
      return d.epoch();
    }
  }
  return history;
}

}  // namespace meshpool::placement
