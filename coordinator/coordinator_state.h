// meshpool/placement: CoordinatorState, where the coordinator keeps the
// membership and the cluster map.
//
// The state is the cluster map (proto::ClusterMap: an epoch and one NodeEntry
// per node ever registered), the region table (one proto::RegionInfo per
// region, keyed by name) and the next region id, and nothing else, so a
// durable implementation can store it as proto messages and one counter (a
// file now, etcd later). Every method hands out copies; no pointer into the
// state ever leaves it.
//
// Durable fields are the epoch, each entry's info and state. The liveness
// fields (last_heartbeat_unix_ms, stats) change on every heartbeat; a durable
// implementation may keep them in memory only and need not persist them.
//
// The rules (who may register, when a node is dead; how regions are named,
// placed and freed) live above this, in Membership and RegionTable; the
// state only stores. Implementations are thread-safe and each
// method is atomic on its own; callers that read, decide and write serialise
// those sequences themselves (Membership holds one lock around them).
#ifndef MESHPOOL_COORDINATOR_COORDINATOR_STATE_H_
#define MESHPOOL_COORDINATOR_COORDINATOR_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

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

  // Sets the node's state to NODE_DEAD (the entry stays in the map until
  // RemoveNode) and bumps
  // the epoch atomically. Returns the new epoch; NotFound for an unknown id.
  virtual absl::StatusOr<uint64_t> MarkDead(absl::string_view node_id) = 0;

  // Removes the node's entry from the map (Membership forgets long-dead
  // nodes so) and bumps the epoch atomically. Returns the new epoch;
  // NotFound for an unknown id.
  virtual absl::StatusOr<uint64_t> RemoveNode(absl::string_view node_id) = 0;

  // Stores the liveness fields of a node (last_heartbeat_unix_ms, stats)
  // without bumping the epoch. NotFound for an unknown id.
  virtual absl::Status RecordHeartbeat(absl::string_view node_id, int64_t unix_ms,
                                       const proto::NodeStats& stats) = 0;

  // Bumps the epoch with no other change (makes every watcher refetch).
  // Returns the new epoch.
  virtual absl::StatusOr<uint64_t> BumpEpoch() = 0;

  // Starts the map's history afresh at an epoch of at least `at_least` (and
  // above the current one), in one atomic step: the epoch jumps there,
  // history_epoch becomes it and the departures are dropped. For a
  // coordinator that finds it has lost the history nodes remember (a node
  // registers having seen a newer epoch). Returns the new epoch.
  virtual absl::StatusOr<uint64_t> RestartHistory(uint64_t at_least) = 0;

  // ---- Regions (no epoch bump: regions are not part of the map). ----

  // A fresh region id, increasing from the state's first id, never handed
  // out twice (even for regions deleted since, or creates that failed).
  virtual absl::StatusOr<uint64_t> NextRegionId() = 0;

  // A copy of the region named `name`; NotFound if none.
  virtual absl::StatusOr<proto::RegionInfo> FindRegion(absl::string_view name) const = 0;

  // Inserts `info`, or replaces the region with the same name.
  // REQUIRES: info.name() is not empty (else InvalidArgument).
  virtual absl::Status PutRegion(const proto::RegionInfo& info) = 0;

  // Removes the region named `name` and returns it; NotFound if none.
  virtual absl::StatusOr<proto::RegionInfo> RemoveRegion(absl::string_view name) = 0;

  // In one atomic step, renames region `from` to `to` (its name field
  // follows). If a region named `to` exists it is removed and returned when
  // `replace`, else AlreadyExists; NotFound when `from` does not exist.
  // Renaming a region to its own name changes nothing (and replaces
  // nothing). REQUIRES: `to` is not empty (else InvalidArgument).
  virtual absl::StatusOr<std::optional<proto::RegionInfo>> RenameRegion(absl::string_view from,
                                                                        absl::string_view to,
                                                                        bool replace) = 0;

  // Copies of the regions whose name starts with `prefix`, sorted by name.
  virtual absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(
      absl::string_view prefix) const = 0;
};

// The in-memory state, starting from `initial` (default: epoch 0, no nodes)
// with no regions; NextRegionId counts from `first_region_id`. Lost when the
// process exits.
std::unique_ptr<CoordinatorState> NewInMemoryCoordinatorState(
    proto::ClusterMap initial = proto::ClusterMap(), uint64_t first_region_id = 1);

// What every implementation does to `map` when the entry `before` is
// replaced by `after` (null: marked dead) in the change that makes `epoch`:
// when `before` was alive and the change moves keys (death, or another
// capacity), appends its Departure, dropping the oldest past
// placement::kMaxDepartures and raising history_epoch to the newest epoch
// dropped. Pure; the caller holds whatever lock guards `map`.
void NoteNodeChange(proto::ClusterMap& map, const proto::NodeEntry& before,
                    const proto::NodeEntry* after, uint64_t epoch);

// The part of RestartHistory every implementation shares: the new epoch
// (max(at_least, epoch + 1)) set in `map` with history_epoch, departures
// dropped. Returns the new epoch.
uint64_t RestartMapHistory(proto::ClusterMap& map, uint64_t at_least);

// The durable part of a map entry: its info and state, without the
// liveness fields (heartbeat time, stats).
proto::NodeEntry DurableEntry(const proto::NodeEntry& entry);
// The durable part of a map: its epoch, history (departures,
// history_epoch) and every entry's DurableEntry.
proto::ClusterMap DurableMap(const proto::ClusterMap& map);

// A first region id for a coordinator starting now without durable state:
// its start time in ms, times 2^20. Nodes outlive a coordinator restart and
// still hold regions under the ids the previous process handed out; ids
// from a later start (a clock that does not go back, and fewer than 2^20
// regions per ms of uptime) never collide with them.
uint64_t FirstRegionIdAt(absl::Time now);

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_COORDINATOR_STATE_H_
