// Cluster map deltas (DiffMaps, ApplyMapDelta).
//
// Applying a delta: keep the base's entries in order, dropping the removed
// ones and replacing the changed ones in place, then append the changed
// entries the base did not have, in the delta's order. DiffMaps refuses
// (nullopt) any change of order that this rule cannot reproduce, so a
// delta always rebuilds exactly the map it was cut from.
#include "placement/map_delta.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace meshpool::placement {
namespace {

bool SameDeparture(const proto::Departure& a, const proto::Departure& b) {
  return a.node_id() == b.node_id() &&
         a.capacity_bytes() == b.capacity_bytes() && a.epoch() == b.epoch();
}

}  // namespace

bool SameEntry(const proto::NodeEntry& a, const proto::NodeEntry& b) {
  // NodeInfo has no map fields, so equal messages serialize equally.
  return a.state() == b.state() &&
         a.info().SerializeAsString() == b.info().SerializeAsString();
}

std::optional<proto::ClusterMapDelta> DiffMaps(const proto::ClusterMap& base,
                                               const proto::ClusterMap& next) {
  proto::ClusterMapDelta delta;
  delta.set_base_epoch(base.epoch());
  delta.set_epoch(next.epoch());
  delta.set_history_epoch(next.history_epoch());

  absl::flat_hash_map<std::string, int> in_next;
  for (int i = 0; i < next.nodes_size(); ++i) {
    if (!in_next.emplace(next.nodes(i).info().node_id(), i).second) {
      return std::nullopt;  // a repeated id: only a whole map says it
    }
  }
  // The base's nodes that stay must keep their order and come first in
  // `next`; the rest of `next` is appended.
  absl::flat_hash_set<std::string> in_base;
  int kept = 0;
  for (const proto::NodeEntry& old : base.nodes()) {
    const std::string& id = old.info().node_id();
    if (!in_base.insert(id).second) return std::nullopt;
    auto it = in_next.find(id);
    if (it == in_next.end()) {
      delta.add_removed(id);
      continue;
    }
    if (it->second != kept) return std::nullopt;
    if (!SameEntry(old, next.nodes(kept)))
      *delta.add_changed() = next.nodes(kept);
    ++kept;
  }
  for (int i = kept; i < next.nodes_size(); ++i)
    *delta.add_changed() = next.nodes(i);

  // next.departures = base.departures[dropped:] + added.
  const int base_count = base.departures_size();
  int dropped = 0;
  while (dropped <= base_count) {
    const int overlap = base_count - dropped;
    bool match = overlap <= next.departures_size();
    for (int k = 0; match && k < overlap; ++k) {
      match = SameDeparture(base.departures(dropped + k), next.departures(k));
    }
    if (match) break;
    ++dropped;
  }
  delta.set_departures_dropped(dropped);
  for (int k = base_count - dropped; k < next.departures_size(); ++k) {
    *delta.add_departures_added() = next.departures(k);
  }
  return delta;
}

absl::Status ApplyMapDelta(const proto::ClusterMapDelta& delta,
                           proto::ClusterMap& map) {
  if (map.epoch() != delta.base_epoch()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a map delta on epoch ", delta.base_epoch(),
                     " does not apply to the map of epoch ", map.epoch(),
                     "; fetch the whole map"));
  }
  if (delta.departures_dropped() >
      static_cast<uint32_t>(map.departures_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a map delta drops ", delta.departures_dropped(),
                     " departures of ", map.departures_size()));
  }
  absl::flat_hash_set<std::string> removed(delta.removed().begin(),
                                           delta.removed().end());
  absl::flat_hash_map<std::string, const proto::NodeEntry*> changed;
  for (const proto::NodeEntry& e : delta.changed()) {
    if (!changed.emplace(e.info().node_id(), &e).second ||
        removed.contains(e.info().node_id())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a map delta names node '", e.info().node_id(), "' twice"));
    }
  }
  proto::ClusterMap next;
  next.set_epoch(delta.epoch());
  next.set_history_epoch(delta.history_epoch());
  size_t removed_found = 0;
  absl::flat_hash_set<std::string> placed;
  for (const proto::NodeEntry& old : map.nodes()) {
    const std::string& id = old.info().node_id();
    if (removed.contains(id)) {
      ++removed_found;
      continue;
    }
    auto it = changed.find(id);
    *next.add_nodes() = it == changed.end() ? old : *it->second;
    placed.insert(id);
  }
  if (removed_found != removed.size()) {
    return absl::InvalidArgumentError(
        "a map delta removes a node the map does not have; fetch the whole "
        "map");
  }
  for (const proto::NodeEntry& e : delta.changed()) {
    if (!placed.contains(e.info().node_id())) *next.add_nodes() = e;
  }
  for (int k = delta.departures_dropped(); k < map.departures_size(); ++k) {
    *next.add_departures() = map.departures(k);
  }
  for (const proto::Departure& d : delta.departures_added()) {
    *next.add_departures() = d;
  }
  map = std::move(next);
  return absl::OkStatus();
}

}  // namespace meshpool::placement
