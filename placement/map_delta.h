// meshpool/placement/map_delta.h: cluster map changes as deltas, so that a
// watcher of a cluster of thousands of nodes receives one node's change
// rather than the whole map on every epoch (Coordinator.
// WatchClusterMapUpdates sends them; placement::CoordinatorClient applies
// them).
//
// Pure functions of their arguments; thread-safe.
#ifndef MESHPOOL_PLACEMENT_MAP_DELTA_H_
#define MESHPOOL_PLACEMENT_MAP_DELTA_H_

#include <optional>

#include "absl/status/status.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

// Whether two entries are the same for the map's readers: equal but for
// last_heartbeat_unix_ms and stats, which change with every heartbeat.
bool SameEntry(const proto::NodeEntry& a, const proto::NodeEntry& b);

// The delta that turns `base` into `next`, or nullopt when none does:
// `next` orders the nodes it kept from `base` differently, or its
// departures are not `base`'s minus some oldest plus some newer. A node
// whose entry changed only in its heartbeat time or stats is not in the
// delta (the receiver keeps its older ones).
std::optional<proto::ClusterMapDelta> DiffMaps(const proto::ClusterMap& base,
                                               const proto::ClusterMap& next);

// Applies `delta` to `map` in place. On error `map` is unchanged:
// FailedPrecondition when map.epoch() is not delta.base_epoch() (fetch the
// whole map again); InvalidArgument when the delta removes a node the map
// lacks, names a node twice, or drops more departures than the map has.
absl::Status ApplyMapDelta(const proto::ClusterMapDelta& delta,
                           proto::ClusterMap& map);

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_MAP_DELTA_H_
