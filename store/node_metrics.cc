// The memory node's /metrics page.
#include "store/node_metrics.h"

#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"

namespace meshpool::store {

std::string NodeMetricsText(const NodeMetricsInput& in) {
  const proto::NodeInfo& info = *in.info;
  const proto::NodeStats& s = *in.stats;
  const std::string& node = info.node_id();
  const std::string incarnation = absl::StrCat(info.incarnation());
  metrics::TextBuilder m;
  m.Gauge("meshpool_node_info",
          "The node process: 1, with its id, incarnation and host.", 1,
          {{"node", node},
           {"incarnation", incarnation},
           {"hostname", info.hostname()}});
  m.Gauge("meshpool_node_fenced",
          "1 once the coordinator declared this node dead: it serves nothing "
          "and should be "
          "restarted.",
          in.fenced ? 1 : 0, {{"node", node}});
  m.Gauge(
      "meshpool_node_heartbeat_age_seconds",
      "Seconds since the coordinator last answered a heartbeat (-1: never).",
      in.since_heartbeat == absl::InfiniteDuration()
          ? -1
          : absl::ToDoubleSeconds(in.since_heartbeat),
      {{"node", node}});
  m.Gauge("meshpool_node_capacity_bytes", "Pool size.", s.capacity_bytes(),
          {{"node", node}});
  m.Gauge("meshpool_node_used_bytes",
          "Bytes in slabs that are not free (leased, sealed, regions).",
          s.used_bytes(), {{"node", node}});
  m.Gauge("meshpool_node_objects",
          "Occupied index slots at the last reclamation pass.", s.objects(),
          {{"node", node}});
  m.Gauge("meshpool_node_index_slots", "Index slots in the pool.",
          s.index_slots(), {{"node", node}});
  for (const auto& [state, count] :
       {std::pair<const char*, uint64_t>{"free", s.slabs_free()},
        {"granted", s.slabs_granted()},
        {"sealed", s.slabs_sealed()},
        {"region", s.slabs_region()}}) {
    m.Gauge("meshpool_node_slabs", "Slabs by state (of slabs_total).", count,
            {{"node", node}, {"state", state}});
  }
  m.Gauge("meshpool_node_pool_slabs", "Slabs in the pool.", s.slabs_total(),
          {{"node", node}});
  m.Counter("meshpool_node_slab_grants_total",
            "Slab leases granted to clients.", in.slabs.grants,
            {{"node", node}});
  m.Counter("meshpool_node_slab_grant_requests_total",
            "GrantSlab calls, granted or refused for want of a free slab.",
            in.slabs.grant_requests, {{"node", node}});
  m.Counter("meshpool_node_slabs_reclaimed_total", "Slabs made free again.",
            s.slabs_reclaimed(), {{"node", node}});
  m.Counter("meshpool_node_slabs_evicted_total",
            "Slabs evicted under memory pressure.", s.slabs_evicted(),
            {{"node", node}});
  m.Counter("meshpool_node_objects_evicted_total",
            "Index slots evictions cleared.", s.objects_evicted(),
            {{"node", node}});
  m.Gauge("meshpool_node_regions", "Region allocations this node holds.",
          s.region_ids_size(), {{"node", node}});
  m.Gauge("meshpool_node_pinned_objects",
          "Objects pinned by live client sessions.", s.pinned_objects(),
          {{"node", node}});
  m.Gauge("meshpool_node_pinned_bytes", "Bytes of the pinned objects.",
          s.pinned_bytes(), {{"node", node}});
  m.Gauge("meshpool_node_sessions", "Open client sessions.", s.sessions_size(),
          {{"node", node}});
  // What clients counted against this node (its CPU never sees a GET or
  // PUT) and reported with their session renewals: every session since
  // the node started.
  const proto::KvClientStats& c = s.clients_total();
  m.Counter("meshpool_node_client_hits_total",
            "GET keys that found a value (client-reported).", c.hits(),
            {{"node", node}});
  m.Counter("meshpool_node_client_misses_total",
            "GET keys that found none (client-reported).", c.misses(),
            {{"node", node}});
  m.Counter("meshpool_node_client_puts_total",
            "Values stored (client-reported).", c.puts(), {{"node", node}});
  m.Counter("meshpool_node_client_bytes_in_total",
            "Value bytes written (client-reported).", c.bytes_in(),
            {{"node", node}});
  m.Counter("meshpool_node_client_bytes_out_total",
            "Value bytes read (client-reported).", c.bytes_out(),
            {{"node", node}});
  m.Counter("meshpool_node_client_pins_total",
            "Pins that held (client-reported).", c.pins(), {{"node", node}});
  return m.text();
}

}  // namespace meshpool::store
