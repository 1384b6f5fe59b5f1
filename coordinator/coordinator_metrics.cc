// The coordinator's /metrics page: membership, regions and their health,
// re-replication.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/membership.h"
#include "coordinator/region_table.h"
#include "metrics/metrics.h"

namespace meshpool::coordinator {
namespace {

const char* HealthLabel(proto::RegionHealthState state) {
  switch (state) {
    case proto::REGION_HEALTHY:
      return "healthy";
    case proto::REGION_DEGRADED:
      return "degraded";
    case proto::REGION_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

void AddNodes(metrics::TextBuilder& m, const proto::ClusterMap& map,
              absl::Time now) {
  m.Gauge("meshpool_coordinator_epoch", "Cluster map epoch.", map.epoch());
  uint64_t alive = 0;
  for (const proto::NodeEntry& e : map.nodes())
    alive += e.state() == proto::NODE_ALIVE;
  m.Gauge("meshpool_coordinator_nodes", "Memory nodes in the map, by state.",
          alive, {{"state", "alive"}});
  m.Gauge("meshpool_coordinator_nodes", "Memory nodes in the map, by state.",
          map.nodes_size() - alive, {{"state", "dead"}});
  for (const proto::NodeEntry& e : map.nodes()) {
    const std::string& node = e.info().node_id();
    m.Gauge("meshpool_coordinator_node_alive",
            "1 while the node is NODE_ALIVE.",
            e.state() == proto::NODE_ALIVE ? 1 : 0, {{"node", node}});
  }
  for (const proto::NodeEntry& e : map.nodes()) {
    if (e.last_heartbeat_unix_ms() == 0) continue;
    m.Gauge("meshpool_coordinator_node_heartbeat_age_seconds",
            "Seconds since the node's last heartbeat or registration.",
            absl::ToDoubleSeconds(
                now - absl::FromUnixMillis(e.last_heartbeat_unix_ms())),
            {{"node", e.info().node_id()}});
  }
  for (const proto::NodeEntry& e : map.nodes()) {
    if (e.state() != proto::NODE_ALIVE) continue;
    m.Gauge("meshpool_coordinator_node_capacity_bytes",
            "A live node's pool (last heartbeat).", e.stats().capacity_bytes(),
            {{"node", e.info().node_id()}});
  }
  for (const proto::NodeEntry& e : map.nodes()) {
    if (e.state() != proto::NODE_ALIVE) continue;
    m.Gauge("meshpool_coordinator_node_used_bytes",
            "A live node's used bytes (last heartbeat).",
            e.stats().used_bytes(), {{"node", e.info().node_id()}});
  }
}

void AddRegions(metrics::TextBuilder& m,
                const std::vector<proto::RegionInfo>& regions) {
  std::map<std::string, uint64_t> by_health = {
      {"healthy", 0}, {"degraded", 0}, {"lost", 0}, {"unknown", 0}};
  uint64_t bytes = 0;
  for (const proto::RegionInfo& r : regions) {
    ++by_health[HealthLabel(r.health().state())];
    bytes += r.size();
  }
  for (const auto& [health, count] : by_health) {
    m.Gauge("meshpool_coordinator_regions", "Regions by health.", count,
            {{"health", health}});
  }
  m.Gauge("meshpool_coordinator_region_bytes",
          "Bytes of all regions (one copy each).", bytes);
  // Per region only where something is wrong: a healthy cluster's page
  // stays short however many regions it holds.
  for (const proto::RegionInfo& r : regions) {
    const proto::RegionHealth& h = r.health();
    if (h.state() == proto::REGION_HEALTHY) continue;
    m.Gauge("meshpool_coordinator_region_stripes_degraded",
            "Stripes of the region that lost a copy (one left).",
            h.stripes_degraded(), {{"region", r.name()}});
    m.Gauge("meshpool_coordinator_region_stripes_lost",
            "Stripes of the region with no copy left.", h.stripes_lost(),
            {{"region", r.name()}});
    m.Gauge("meshpool_coordinator_region_repair_bytes_to_copy",
            "Bytes the region's repair in progress copies (0: none).",
            h.repair_bytes_total(), {{"region", r.name()}});
    m.Gauge("meshpool_coordinator_region_repair_bytes_copied",
            "Bytes the region's repair in progress has copied.",
            h.repair_bytes_done(), {{"region", r.name()}});
  }
}

}  // namespace

std::string Coordinator::MetricsPage() const {
  metrics::TextBuilder m;
  // One coordinator serves every write; with several (etcd), only the
  // leader will report 1.
  m.Gauge("meshpool_coordinator_leader",
          "1 when this coordinator serves writes (the leader).", 1);
  absl::StatusOr<proto::ClusterMap> map = membership_->Map();
  m.Gauge("meshpool_coordinator_state_readable",
          "1 while the state can be read.", map.ok() ? 1 : 0);
  if (map.ok()) AddNodes(m, *map, env_->Now());
  absl::StatusOr<std::vector<proto::RegionInfo>> regions = regions_->List("");
  if (regions.ok()) AddRegions(m, *regions);
  const bool repairing = repairer_ != nullptr;
  m.Gauge("meshpool_coordinator_repair_enabled",
          "1 when this coordinator re-replicates.", repairing ? 1 : 0);
  const RegionRepairer::Counters c =
      repairing ? repairer_->counters() : RegionRepairer::Counters();
  m.Counter("meshpool_coordinator_repairs_total", "Region repairs recorded.",
            c.repaired);
  m.Counter("meshpool_coordinator_repair_failures_total",
            "Region repair attempts that failed.", c.failed);
  m.Counter("meshpool_coordinator_repair_bytes_copied_total",
            "Bytes of stripe copies the recorded repairs restored.",
            c.bytes_copied);
  return m.text();
}

}  // namespace meshpool::coordinator
