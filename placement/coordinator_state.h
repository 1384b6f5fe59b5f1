// meshpool/placement: CoordinatorState, where the coordinator keeps the
// membership and the cluster map.
//
// The state is the cluster map (proto::ClusterMap: an epoch and one NodeEntry
// per node ever registered) and nothing else, so a durable implementation can
// store it as that one proto message (a file now, etcd later). Every method
// hands out copies; no pointer into the state ever leaves it.
//
// Durable fields are the epoch, each entry's info and state. The liveness
// fields (last_heartbeat_unix_ms, stats) change on every heartbeat; a durable
// implementation may keep them in memory only and need not persist them.
//
// The rules (who may register, when a node is dead) live above this, in
// Membership; the state only stores. Implementations are thread-safe and each
// method is atomic on its own; callers that read, decide and write serialise
// those sequences themselves (Membership holds one lock around them).
#ifndef MESHPOOL_PLACEMENT_COORDINATOR_STATE_H_
#define MESHPOOL_PLACEMENT_COORDINATOR_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

class CoordinatorState {
 public:
  virtual ~CoordinatorState() = default;

  // A copy of the whole map. Unavailable when a backing store cannot be read
  // (retry); never fails for the in-memory state.
  virtual absl::StatusOr<proto::ClusterMap> Snapshot() const = 0;

  // A copy of the entry whose info.node_id is `node_id`; NotFound if none.
  virtual absl::StatusOr<proto::NodeEntry> FindNode(absl::string_view node_id) const = 0;

  // Inserts `entry`, or replaces the entry with the same info.node_id in
  // place (its position in the map is kept), and bumps the epoch in the same
  // atomic step. Returns the new epoch.
  // REQUIRES: entry.info().node_id() is not empty (else InvalidArgument).
  virtual absl::StatusOr<uint64_t> UpsertNode(const proto::NodeEntry& entry) = 0;

  // Sets the node's state to NODE_DEAD (the entry stays in the map) and bumps
  // the epoch atomically. Returns the new epoch; NotFound for an unknown id.
  virtual absl::StatusOr<uint64_t> MarkDead(absl::string_view node_id) = 0;

  // Stores the liveness fields of a node (last_heartbeat_unix_ms, stats)
  // without bumping the epoch. NotFound for an unknown id.
  virtual absl::Status RecordHeartbeat(absl::string_view node_id, int64_t unix_ms,
                                       const proto::NodeStats& stats) = 0;

  // Bumps the epoch with no other change (makes every watcher refetch).
  // Returns the new epoch.
  virtual absl::StatusOr<uint64_t> BumpEpoch() = 0;
};

// The in-memory state, starting from `initial` (default: epoch 0, no nodes).
// Lost when the process exits.
std::unique_ptr<CoordinatorState> NewInMemoryCoordinatorState(
    proto::ClusterMap initial = proto::ClusterMap());

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_COORDINATOR_STATE_H_
