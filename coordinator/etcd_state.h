// meshpool/coordinator/etcd_state.h: the coordinator's state kept in etcd
// (`meshpool coordinator --etcd ENDPOINTS`), so that it survives the
// coordinator and the loss of a minority of etcd members.
//
// Keys, under a prefix (default "/meshpool/"):
//   map              the cluster map (proto::ClusterMap): epoch, and each
//                    node's info and state (no heartbeat times, no stats)
//   next_region_id   the next region id, decimal
//   regions/<name>   one proto::RegionInfo per region
// Liveness (heartbeat times, stats) is kept in memory only, as in the file
// state; nodes marked alive count as heard from when the state is loaded.
//
// This process keeps a mirror of those keys in memory and serves reads and
// heartbeats from it, so neither ever waits on etcd (a leader keeps
// serving through an etcd election). Every change is written to etcd (one
// transaction) before it is acknowledged, and the mirror keeps it only
// when etcd took it. The writer may be fenced by a guard: with
// EtcdStateOptions.guard set, every transaction also requires that key to
// still have the given create revision (the coordinator's leadership key),
// so a deposed leader's writes fail (FailedPrecondition) instead of
// landing. A write that went unanswered (Unavailable: etcd may have
// applied it) makes the next write reload the mirror from etcd first.
//
// Limits: etcd refuses requests over its --max-request-bytes (1.5 MiB by
// default): a region whose placement table is larger (more than about
// 100,000 stripe copies) cannot be recorded (ResourceExhausted).
//
// Thread-safe; each method is atomic (one lock around the mirror and the
// write).
#ifndef MESHPOOL_COORDINATOR_ETCD_STATE_H_
#define MESHPOOL_COORDINATOR_ETCD_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/etcd_client.h"

namespace meshpool::coordinator {

struct EtcdStateOptions {
  std::string prefix = "/meshpool/";
  // Region ids start here in an empty store (see FirstRegionIdAt).
  uint64_t first_region_id = 1;
  // Fencing: a key and the create revision it must still have for any
  // write to land.
  struct Guard {
    std::string key;
    int64_t create_revision = 0;
  };
  std::optional<Guard> guard;
  Env* env = nullptr;  // the load-time clock; null: Env::Default()
};

// The state in etcd through `client` (shared: the coordinator's election
// uses it too). Loads the keys once (Unavailable when etcd does not
// answer; DataLoss, naming the key, when one does not parse;
// InvalidArgument for a prefix that does not end in '/').
absl::StatusOr<std::unique_ptr<CoordinatorState>> OpenEtcdCoordinatorState(
    std::shared_ptr<EtcdClient> client, EtcdStateOptions options);

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_ETCD_STATE_H_
