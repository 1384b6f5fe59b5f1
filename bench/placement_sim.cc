// placement_sim: what routing a key, a bucket table and a map change cost
// as a cluster grows, simulated in one process (no network).
//
// For each cluster size N (mixed capacities of 1-4 x 64 GiB, node infos as
// nodes register them), with K random keys:
//   route_ns        BucketTable::Home per key over the K keys (what a
//                   client does per operation)
//   rendezvous_ns   HomeNode per key, one hash per node (routing without a
//                   table)
//   build_ms        a table from scratch (a client's first map)
//   join_ms         a table updated from the previous one when one node
//   leave_ms        joins (mean capacity) or dies; mean of 8 events
//   join_moved      the share of the key space whose home changed, over the
//   leave_moved     ideal (the capacity that joined or left over the total):
//                   mean of 8 events; 1.00 is ideal
//   worst_join      the event furthest from 1.00
//   worst_leave
//   max_share       the fullest node's buckets over its fair share
//   map_bytes       the serialized ClusterMap (what a watcher of
//                   WatchClusterMap receives on each change)
//   delta_bytes     the delta for one join (what a watcher of
//                   WatchClusterMapUpdates receives instead)
//   watch_ms        the coordinator's work to tell N watchers (every node
//                   watches) of one join: through its MapFeed (one snapshot,
//                   one diff, a shared message serialized per watcher)
//   unshared_ms     the same as the coordinator did it before the feed (a
//                   snapshot, a diff and a copy per watcher), timed on at
//                   most 32 watchers and scaled to N
// Exits 1 if a bucket moved between two nodes that did not change, or if
// the table and per-key rendezvous disagree on a key.
//
// Usage: placement_sim [--nodes=3,16,64,256,1024,4096] [--keys=100000]
//                      [--seed=S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "coordinator/map_feed.h"
#include "placement/map_delta.h"
#include "placement/placement.h"
#include "proto/meshpool.pb.h"

namespace meshpool {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

struct Key {
  uint64_t lo;
  uint64_t hi;
};

// A node entry as a registered node's looks in the map.
void AddNode(proto::ClusterMap& map, int n, uint64_t capacity,
             std::mt19937_64& rng) {
  proto::NodeEntry* entry = map.add_nodes();
  entry->set_state(proto::NODE_ALIVE);
  proto::NodeInfo* info = entry->mutable_info();
  info->set_node_id(absl::StrCat("node-", n));
  info->set_incarnation(rng());
  info->set_capacity_bytes(capacity);
  const std::string host =
      absl::StrCat("10.", (n >> 16) & 255, ".", (n >> 8) & 255, ".", n & 255);
  info->set_control_address(absl::StrCat(host, ":7100"));
  info->add_transport_addresses(absl::StrCat("verbs://", host, ":7101"));
  info->add_transport_addresses(absl::StrCat("tcp://", host, ":7102"));
  info->mutable_pool()->set_length(capacity + (uint64_t{1} << 30));
  proto::PoolLayout* layout = info->mutable_layout();
  layout->set_pool_bytes(capacity + (uint64_t{1} << 30));
  layout->set_index_offset(4096);
  layout->set_bucket_count(capacity >> 16);
  layout->set_slab_area_offset(uint64_t{1} << 30);
  layout->set_slab_bytes(uint64_t{1} << 21);
  layout->set_slab_count(capacity >> 21);
  layout->set_slab_meta_offset(uint64_t{1} << 29);
  layout->set_pin_area_offset(uint64_t{3} << 28);
  layout->set_pin_sessions(4096);
  layout->set_pins_per_session(1024);
  info->set_hostname(absl::StrCat("gpu-host-", n));
  info->set_max_read_lease_ms(2000);
  info->set_metrics_address(absl::StrCat("http://", host, ":9100/metrics"));
}

uint64_t TotalCapacity(const proto::ClusterMap& map) {
  uint64_t total = 0;
  for (const proto::NodeEntry& e : map.nodes()) {
    if (e.state() == proto::NODE_ALIVE) total += e.info().capacity_bytes();
  }
  return total;
}

// The share of buckets (of the key space) whose home changed from `before`
// to `after`; false if one moved between nodes other than `changed`.
bool MovedShare(const placement::BucketTable& before,
                const proto::ClusterMap& before_map,
                const placement::BucketTable& after,
                const proto::ClusterMap& after_map, const std::string& changed,
                double* share) {
  uint32_t moved = 0;
  for (uint32_t b = 0; b < placement::kBuckets; ++b) {
    const uint64_t lo = uint64_t{b} << (64 - placement::kBucketBits);
    const std::string& from =
        before_map.nodes(before.Home(lo, 0)).info().node_id();
    const std::string& to = after_map.nodes(after.Home(lo, 0)).info().node_id();
    if (from == to) continue;
    ++moved;
    if (from != changed && to != changed) {
      std::fprintf(stderr,
                   "placement_sim: a bucket moved from %s to %s, neither of "
                   "which changed (%s did)\n",
                   from.c_str(), to.c_str(), changed.c_str());
      return false;
    }
  }
  *share = static_cast<double>(moved) / placement::kBuckets;
  return true;
}

// Movement over kEvents events, each against the ideal (the capacity that
// joined or left over the total): the mean ratio and the one furthest from 1.
constexpr int kEvents = 8;
struct Movement {
  double mean = 0;
  double worst = 1;
  double ms = 0;  // mean table update time
  void Add(double ratio, double update_ms) {
    mean += ratio / kEvents;
    ms += update_ms / kEvents;
    if (std::abs(ratio - 1) > std::abs(worst - 1)) worst = ratio;
  }
};

// What telling `watchers` watch streams, all holding `before`, of `after`
// costs the coordinator (the watch_ms and unshared_ms columns). The
// serialization stands in for gRPC's, which serializes every Write.
struct WatchCost {
  double feed_ms = 0;
  double unshared_ms = 0;
};
bool TimeWatchers(const proto::ClusterMap& before,
                  const proto::ClusterMap& after, int watchers,
                  WatchCost* cost) {
  const proto::ClusterMap* current = &before;
  coordinator::MapFeed feed(
      [&current]() -> absl::StatusOr<proto::ClusterMap> { return *current; });
  absl::StatusOr<coordinator::MapFeedUpdate> first =
      feed.UpdateFrom(nullptr, before.epoch());
  if (!first.ok()) return false;
  const std::shared_ptr<const proto::ClusterMap> held = first->map;
  current = &after;
  std::string wire;
  size_t bytes = 0;
  Clock::time_point start = Clock::now();
  for (int w = 0; w < watchers; ++w) {
    absl::StatusOr<coordinator::MapFeedUpdate> next =
        feed.UpdateFrom(held, after.epoch());
    if (!next.ok() || !next->update->has_delta()) {
      std::fprintf(stderr,
                   "placement_sim: the feed sent no delta for a join\n");
      return false;
    }
    next->update->SerializeToString(&wire);
    bytes += wire.size();
  }
  cost->feed_ms = MillisSince(start);

  // Before the feed, per watcher: Membership::Map()'s copy, DiffMaps against
  // the watcher's own copy, the size check, the write, and the copy kept.
  const int sampled = std::min(watchers, 32);
  std::vector<proto::ClusterMap> last(sampled, before);
  start = Clock::now();
  for (int w = 0; w < sampled; ++w) {
    proto::ClusterMap snapshot = after;
    proto::ClusterMapUpdate update;
    std::optional<proto::ClusterMapDelta> delta =
        placement::DiffMaps(last[w], snapshot);
    if (!delta.has_value() ||
        delta->ByteSizeLong() >= snapshot.ByteSizeLong()) {
      return false;
    }
    *update.mutable_delta() = *std::move(delta);
    update.SerializeToString(&wire);
    bytes += wire.size();
    last[w] = snapshot;
  }
  cost->unshared_ms = MillisSince(start) * watchers / sampled;
  return bytes > 0;
}

bool Simulate(int nodes, const std::vector<Key>& keys, std::mt19937_64& rng) {
  constexpr uint64_t kUnit = uint64_t{64} << 30;
  proto::ClusterMap map;
  map.set_epoch(nodes);
  for (int n = 0; n < nodes; ++n) AddNode(map, n, (1 + rng() % 4) * kUnit, rng);
  const size_t map_bytes = map.ByteSizeLong();

  Clock::time_point start = Clock::now();
  std::shared_ptr<const placement::BucketTable> table =
      placement::BucketTable::Build(map);
  const double build_ms = MillisSince(start);

  // Routing: enough passes over the keys for about 10^7 lookups.
  const int passes = std::max<int>(1, 10'000'000 / keys.size());
  uint64_t sink = 0;
  start = Clock::now();
  for (int p = 0; p < passes; ++p) {
    for (const Key& k : keys) sink += table->Home(k.lo, k.hi);
  }
  const double route_ns =
      MillisSince(start) * 1e6 / (double(passes) * keys.size());

  // Per-key rendezvous, on as many keys as keep it near 2 x 10^7 scores.
  const size_t sampled = std::clamp<size_t>(20'000'000 / nodes, 1, keys.size());
  start = Clock::now();
  for (size_t i = 0; i < sampled; ++i) {
    const int home = placement::HomeNode(map, keys[i].lo, keys[i].hi);
    if (home != table->Home(keys[i].lo, keys[i].hi)) {
      std::fprintf(stderr, "placement_sim: table and rendezvous disagree\n");
      return false;
    }
    sink += home;
  }
  const double rendezvous_ns = MillisSince(start) * 1e6 / sampled;

  // One node joins with the mean capacity, or one dies; each from `map`.
  const uint64_t mean = TotalCapacity(map) / nodes;
  Movement join, leave;
  size_t delta_bytes = 0;
  WatchCost watch;
  for (int e = 0; e < kEvents; ++e) {
    proto::ClusterMap joined = map;
    joined.set_epoch(map.epoch() + 1);
    AddNode(joined, nodes + e, mean, rng);
    start = Clock::now();
    std::shared_ptr<const placement::BucketTable> after =
        placement::BucketTable::Build(joined, table.get());
    const double ms = MillisSince(start);
    double share = 0;
    if (!MovedShare(*table, map, *after, joined,
                    absl::StrCat("node-", nodes + e), &share)) {
      return false;
    }
    join.Add(share / (double(mean) / TotalCapacity(joined)), ms);
    if (e == 0) {
      const std::optional<proto::ClusterMapDelta> delta =
          placement::DiffMaps(map, joined);
      if (!delta.has_value()) {
        std::fprintf(stderr, "placement_sim: a join has no delta\n");
        return false;
      }
      delta_bytes = delta->ByteSizeLong();
      if (!TimeWatchers(map, joined, nodes, &watch)) return false;
    }

    proto::ClusterMap left = map;
    left.set_epoch(map.epoch() + 1);
    const int dead = static_cast<int>(rng() % nodes);
    left.mutable_nodes(dead)->set_state(proto::NODE_DEAD);
    start = Clock::now();
    after = placement::BucketTable::Build(left, table.get());
    const double leave_ms = MillisSince(start);
    if (!MovedShare(*table, map, *after, left, map.nodes(dead).info().node_id(),
                    &share)) {
      return false;
    }
    leave.Add(share / (double(map.nodes(dead).info().capacity_bytes()) /
                       TotalCapacity(map)),
              leave_ms);
  }

  // Balance over buckets.
  std::vector<uint32_t> owned(nodes, 0);
  for (uint32_t b = 0; b < placement::kBuckets; ++b) {
    ++owned[table->Home(uint64_t{b} << (64 - placement::kBucketBits), 0)];
  }
  double max_share = 0;
  const double total = static_cast<double>(TotalCapacity(map));
  for (int n = 0; n < nodes; ++n) {
    const double fair =
        placement::kBuckets * (map.nodes(n).info().capacity_bytes() / total);
    max_share = std::max(max_share, owned[n] / fair);
  }

  std::printf(
      "%6d %9.1f %14.0f %9.1f %8.2f %9.2f %11.2f %11.2f %12.2f %12.2f %10.2f "
      "%10zu %12zu %9.2f %12.1f\n",
      nodes, route_ns, rendezvous_ns, build_ms, join.ms, leave.ms, join.mean,
      join.worst, leave.mean, leave.worst, max_share, map_bytes, delta_bytes,
      watch.feed_ms, watch.unshared_ms);
  std::fflush(stdout);
  return sink != 1;  // keeps the lookups; never 1 in practice
}

}  // namespace
}  // namespace meshpool

int main(int argc, char** argv) {
  std::vector<int> sizes = {3, 16, 64, 256, 1024, 4096};
  size_t key_count = 100'000;
  uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    bool ok = false;
    absl::string_view value = arg;
    if (absl::ConsumePrefix(&value, "--nodes=")) {
      sizes.clear();
      ok = true;
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int n = 0;
        ok = ok && absl::SimpleAtoi(part, &n) && n > 0;
        sizes.push_back(n);
      }
    } else if (absl::ConsumePrefix(&value, "--keys=")) {
      ok = absl::SimpleAtoi(value, &key_count) && key_count > 0;
    } else if (absl::ConsumePrefix(&value, "--seed=")) {
      ok = absl::SimpleAtoi(value, &seed);
    }
    if (!ok) {
      std::fprintf(stderr,
                   "placement_sim: bad argument '%s'; usage: placement_sim "
                   "[--nodes=3,16,...] [--keys=100000] [--seed=S]\n",
                   argv[i]);
      return 2;
    }
  }
  std::printf("placement_sim: %zu keys, %u buckets, seed=%llu\n", key_count,
              meshpool::placement::kBuckets,
              static_cast<unsigned long long>(seed));
  std::printf(
      "%6s %9s %14s %9s %8s %9s %11s %11s %12s %12s %10s %10s %12s %9s %12s\n",
      "nodes", "route_ns", "rendezvous_ns", "build_ms", "join_ms", "leave_ms",
      "join_moved", "worst_join", "leave_moved", "worst_leave", "max_share",
      "map_bytes", "delta_bytes", "watch_ms", "unshared_ms");
  std::mt19937_64 rng(seed);
  std::vector<meshpool::Key> keys(key_count);
  for (meshpool::Key& k : keys) k = meshpool::Key{rng(), rng()};
  for (int n : sizes) {
    if (!meshpool::Simulate(n, keys, rng)) return 1;
  }
  return 0;
}
