// meshpool/coordinator/coordinator.h: the control-plane server (gRPC service
// meshpool.proto.Coordinator): node membership, the cluster map and its
// epoch, heartbeats, failure detection, map watch streams, and the region
// table (coordinator/region_table.h has its rules): named memory striped
// across the nodes. Clients and nodes reach it through
// placement/coordinator_client.h; they never link this.
//
// Membership rules (the Coordinator enforces them):
//  * RegisterNode with an empty node_id gets "node-<n>" (n one above the
//    highest n in the map; a forgotten dead node's id may come back, which
//    is safe since all that names a node's memory names its incarnation).
//    The map holds at most kMaxMapNodes entries (ResourceExhausted for a
//    new id past it).
//  * Registering an id again with a new incarnation (a restarted node)
//    replaces the old entry; any registration makes the node NODE_ALIVE and
//    bumps the epoch.
//  * Heartbeat from an unknown id, a stale incarnation or a node already
//    declared NODE_DEAD answers known=false: the node must register again.
//    A heartbeat stores the node's stats and does not bump the epoch.
//  * A node with no heartbeat (or registration) for dead_after becomes
//    NODE_DEAD (epoch bumped). Dead nodes stay in the map for
//    registration.forget_dead_after (then their entry is removed, epoch
//    bumped, and the dead incarnation is remembered in memory, so it is
//    still told it was declared dead and cannot register again); placement
//    skips them, so their keys have no home until the node registers
//    again.
#ifndef MESHPOOL_COORDINATOR_COORDINATOR_H_
#define MESHPOOL_COORDINATOR_COORDINATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/etcd_leader.h"
#include "coordinator/membership.h"
#include "coordinator/region_repair.h"
#include "coordinator/region_table.h"
#include "coordinator/tenants.h"
#include "metrics/metrics.h"
#include "placement/coordinator_client.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// RegionTable::Reconcile's period with a durable state (see below).
inline constexpr absl::Duration kDefaultReconcileEvery = absl::Seconds(10);
// How often the repairer looks for regions that lost copies.
inline constexpr absl::Duration kDefaultRepairEvery = absl::Seconds(1);

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one
  // TLS for every call to and from the coordinator (auth/auth.h): it serves
  // with this certificate, requires one of each caller and checks its role,
  // and presents it to nodes. Not enabled: no TLS, and then `listen` must be
  // a loopback address unless `insecure` (protected mode).
  auth::TlsConfig tls;
  bool insecure = false;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);  // told to nodes
  absl::Duration dead_after = absl::Seconds(3);  // no heartbeat this long -> NODE_DEAD
  // What one node may claim and how often one caller may register
  // (coordinator/membership.h).
  RegistrationLimits registration;
  // Each tenant's cap on regions and region bytes (coordinator/tenants.h).
  RegionQuotas region_quotas;
  // Clock (heartbeats, deaths, region stamps) and log sink; not owned,
  // must outlive the coordinator. Null: Env::Default().
  Env* env = nullptr;
  // Where the state lives: `state` when set; else, when `state_dir` is
  // set, a durable state in that directory (coordinator/file_state.h: every
  // acknowledged change survives a crash or restart); else memory only.
  std::unique_ptr<CoordinatorState> state;
  std::string state_dir;
  // Else, when `etcd` is set ("host:port[,host:port...]"), the state lives
  // in etcd under etcd_prefix (coordinator/etcd_state.h), and coordinators
  // sharing it elect a leader there (coordinator/etcd_leader.h): Start
  // waits until this one leads, and every write is fenced by the
  // leadership. Meanwhile this coordinator stands by: it listens on
  // `listen` and refuses every call naming the leader, which clients
  // follow; on_standby(its address) runs once another is found leading,
  // and stop_waiting, polled, gives up (Start returns Cancelled). When the
  // lead is lost (etcd unreachable for the lease's TTL), writes fail and
  // on_lost_lead runs: the owner should shut this coordinator down and
  // start it again as a standby. Each callback may be empty.
  std::string etcd;
  std::string etcd_prefix = "/meshpool/";
  std::function<void(const std::string& address)> on_standby;
  std::function<bool()> stop_waiting;
  std::function<void()> on_lost_lead;
  // The "host:port" other coordinators send clients to while this one
  // leads. Empty: the listen host (127.0.0.1 for a wildcard one) and the
  // bound port; give it when listening on a wildcard address.
  std::string advertise;
  // How often the region table frees region memory that nodes report and
  // no region holds (RegionTable::Reconcile: what a create left behind when
  // a coordinator died mid-way). Unset: every kDefaultReconcileEvery with
  // state_dir, never otherwise (an in-memory table forgets regions clients
  // may still use). Zero or infinite: never.
  std::optional<absl::Duration> reconcile_every;
  // How the region table reaches memory nodes; null -> gRPC to each node's
  // control address (tests pass a fake).
  std::unique_ptr<RegionNodes> region_nodes;
  // Re-replication (coordinator/region_repair.h): when set, a repair thread
  // gives the lost copies of degraded regions new homes every
  // repair_every, copying through the StripeCopier this makes (called with
  // the coordinator's address the first time a repair needs it). Unset: no
  // repairs; regions still report their health.
  StripeCopierFactory stripe_copier;
  absl::Duration repair_every = kDefaultRepairEvery;
  // Serve Prometheus metrics and a health check over HTTP on this
  // "host:port" (metrics/metrics.h; port 0 picks one). Empty: none.
  std::string metrics_listen;
};

class CoordinatorServer;
class RegionTable;

// The coordinator server. Thread-safe. A background reaper thread, woken
// every heartbeat_interval/2, declares silent nodes dead (time read from
// options.env); a repair thread (with options.stripe_copier) re-replicates.
class Coordinator {
 public:
  // Validates the options (InvalidArgument: heartbeat_interval must be > 0
  // and < dead_after), binds options.listen and starts serving.
  // FailedPrecondition when the address cannot be bound (in use, or not a
  // local address); Unavailable when the state cannot be read; DataLoss
  // (naming the file and offset, or the etcd key) when the state is
  // corrupt. With etcd, it returns only once this coordinator leads
  // (Cancelled when options.stop_waiting said to stop first).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(CoordinatorOptions options);
  ~Coordinator();  // Shutdown()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // "<host>:<bound port>", where host is the listen host ("127.0.0.1" when
  // listening on a wildcard address).
  std::string address() const;

  // "http://host:port/metrics" with options.metrics_listen; empty without.
  std::string metrics_url() const;

  // A copy of the current map. Empty (epoch 0) if the state cannot be read,
  // which the in-memory state never fails to.
  proto::ClusterMap Map() const;

  // Stops serving: ends watch streams (their clients see Unavailable),
  // finishes or cancels in-flight calls, stops the reaper. Idempotent; a
  // concurrent caller returns once the first one is done.
  void Shutdown();

  // Blocks until Shutdown has completed.
  void Wait();

 private:
  friend class CoordinatorTestPeer;
  Coordinator(std::unique_ptr<Membership> membership,
              std::unique_ptr<RegionNodes> region_nodes,
              std::unique_ptr<RegionTable> regions, absl::Duration reap_every,
              absl::Duration reconcile_every, absl::Duration repair_every,
              Env* env);

  // Declares nodes silent for dead_after dead, now. Returns how many.
  absl::StatusOr<int> Reap();
  void ReaperLoop();
  // The /metrics page (coordinator_metrics.cc).
  std::string MetricsPage() const;
  void RepairLoop();

  const absl::Duration reap_every_;
  const absl::Duration reconcile_every_;  // zero or infinite: never
  const absl::Duration repair_every_;
  Env* const env_;
  std::string listen_host_;
  // Teardown order: the reaper and server stop (in Shutdown) before the
  // region table and membership they use are destroyed; the table uses the
  // membership's state and the region nodes.
  // With etcd: the lead, given up (so a standby takes over at once) after
  // the server stopped.
  std::unique_ptr<EtcdLeadership> leadership_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<RegionNodes> region_nodes_;
  std::unique_ptr<RegionTable> regions_;
  std::unique_ptr<RegionRepairer> repairer_;  // null without a copier factory
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<metrics::HttpServer> metrics_;  // stopped first in Shutdown
  absl::Mutex reaper_mu_;
  // Stops the reaper and repair threads.
  bool reaper_stop_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
  std::thread repair_thread_;
  absl::Mutex shutdown_mu_;  // held for the whole of Shutdown
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification done_;
};

// (absl's Duration arithmetic is not constexpr here: 60 s > 3 s + 45 s.)
static_assert(placement::kCreateRegionTimeout > kNodeAllocateTimeout &&
              placement::kCreateRegionTimeout > kNodeStatsTimeout);

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_COORDINATOR_H_
