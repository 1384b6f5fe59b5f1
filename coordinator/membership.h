// meshpool/placement: Membership, the coordinator's rules over its
// CoordinatorState (the rules are listed in placement/placement.h).
//
// No gRPC here: the service layer (coordinator_service.h) translates protos
// to these calls. Thread-safe: one mutex serialises every read-decide-write
// sequence on the state and guards the cached epoch watchers wait on.
#ifndef MESHPOOL_COORDINATOR_MEMBERSHIP_H_
#define MESHPOOL_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// InvalidArgument naming the first missing piece of a registration: id too
// long, no transport address (or an empty one), no pool region, zero
// capacity, missing layout. OK otherwise.
absl::Status ValidateNodeInfo(const proto::NodeInfo& info);

class Membership {
 public:
  // Takes ownership of `state`. `env` (null: Env::Default(); not owned,
  // must outlive the membership) is its clock.
  // Unavailable when the state cannot be read. Nodes alive in `state` get a
  // grace period of dead_after from now before they can be declared dead.
  static absl::StatusOr<std::unique_ptr<Membership>> Create(
      std::unique_ptr<CoordinatorState> state, absl::Duration dead_after,
      Env* env);

  // Validates (ValidateNodeInfo), assigns an id when info.node_id is empty,
  // stores the node NODE_ALIVE and bumps the epoch. Reply carries node_id
  // and the new epoch (heartbeat_interval_ms is left to the caller).
  // Unavailable after Shutdown.
  absl::StatusOr<proto::RegisterNodeReply> Register(const proto::NodeInfo& info);

  // known=false for an unknown id, a stale incarnation or a dead node;
  // otherwise stores the heartbeat time and stats. Unavailable after Shutdown.
  absl::StatusOr<proto::HeartbeatReply> Heartbeat(const proto::HeartbeatRequest& request);

  // A copy of the current map.
  absl::StatusOr<proto::ClusterMap> Map() const;

  // Marks NODE_DEAD every alive node silent for at least dead_after (by the
  // clock), one epoch bump per node. Returns how many it marked.
  absl::StatusOr<int> Reap();

  struct EpochWait {
    uint64_t epoch;  // the current epoch
    bool shut_down;  // Shutdown was called: stop waiting
  };
  // Blocks until the epoch exceeds `epoch`, Shutdown, or `timeout` passes.
  EpochWait AwaitEpochAbove(uint64_t epoch, absl::Duration timeout) const;

  // Wakes every AwaitEpochAbove for good; later mutations fail Unavailable.
  void Shutdown();

 private:
  Membership(std::unique_ptr<CoordinatorState> state, absl::Duration dead_after,
             Env* env, uint64_t epoch, int64_t start_ms);
  int64_t NowMillis() const;
  absl::Status CheckRunning() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<CoordinatorState> state_;
  const absl::Duration dead_after_;
  Env* const env_;
  const int64_t start_ms_;  // the grace period for nodes found in the state
  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_MEMBERSHIP_H_
