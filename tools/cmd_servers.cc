// Server subcommands: coordinator, node, up, demo.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/common.h"
#include "coordinator/coordinator.h"
#include "meshpool/client.h"
#include "rdma/rdma.h"
#include "store/evictor.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/local_cluster.h"
#include "tools/repair_copier.h"
#include "tools/stderr_env.h"
#include "tools/tls.h"
#include "tools/transport_flags.h"
#include "tools/workload.h"

namespace meshpool::tools {

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "meshpool %s: %s\n", command,
               ForCommandLine(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int ParseFlags(Flags& flags, int argc, char** argv, const char* command) {
  absl::Status s = flags.Parse(argc, argv);
  if (!s.ok()) return Fail(command, s);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  return -1;
}

int RunCoordinator(int argc, char** argv) {
  Flags flags("meshpool coordinator [--listen HOST:PORT]",
              "Runs the coordinator: nodes register and heartbeat with it; "
              "clients fetch and watch the cluster map. Stops on Ctrl-C.");
  flags.Define("listen", "127.0.0.1:7070", "address to serve on (port 0: any)");
  flags.Define("heartbeat-interval", "500ms", "how often nodes heartbeat");
  flags.Define("dead-after", "3s", "declare a silent node dead after this");
  flags.Define("max-node-bytes", "0",
               "refuse nodes that report a larger pool (placement weighs "
               "nodes by it); 0: the largest pool a node can address");
  flags.Define("registrations-per-minute",
               std::to_string(coordinator::kDefaultRegistrationsPerMinute),
               "node registrations one caller (certificate, or host "
               "without TLS) may make a minute; 0: no limit");
  flags.Define("forget-dead-after", "1h",
               "a dead node's entry leaves the cluster map this long after "
               "its last heartbeat (0: never); its id may then be reused");
  flags.Define("region-quota", "",
               "per-tenant caps on regions: TENANT=REGIONS:BYTES,... (e.g. "
               "team-a=16:64GiB,*=4:8GiB; - for no limit; TENANT * is "
               "everyone without an entry, - the callers without a tenant)");
  flags.Define("state-dir", "",
               "keep the state (regions, model names, node incarnations and "
               "fences) in this directory, so a restart or crash loses no "
               "acknowledged change (default: memory only)");
  flags.Define("reconcile-every", "10s",
               "with --state-dir: how often to free region memory nodes "
               "report that no region holds (left by a create a crash cut "
               "short)");
  flags.DefineBool("no-repair",
                   "do not re-replicate: regions that lose copies with a dead "
                   "node stay degraded (default: the coordinator copies lost "
                   "copies to other live nodes, through its own client of "
                   "the data plane)");
  flags.Define("repair-every", "1s",
               "how often to look for regions that lost copies");
  flags.Define("metrics-listen", "",
               "serve Prometheus metrics (/metrics) and a health check "
               "(/healthz) over HTTP on HOST:PORT (port 0: any; default: "
               "none)");
  flags.Define("etcd", "",
               "keep the state in etcd at HOST:PORT[,HOST:PORT...] instead "
               "(several coordinators may share it: one leads, the others "
               "wait as standbys and take over when it goes)");
  flags.Define("etcd-prefix", "/meshpool/",
               "the etcd keys' prefix (one per cluster)");
  flags.Define("advertise", "",
               "with --etcd: the HOST:PORT standbys send clients to while "
               "this coordinator leads (default: the --listen address; "
               "give it when listening on 0.0.0.0)");
  DefineTransportFlags(flags, /*with_transport=*/false);
  DefineTlsFlags(flags, /*server=*/true);
  if (int rc = ParseFlags(flags, argc, argv, "coordinator"); rc >= 0) return rc;
  coordinator::CoordinatorOptions options;
  auto tls = TlsFromFlags(flags, "coordinator");
  if (!tls.ok()) return Fail("coordinator", tls.status());
  options.tls = *tls;
  options.insecure = flags.GetBool("insecure");
  if (!flags.GetBool("no-repair")) {
    auto repair_every = flags.GetDuration("repair-every");
    if (!repair_every.ok()) return Fail("coordinator", repair_every.status());
    auto rdma = ClientRdmaFromFlags(flags);
    if (!rdma.ok()) return Fail("coordinator", rdma.status());
    ClientOptions copier;
    copier.rdma = *std::move(rdma);
    copier.tls_ca_file = tls->ca_file;
    copier.tls_cert_file = tls->cert_file;
    copier.tls_key_file = tls->key_file;
    options.stripe_copier = ClientStripeCopier(std::move(copier));
    options.repair_every = *repair_every;
  }
  options.env = StderrEnv();
  options.listen = flags.Get("listen");
  options.state_dir = flags.Get("state-dir");
  options.metrics_listen = flags.Get("metrics-listen");
  options.etcd = flags.Get("etcd");
  options.etcd_prefix = flags.Get("etcd-prefix");
  if (!options.etcd.empty() && !options.state_dir.empty()) {
    return Fail("coordinator", absl::InvalidArgumentError(
                                   "give --state-dir or --etcd, not both"));
  }
  options.advertise = flags.Get("advertise");
  // A standby prints a line when it stands by and another when it leads;
  // whoever read the first may have closed our stdout (meshpool up does).
  ::signal(SIGPIPE, SIG_IGN);
  static std::atomic<bool> lost_lead{false};
  options.on_lost_lead = [] {
    lost_lead = true;
    ::kill(::getpid(), SIGTERM);  // wakes the signal thread below
  };
  // Standby and leader alike stop on Ctrl-C or SIGTERM: one thread waits
  // for the signal (blocked in every thread, so only sigwait sees it).
  BlockStopSignals();
  static std::atomic<bool> stop{false};
  static absl::Notification stopped;
  std::thread([] {
    WaitForStopSignal();
    stop = true;
    stopped.Notify();
  }).detach();
  options.stop_waiting = [] { return stop.load(); };
  options.on_standby = [](const std::string& address) {
    // Not "listening on": LocalCluster and tests take that line to mean
    // this coordinator leads.
    std::printf("meshpool coordinator standing by on %s\n", address.c_str());
    std::fflush(stdout);
  };
  auto interval = flags.GetDuration("heartbeat-interval");
  auto dead = flags.GetDuration("dead-after");
  if (!interval.ok()) return Fail("coordinator", interval.status());
  if (!dead.ok()) return Fail("coordinator", dead.status());
  options.heartbeat_interval = *interval;
  options.dead_after = *dead;
  auto max_node_bytes = flags.GetSize("max-node-bytes");
  auto registrations = flags.GetInt("registrations-per-minute");
  if (!max_node_bytes.ok()) return Fail("coordinator", max_node_bytes.status());
  if (!registrations.ok()) return Fail("coordinator", registrations.status());
  if (*registrations < 0 || *registrations > 1'000'000) {
    return Fail("coordinator",
                absl::InvalidArgumentError(
                    "--registrations-per-minute: give 0 (no limit) to "
                    "1000000"));
  }
  options.registration.max_node_bytes = *max_node_bytes;
  options.registration.registrations_per_minute =
      static_cast<int>(*registrations);
  auto forget = flags.GetDuration("forget-dead-after");
  if (!forget.ok()) return Fail("coordinator", forget.status());
  if (*forget < absl::ZeroDuration()) {
    return Fail("coordinator", absl::InvalidArgumentError(
                                   "--forget-dead-after: give 0 (never) or a "
                                   "duration such as 1h"));
  }
  options.registration.forget_dead_after = *forget;
  auto quotas = coordinator::RegionQuotas::Parse(flags.Get("region-quota"));
  if (!quotas.ok()) return Fail("coordinator", quotas.status());
  options.region_quotas = *std::move(quotas);
  auto reconcile = flags.GetDuration("reconcile-every");
  if (!reconcile.ok()) return Fail("coordinator", reconcile.status());
  if (!options.state_dir.empty()) options.reconcile_every = *reconcile;
  auto coordinator = coordinator::Coordinator::Start(std::move(options));
  if (!coordinator.ok()) {
    if (absl::IsCancelled(coordinator.status())) return 0;  // stopped waiting
    return Fail("coordinator", coordinator.status());
  }
  // LocalCluster reads this line: keep the address as the last word.
  std::printf("meshpool coordinator listening on %s\n",
              (*coordinator)->address().c_str());
  if (!(*coordinator)->metrics_url().empty()) {
    std::printf("meshpool coordinator metrics on %s\n",
                (*coordinator)->metrics_url().c_str());
  }
  std::fflush(stdout);
  stopped.WaitForNotification();
  (*coordinator)->Shutdown();
  if (lost_lead) {
    std::fprintf(stderr,
                 "meshpool coordinator: lost the lead (etcd unreachable for "
                 "the lease's TTL, or another coordinator took over); start "
                 "it again to stand by\n");
    return 1;
  }
  return 0;
}

namespace {

// Eviction and session flags, shared by `meshpool node` and the local
// cluster commands (which pass them on to their nodes).
void DefineEvictionFlags(Flags& flags) {
  flags.DefineBool("evict",
                   "evict KV objects when the pool fills (default; "
                   "--evict=false or --no-evict turns it off: a full pool "
                   "then refuses writes)");
  flags.DefineBool("no-evict", "do not evict: a full pool refuses writes");
  flags.Define("evict-high", "0.9",
               "start evicting above this fraction of slabs in use");
  flags.Define("evict-low", "0.8", "evict down to this fraction of slabs");
  flags.Define("session-lease", "10s",
               "a client session (and its pins) ends this long after its "
               "last renewal");
}

absl::Status EvictionFromFlags(const Flags& flags, store::NodeOptions* o) {
  const std::string evict = flags.Get("evict");
  if (evict.empty() || evict == "true" || evict == "1" || evict == "yes") {
    o->evict = true;
  } else if (evict == "false" || evict == "0" || evict == "no") {
    o->evict = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--evict wants true or false, got '", evict, "'"));
  }
  if (flags.GetBool("no-evict")) o->evict = false;
  MESHPOOL_ASSIGN_OR_RETURN(o->evict_high_watermark,
                            flags.GetDouble("evict-high"));
  MESHPOOL_ASSIGN_OR_RETURN(o->evict_low_watermark,
                            flags.GetDouble("evict-low"));
  MESHPOOL_ASSIGN_OR_RETURN(o->session_lease,
                            flags.GetDuration("session-lease"));
  return absl::OkStatus();
}

// The same settings as `meshpool node` arguments.
std::vector<std::string> EvictionArgs(const store::NodeOptions& o) {
  return {absl::StrCat("--evict=", o.evict ? "true" : "false"),
          "--evict-high",
          absl::StrCat(o.evict_high_watermark),
          "--evict-low",
          absl::StrCat(o.evict_low_watermark),
          "--session-lease",
          absl::FormatDuration(o.session_lease)};
}

}  // namespace

int RunNode(int argc, char** argv) {
  Flags flags("meshpool node --coordinator HOST:PORT --capacity SIZE",
              "Runs a memory node: maps a pool of SIZE bytes, serves it to "
              "clients over the transport, registers with the coordinator. "
              "Stops on Ctrl-C.");
  flags.Define("coordinator", "",
               "coordinator address (or MESHPOOL_COORDINATOR)");
  flags.Define("capacity", "1GiB", "pool size, e.g. 512MiB, 8GiB");
  flags.Define("node-id", "",
               "node name (default: assigned by the coordinator)");
  flags.Define("listen", "127.0.0.1:0", "control-plane (gRPC) address");
  DefineTransportFlags(flags, /*with_transport=*/true);
  flags.Define("bind", "127.0.0.1:0", "data transport address (tcp)");
  flags.Define("advertise", "",
               "host clients dial (required when --listen/--bind use 0.0.0.0)");
  flags.Define("slab-size", "0", "slab size granted to clients (0: automatic)");
  flags.Define("index-buckets", "0", "index buckets of 8 slots (0: pool/4KiB)");
  flags.Define("slab-lease", "10s",
               "how long a client may fill a granted slab");
  flags.Define("read-lease", "500ms",
               "longest GET; freed memory waits this long");
  flags.DefineBool("no-huge-pages", "do not try 2 MiB huge pages");
  flags.DefineBool("no-shm",
                   "do not serve same-host clients over shared memory");
  flags.Define("shm-socket", "",
               "unix socket for same-host clients (default: under /tmp)");
  flags.Define("shm-allow-uid", "",
               "exactly the user ids (comma-separated) whose processes may "
               "map the pool over the shm socket; name the node's own user "
               "too (default: the node's user and root; others use the "
               "network address; with --shm-socket, pick a directory they "
               "can reach)");
  flags.Define("tenant-sessions", "0",
               "at most this many client sessions (pin tables) per tenant "
               "(callers without a tenant: per certificate; without TLS all "
               "callers are one); 0: no cap");
  flags.Define("tenant-slabs", "0",
               "at most this many slabs leased for writing per tenant at "
               "once (counted as --tenant-sessions); 0: no cap");
  flags.Define("metrics-listen", "",
               "serve Prometheus metrics (/metrics) and a health check "
               "(/healthz) over HTTP on HOST:PORT (port 0: any; default: "
               "none); published in the cluster map");
  DefineEvictionFlags(flags);
  DefineTlsFlags(flags, /*server=*/true);
  if (int rc = ParseFlags(flags, argc, argv, "node"); rc >= 0) return rc;
  store::NodeOptions options;
  auto tls = TlsFromFlags(flags, flags.Get("node-id"));
  if (!tls.ok()) return Fail("node", tls.status());
  options.tls = *tls;
  options.insecure = flags.GetBool("insecure");
  options.env = StderrEnv();
  if (absl::Status s = EvictionFromFlags(flags, &options); !s.ok()) {
    return Fail("node", s);
  }
  auto coordinator = CoordinatorAddress(flags);
  if (!coordinator.ok()) return Fail("node", coordinator.status());
  options.coordinator = *coordinator;
  auto capacity = flags.GetSize("capacity");
  auto slab = flags.GetSize("slab-size");
  auto buckets = flags.GetInt("index-buckets");
  auto slab_lease = flags.GetDuration("slab-lease");
  auto read_lease = flags.GetDuration("read-lease");
  auto tenant_sessions = flags.GetInt("tenant-sessions");
  auto tenant_slabs = flags.GetInt("tenant-slabs");
  for (const absl::Status& s :
       {capacity.status(), slab.status(), buckets.status(), slab_lease.status(),
        read_lease.status(), tenant_sessions.status(), tenant_slabs.status()}) {
    if (!s.ok()) return Fail("node", s);
  }
  if (*tenant_slabs < 0) {
    return Fail("node", absl::InvalidArgumentError(
                            "--tenant-slabs: give 0 (no cap) or a count of "
                            "slabs, e.g. 16"));
  }
  options.max_granted_slabs_per_tenant = static_cast<uint64_t>(*tenant_slabs);
  if (*tenant_sessions < 0 || *tenant_sessions > int64_t{UINT32_MAX}) {
    return Fail("node", absl::InvalidArgumentError(
                            "--tenant-sessions: give 0 (no cap) or a count "
                            "of sessions, e.g. 64"));
  }
  options.max_sessions_per_tenant = static_cast<uint32_t>(*tenant_sessions);
  options.capacity_bytes = *capacity;
  options.slab_bytes = *slab;
  options.bucket_count = static_cast<uint64_t>(std::max<int64_t>(0, *buckets));
  options.node_id = flags.Get("node-id");
  options.control_listen = flags.Get("listen");
  options.transport_bind = flags.Get("bind");
  options.advertise_host = flags.Get("advertise");
  options.slab_lease = *slab_lease;
  options.max_read_lease = *read_lease;
  options.huge_pages = !flags.GetBool("no-huge-pages");
  options.shm = !flags.GetBool("no-shm");
  options.shm_socket = flags.Get("shm-socket");
  for (absl::string_view uid :
       absl::StrSplit(flags.Get("shm-allow-uid"), ',', absl::SkipEmpty())) {
    uint32_t value = 0;
    if (!absl::SimpleAtoi(uid, &value)) {
      return Fail("node", absl::InvalidArgumentError(absl::StrCat(
                              "--shm-allow-uid: '", uid,
                              "' is not a user id; give numbers, e.g. "
                              "--shm-allow-uid 1000,1001")));
    }
    options.shm_allowed_uids.push_back(value);
  }
  options.metrics_listen = flags.Get("metrics-listen");
  static std::atomic<bool> declared_dead{false};
  options.on_declared_dead = [] {
    declared_dead = true;
    ::kill(::getpid(), SIGTERM);  // wakes WaitForStopSignal below
  };
  BlockStopSignals();
  auto transport = NodeTransportFromFlags(flags, options.tls.enabled());
  if (!transport.ok()) return Fail("node", transport.status());
  auto node = store::Node::Start(std::move(options), *std::move(transport));
  if (!node.ok()) return Fail("node", node.status());
  const proto::NodeInfo& info = (*node)->info();
  std::printf("meshpool node %s serving %s at %s (control %s)\n",
              info.node_id().c_str(), FormatSize(info.capacity_bytes()).c_str(),
              info.transport_addresses(0).c_str(),
              info.control_address().c_str());
  std::fflush(stdout);
  WaitForStopSignal();
  (*node)->Shutdown();
  if (declared_dead) {
    std::fprintf(stderr,
                 "meshpool node: the coordinator declared this node dead; it "
                 "stopped serving because its memory may be stale. Restart "
                 "it to rejoin with an empty pool.\n");
    return 1;
  }
  return 0;
}

namespace {

absl::StatusOr<LocalClusterOptions> ClusterFlags(const Flags& flags) {
  LocalClusterOptions options;
  auto nodes = flags.GetInt("nodes");
  auto capacity = flags.GetSize("capacity");
  auto port = flags.GetInt("port");
  if (!nodes.ok()) return nodes.status();
  if (!capacity.ok()) return capacity.status();
  if (!port.ok()) return port.status();
  if (*nodes < 1 || *nodes > 64) {
    return absl::InvalidArgumentError("--nodes must be between 1 and 64");
  }
  options.nodes = static_cast<int>(*nodes);
  options.capacity_bytes = *capacity;
  options.coordinator_port = static_cast<int>(*port);
  options.quiet = !flags.GetBool("verbose");
  MESHPOOL_RETURN_IF_ERROR(ResolveTransport(flags).status());
  options.node_args = TransportArgs(flags);
  // The coordinator's repair client uses the same RDMA devices (not
  // --transport, which is the nodes' choice).
  options.coordinator_args = RdmaArgs(flags);
  store::NodeOptions node;
  MESHPOOL_RETURN_IF_ERROR(EvictionFromFlags(flags, &node));
  MESHPOOL_RETURN_IF_ERROR(store::CheckWatermarks(node.evict_high_watermark,
                                                  node.evict_low_watermark));
  for (std::string& arg : EvictionArgs(node)) {
    options.node_args.push_back(std::move(arg));
  }
  if (flags.GetBool("no-shm")) options.node_args.push_back("--no-shm");
  options.tls_dir = flags.Get("tls-dir");
  return options;
}

void DefineClusterFlags(Flags& flags, const char* default_port) {
  flags.Define("nodes", "3", "memory nodes to start");
  flags.Define("capacity", "256MiB", "pool size of each node");
  flags.Define("port", default_port, "coordinator port (0: any free port)");
  flags.DefineBool("verbose", "show the nodes' and coordinator's logs");
  DefineTransportFlags(flags, /*with_transport=*/true);
  DefineEvictionFlags(flags);
  flags.DefineBool("no-shm",
                   "nodes do not serve this host's clients over shared "
                   "memory (they then use the network transport)");
  flags.Define("tls-dir", "",
               "run the control plane over TLS with the certificates in DIR "
               "(`meshpool certs init DIR`); clients then need "
               "MESHPOOL_TLS_DIR=DIR or --tls-dir DIR");
}

}  // namespace

int RunUp(int argc, char** argv) {
  Flags flags("meshpool up [--nodes N] [--capacity SIZE]",
              "Runs a local cluster in the foreground: a coordinator and N "
              "memory nodes, each its own process on 127.0.0.1 (verbs when "
              "an RDMA device is active, else TCP). Prints the coordinator "
              "address; Ctrl-C stops all. A node that dies is reported and "
              "the cluster serves on without it; a coordinator that dies is "
              "started again from its state directory.");
  DefineClusterFlags(flags, "7070");
  flags.DefineBool("restart-nodes", "start a memory node again when it dies");
  flags.Define("state-dir", "",
               "keep the coordinator's state (regions, models, node "
               "incarnations) here; a coordinator that dies is started again "
               "from it (default: a new directory under $TMPDIR, removed at "
               "exit)");
  flags.DefineBool("no-state",
                   "keep the coordinator's state in memory only: a "
                   "coordinator that dies stops the cluster");
  flags.Define("coordinators", "1",
               "coordinators to run; above 1 they share a local etcd "
               "(its data in the state directory): one leads, the others "
               "stand by, and killing the leader shows a failover");
  if (int rc = ParseFlags(flags, argc, argv, "up"); rc >= 0) return rc;
  auto options = ClusterFlags(flags);
  if (!options.ok()) return Fail("up", options.status());
  auto coordinators = flags.GetInt("coordinators");
  if (!coordinators.ok()) return Fail("up", coordinators.status());
  options->coordinators = static_cast<int>(*coordinators);
  // The state directory: given, or made for this run (and removed at exit).
  std::string made_state_dir;
  if (!flags.GetBool("no-state")) {
    options->state_dir = flags.Get("state-dir");
    if (options->state_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                         "/meshpool-up-XXXXXX");
      if (mkdtemp(pattern.data()) == nullptr) {
        return Fail("up", ErrnoToStatus(errno, "creating a state directory"));
      }
      made_state_dir = options->state_dir = pattern;
    }
  }
  BlockStopSignals();
  auto cluster = LocalCluster::Start(*options);
  if (!cluster.ok()) {
    if (!made_state_dir.empty()) std::filesystem::remove_all(made_state_dir);
    return Fail("up", cluster.status());
  }
  std::printf(
      "meshpool cluster up: coordinator %s, %d nodes x %s\n"
      "  in another terminal: export MESHPOOL_COORDINATOR=%s\n"
      "  then: meshpool put KEY FILE; meshpool get KEY; meshpool stat\n"
      "Ctrl-C stops the cluster.\n",
      (*cluster)->coordinator_address().c_str(), options->nodes,
      FormatSize(options->capacity_bytes).c_str(),
      (*cluster)->coordinator_address().c_str());
  if (!(*cluster)->etcd_address().empty()) {
    std::printf(
        "%d coordinators on the etcd at %s, its data in %s%s (one leads; "
        "kill it and another takes over; a coordinator that dies is "
        "started again and stands by)\n",
        options->coordinators, (*cluster)->etcd_address().c_str(),
        options->state_dir.c_str(),
        made_state_dir.empty() ? "" : ", removed at exit");
  } else if (!options->state_dir.empty()) {
    std::printf(
        "coordinator state in %s%s (a coordinator that dies is "
        "restarted from it)\n",
        options->state_dir.c_str(),
        made_state_dir.empty() ? "" : ", removed at exit");
  }
  std::fflush(stdout);
  std::string why = (*cluster)->WaitForStop(
      [](const std::string& event) {
        std::printf("%s\n", event.c_str());
        std::fflush(stdout);
      },
      flags.GetBool("restart-nodes"));
  std::printf("%s\n", why.c_str());
  (*cluster)->Stop();
  if (!made_state_dir.empty()) std::filesystem::remove_all(made_state_dir);
  return 0;
}

int RunDemo(int argc, char** argv) {
  Flags flags("meshpool demo [--nodes N] [--duration D] [--value-size SIZE]",
              "Starts a local cluster (coordinator + N nodes as processes on "
              "127.0.0.1), puts and gets values for a few "
              "seconds checking every byte, prints what it did and how fast, "
              "and stops the cluster.");
  DefineClusterFlags(flags, "0");
  flags.Define("duration", "3s", "how long to run the workload");
  flags.Define("value-size", "64KiB", "value size");
  flags.Define("threads", "2", "client threads");
  if (int rc = ParseFlags(flags, argc, argv, "demo"); rc >= 0) return rc;
  auto options = ClusterFlags(flags);
  if (!options.ok()) return Fail("demo", options.status());
  WorkloadOptions w;
  auto duration = flags.GetDuration("duration");
  auto size = flags.GetSize("value-size");
  auto threads = flags.GetInt("threads");
  if (!duration.ok()) return Fail("demo", duration.status());
  if (!size.ok()) return Fail("demo", size.status());
  if (!threads.ok()) return Fail("demo", threads.status());
  w.duration = *duration;
  w.value_bytes = *size;
  w.threads = static_cast<int>(*threads);
  w.keys = 200;
  w.read_fraction = 0.8;
  std::printf("starting a local cluster: coordinator + %d nodes x %s ...\n",
              options->nodes, FormatSize(options->capacity_bytes).c_str());
  std::fflush(stdout);
  auto cluster = LocalCluster::Start(*options);
  if (!cluster.ok()) return Fail("demo", cluster.status());
  std::printf("coordinator %s, nodes up\n",
              (*cluster)->coordinator_address().c_str());
  ClientOptions copts;
  copts.coordinator = (*cluster)->coordinator_address();
  auto rdma = ClientRdmaFromFlags(flags);
  if (!rdma.ok()) return Fail("demo", rdma.status());
  copts.rdma = *std::move(rdma);
  auto client = Client::Connect(copts);
  if (!client.ok()) return Fail("demo", client.status());
  auto result = RunWorkload(**client, w);
  if (!result.ok()) return Fail("demo", result.status());
  std::fputs(FormatWorkload(w, *result).c_str(), stdout);
  auto status = (*client)->Status();
  if (status.ok()) {
    for (const NodeStatus& n : status->nodes) {
      std::printf("  %s: %llu objects, %s of %s used\n", n.node_id.c_str(),
                  static_cast<unsigned long long>(n.objects),
                  FormatSize(n.used_bytes).c_str(),
                  FormatSize(n.capacity_bytes).c_str());
    }
  }
  client->reset();
  (*cluster)->Stop();
  bool ok = result->errors == 0 && result->corrupt == 0;
  std::printf("demo %s\n", ok ? "passed: every value read back intact"
                              : "FAILED: see errors above");
  return ok ? 0 : 1;
}

}  // namespace meshpool::tools
