// meshpool/store/node_metrics.h: what a memory node shows on /metrics
// (Prometheus text; metrics/metrics.h serves it). Every sample carries the
// node's id as label `node`.
//
// Pure functions: thread-safe.
#ifndef MESHPOOL_STORE_NODE_METRICS_H_
#define MESHPOOL_STORE_NODE_METRICS_H_

#include <string>

#include "absl/time/time.h"
#include "proto/meshpool.pb.h"
#include "store/slab_manager.h"

namespace meshpool::store {

// One moment of a node, as its metrics page reports it.
struct NodeMetricsInput {
  const proto::NodeInfo* info = nullptr;
  const proto::NodeStats* stats = nullptr;  // Node::Stats()
  SlabCounts slabs;                         // SlabManager::Counts()
  // Since the last heartbeat the coordinator answered (InfiniteDuration:
  // none yet).
  absl::Duration since_heartbeat = absl::InfiniteDuration();
  bool fenced = false;  // declared dead: serves nothing
};

// The /metrics page. REQUIRES: info and stats are set.
std::string NodeMetricsText(const NodeMetricsInput& in);

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_NODE_METRICS_H_
