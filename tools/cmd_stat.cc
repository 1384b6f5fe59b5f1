// `meshpool stat`: the cluster map with each node's memory, objects and
// KV-cache counters (hits, misses, evictions, bytes in and out, pinned
// bytes), per client what it reported to the nodes, and each region's
// health (copies lost, re-replication in progress).
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/json.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace meshpool::tools {
namespace {

void Add(KvStats& into, const KvStats& s) {
  into.hits += s.hits;
  into.misses += s.misses;
  into.puts += s.puts;
  into.bytes_in += s.bytes_in;
  into.bytes_out += s.bytes_out;
  into.pins += s.pins;
}

std::string KvJson(const KvStats& s) {
  return absl::StrCat("{\"hits\":", s.hits, ",\"misses\":", s.misses,
                      ",\"puts\":", s.puts, ",\"bytes_in\":", s.bytes_in,
                      ",\"bytes_out\":", s.bytes_out, ",\"pins\":", s.pins,
                      "}");
}

std::string NodeJson(const NodeStatus& n) {
  std::string sessions;
  for (const SessionStatus& s : n.sessions) {
    absl::StrAppend(&sessions, sessions.empty() ? "" : ",",
                    "{\"client\":", JsonQuote(s.client_id),
                    ",\"kv\":", KvJson(s.stats),
                    ",\"pinned_objects\":", s.pinned_objects,
                    ",\"pinned_bytes\":", s.pinned_bytes, "}");
  }
  return absl::StrCat(
      "{\"id\":", JsonQuote(n.node_id),
      ",\"alive\":", n.alive ? "true" : "false",
      ",\"address\":", JsonQuote(n.transport_address),
      ",\"metrics\":", JsonQuote(n.metrics_address),
      ",\"capacity_bytes\":", n.capacity_bytes,
      ",\"used_bytes\":", n.used_bytes, ",\"objects\":", n.objects,
      ",\"slabs_total\":", n.slabs_total, ",\"slabs_free\":", n.slabs_free,
      ",\"slabs_region\":", n.slabs_region,
      ",\"slabs_evicted\":", n.slabs_evicted,
      ",\"objects_evicted\":", n.objects_evicted,
      ",\"pinned_objects\":", n.pinned_objects,
      ",\"pinned_bytes\":", n.pinned_bytes, ",\"kv\":", KvJson(n.clients),
      ",\"sessions\":[", sessions, "],\"error\":", JsonQuote(n.error), "}");
}

void PrintTable(const ClusterStatus& status) {
  std::printf("cluster map epoch %llu\n",
              static_cast<unsigned long long>(status.epoch));
  std::printf("%-12s %-6s %-24s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "NODE",
              "STATE", "ADDRESS", "CAPACITY", "USED", "OBJECTS", "HITS",
              "MISSES", "EVICTED", "IN", "OUT", "PINNED");
  NodeStatus total;
  std::map<std::string, SessionStatus> clients;
  for (const NodeStatus& n : status.nodes) {
    std::printf(
        "%-12s %-6s %-24s %9s %9s %9llu %9llu %9llu %9llu %9s %9s %9s%s%s\n",
        n.node_id.c_str(), n.alive ? "alive" : "dead",
        n.transport_address.c_str(), FormatSize(n.capacity_bytes).c_str(),
        FormatSize(n.used_bytes).c_str(),
        static_cast<unsigned long long>(n.objects),
        static_cast<unsigned long long>(n.clients.hits),
        static_cast<unsigned long long>(n.clients.misses),
        static_cast<unsigned long long>(n.objects_evicted),
        FormatSize(n.clients.bytes_in).c_str(),
        FormatSize(n.clients.bytes_out).c_str(),
        FormatSize(n.pinned_bytes).c_str(), n.error.empty() ? "" : "  ! ",
        n.error.c_str());
    if (!n.alive) continue;
    total.capacity_bytes += n.capacity_bytes;
    total.used_bytes += n.used_bytes;
    total.objects += n.objects;
    total.objects_evicted += n.objects_evicted;
    total.pinned_bytes += n.pinned_bytes;
    Add(total.clients, n.clients);
    for (const SessionStatus& s : n.sessions) {
      SessionStatus& c = clients[s.client_id];
      Add(c.stats, s.stats);
      c.pinned_bytes += s.pinned_bytes;
      c.pinned_objects += s.pinned_objects;
    }
  }
  std::printf("%-12s %-6s %-24s %9s %9s %9llu %9llu %9llu %9llu %9s %9s %9s\n",
              "total", "", "", FormatSize(total.capacity_bytes).c_str(),
              FormatSize(total.used_bytes).c_str(),
              static_cast<unsigned long long>(total.objects),
              static_cast<unsigned long long>(total.clients.hits),
              static_cast<unsigned long long>(total.clients.misses),
              static_cast<unsigned long long>(total.objects_evicted),
              FormatSize(total.clients.bytes_in).c_str(),
              FormatSize(total.clients.bytes_out).c_str(),
              FormatSize(total.pinned_bytes).c_str());
  if (clients.empty()) return;
  std::printf("\n%-28s %9s %9s %9s %9s %9s %9s\n", "CLIENT", "HITS", "MISSES",
              "PUTS", "IN", "OUT", "PINNED");
  for (const auto& [id, c] : clients) {
    std::printf("%-28s %9llu %9llu %9llu %9s %9s %9s\n", id.c_str(),
                static_cast<unsigned long long>(c.stats.hits),
                static_cast<unsigned long long>(c.stats.misses),
                static_cast<unsigned long long>(c.stats.puts),
                FormatSize(c.stats.bytes_in).c_str(),
                FormatSize(c.stats.bytes_out).c_str(),
                FormatSize(c.pinned_bytes).c_str());
  }
}

std::string RegionJson(const RegionDescription& r) {
  const RegionHealth& h = r.health;
  return absl::StrCat("{\"name\":", JsonQuote(r.name), ",\"size\":", r.size,
                      ",\"replicas\":", r.replicas,
                      ",\"health\":", JsonQuote(RegionHealthName(h.state)),
                      ",\"stripes_degraded\":", h.stripes_degraded,
                      ",\"stripes_lost\":", h.stripes_lost,
                      ",\"repair_bytes_total\":", h.repair_bytes_total,
                      ",\"repair_bytes_done\":", h.repair_bytes_done,
                      ",\"repair_error\":", JsonQuote(h.repair_error), "}");
}

// What a region's health line says beyond its state.
std::string HealthDetail(const RegionHealth& h) {
  std::string out;
  if (h.stripes_lost > 0) {
    absl::StrAppend(&out, h.stripes_lost, " stripes have no copy left");
  } else if (h.stripes_degraded > 0) {
    absl::StrAppend(&out, h.stripes_degraded, " stripes lost a copy");
  }
  if (h.repair_bytes_total > 0) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "copying ",
                    FormatSize(h.repair_bytes_done), " of ",
                    FormatSize(h.repair_bytes_total));
  }
  if (!h.repair_error.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ",
                    "repair failed: ", h.repair_error);
  }
  return out;
}

void PrintRegions(const std::vector<RegionDescription>& regions) {
  if (regions.empty()) return;
  std::printf("\n%-32s %9s %8s %-9s %s\n", "REGION", "SIZE", "REPLICAS",
              "HEALTH", "");
  for (const RegionDescription& r : regions) {
    std::printf("%-32s %9s %8u %-9s %s\n", r.name.c_str(),
                FormatSize(r.size).c_str(), r.replicas,
                RegionHealthName(r.health.state),
                HealthDetail(r.health).c_str());
  }
}

// Per live node, what changed since `before` (`seconds` ago): client
// reported GETs, hit ratio, PUTs and bytes per second.
void PrintRates(const ClusterStatus& before, const ClusterStatus& now,
                double seconds) {
  std::printf("\n%-12s %10s %6s %10s %10s %10s   (client-reported, per s)\n",
              "NODE", "GET/s", "HIT%", "PUT/s", "IN/s", "OUT/s");
  for (const NodeStatus& n : now.nodes) {
    if (!n.alive) continue;
    const NodeStatus* old = nullptr;
    for (const NodeStatus& b : before.nodes) {
      if (b.node_id == n.node_id) old = &b;
    }
    KvStats d;
    if (old != nullptr && old->clients.hits <= n.clients.hits) {
      d.hits = n.clients.hits - old->clients.hits;
      d.misses = n.clients.misses - old->clients.misses;
      d.puts = n.clients.puts - old->clients.puts;
      d.bytes_in = n.clients.bytes_in - old->clients.bytes_in;
      d.bytes_out = n.clients.bytes_out - old->clients.bytes_out;
    }
    const uint64_t gets = d.hits + d.misses;
    std::printf(
        "%-12s %10.0f %6s %10.0f %9s %9s\n", n.node_id.c_str(), gets / seconds,
        gets == 0 ? "-" : absl::StrCat(100 * d.hits / gets, "%").c_str(),
        d.puts / seconds,
        absl::StrCat(FormatSize(static_cast<uint64_t>(d.bytes_in / seconds)))
            .c_str(),
        absl::StrCat(FormatSize(static_cast<uint64_t>(d.bytes_out / seconds)))
            .c_str());
  }
}

}  // namespace

int RunTop(int argc, char** argv) {
  Flags flags("meshpool top [--interval 1s] [--iterations N]",
              "Shows the cluster live in the terminal, refreshed every "
              "interval: nodes (capacity, use, objects, counters), the rates "
              "since the last refresh (GETs, hit ratio, PUTs, bytes in and "
              "out, as clients report them with their session renewals, so "
              "they trail by up to a few seconds) and region health. Ctrl-C "
              "quits.");
  DefineClientFlags(flags);
  flags.Define("interval", "1s", "time between refreshes");
  flags.Define("iterations", "0",
               "refresh this many times, then exit (0: until Ctrl-C)");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "top", 0, 0, &rc);
  if (!client) return rc;
  auto interval = flags.GetDuration("interval");
  auto iterations = flags.GetInt("iterations");
  if (!interval.ok()) return Fail("top", interval.status());
  if (!iterations.ok()) return Fail("top", iterations.status());
  if (*interval <= absl::ZeroDuration()) {
    return Fail("top", absl::InvalidArgumentError(
                           "--interval must be positive, e.g. 1s"));
  }
  const bool tty = isatty(STDOUT_FILENO);
  absl::StatusOr<ClusterStatus> before = client->Status();
  if (!before.ok()) return Fail("top", before.status());
  absl::Time last = absl::Now();
  for (int64_t i = 0; *iterations == 0 || i < *iterations; ++i) {
    absl::SleepFor(*interval);
    absl::StatusOr<ClusterStatus> now = client->Status();
    auto regions = ListRegions(*client, "");
    const absl::Time at = absl::Now();
    if (tty) std::fputs("\033[H\033[2J", stdout);  // home, clear
    std::printf("meshpool top  %s  every %s\n",
                absl::FormatTime("%H:%M:%S", at, absl::LocalTimeZone()).c_str(),
                absl::FormatDuration(*interval).c_str());
    if (!now.ok()) {
      std::printf("\ncluster unreachable: %s (retrying)\n",
                  ForCommandLine(now.status().message()).c_str());
      std::fflush(stdout);
      continue;
    }
    PrintTable(*now);
    PrintRates(*before, *now, absl::ToDoubleSeconds(at - last));
    if (regions.ok()) PrintRegions(*regions);
    std::fflush(stdout);
    before = std::move(now);
    last = at;
  }
  return 0;
}

int RunStat(int argc, char** argv) {
  Flags flags("meshpool stat [--json]",
              "Shows the cluster map: nodes, capacity, used bytes, objects, "
              "and KV-cache counters per node and per client (hits, misses, "
              "evictions, bytes in/out, pinned bytes), and each region's "
              "health: healthy, degraded (a node holding copies died; the "
              "coordinator is copying them elsewhere) or lost. Client "
              "counters are what clients reported with their last session "
              "renewal.");
  DefineClientFlags(flags);
  flags.DefineBool("json", "print JSON");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "stat", 0, 0, &rc);
  if (!client) return rc;
  auto status = client->Status();
  if (!status.ok()) return Fail("stat", status.status());
  auto regions = ListRegions(*client, "");
  if (!regions.ok()) return Fail("stat", regions.status());
  if (!flags.GetBool("json")) {
    PrintTable(*status);
    PrintRegions(*regions);
    return 0;
  }
  std::string out = absl::StrCat("{\"epoch\":", status->epoch, ",\"nodes\":[");
  for (size_t i = 0; i < status->nodes.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", NodeJson(status->nodes[i]));
  }
  absl::StrAppend(&out, "],\"regions\":[");
  for (size_t i = 0; i < regions->size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", RegionJson((*regions)[i]));
  }
  absl::StrAppend(&out, "]}\n");
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace meshpool::tools
