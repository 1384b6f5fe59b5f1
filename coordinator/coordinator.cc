// Coordinator: wires Membership, the region table, the gRPC server and the
// reaper thread.
#include "coordinator/coordinator.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/etcd_state.h"
#include "coordinator/file_state.h"
#include "coordinator/membership.h"
#include "coordinator/region_table.h"

namespace meshpool::coordinator {
namespace {

// Running calls get this long to finish at Shutdown before being cancelled.
constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

absl::Status ValidateOptions(const CoordinatorOptions& options) {
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.dead_after) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator: heartbeat_interval (", absl::FormatDuration(options.heartbeat_interval),
        ") must be positive and below dead_after (", absl::FormatDuration(options.dead_after),
        "); a few heartbeats should fit in dead_after"));
  }
  return absl::OkStatus();
}

// The host part of "host:port" / "[v6]:port", as written.
std::string ListenHost(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  return colon == std::string::npos ? listen : listen.substr(0, colon);
}

// The host part of "host:port" / "[v6]:port"; loopback for wildcards.
std::string ReachableHost(const std::string& listen) {
  const std::string host = ListenHost(listen);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    return "127.0.0.1";
  }
  return host;
}

// What a standby knows of the leader (from its last look at etcd's key).
struct LeaderSeen {
  absl::Mutex mu;
  std::string leader ABSL_GUARDED_BY(mu);
  bool announced ABSL_GUARDED_BY(mu) = false;  // on_standby ran
};

// Stands by (serving a standby CoordinatorService on options.listen) until this
// coordinator leads in etcd, then opens the state there, fenced by the lead.
// options.listen is narrowed to the bound port, so that the leader's server
// takes the port its standby had.
absl::StatusOr<std::unique_ptr<CoordinatorState>> LeadInEtcd(
    CoordinatorOptions& options, std::unique_ptr<EtcdLeadership>& leadership) {
  Env* env = EnvOrDefault(options.env);
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<EtcdClient> client,
                            EtcdClient::Create(options.etcd));
  auto seen = std::make_shared<LeaderSeen>();
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorServer> standby,
      CoordinatorServer::StartStandby(options.listen, options.tls, [seen] {
        absl::MutexLock lock(&seen->mu);
        return seen->leader;
      }));
  options.listen =
      absl::StrCat(ListenHost(options.listen), ":", standby->port());
  const std::string self =
      options.advertise.empty()
          ? absl::StrCat(ReachableHost(options.listen), ":", standby->port())
          : options.advertise;
  EtcdLeadership::Options lead;
  lead.key = absl::StrCat(options.etcd_prefix, "leader");
  lead.address = self;
  lead.on_lost = options.on_lost_lead;
  lead.stop = options.stop_waiting;
  lead.on_holder =
      [seen, self, on_standby = options.on_standby](const std::string& holder) {
        bool announce = false;
        {
          absl::MutexLock lock(&seen->mu);
          seen->leader = holder;
          announce = !holder.empty() && !seen->announced;
          if (announce) seen->announced = true;
        }
        if (announce && on_standby) on_standby(self);
      };
  lead.env = env;
  MESHPOOL_ASSIGN_OR_RETURN(leadership,
                            EtcdLeadership::Acquire(client, std::move(lead)));
  standby.reset();  // frees the port for the leader's server
  EtcdStateOptions state;
  state.prefix = options.etcd_prefix;
  state.first_region_id = FirstRegionIdAt(env->Now());
  state.guard =
      EtcdStateOptions::Guard{leadership->key(), leadership->create_revision()};
  state.env = env;
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorState> opened,
      OpenEtcdCoordinatorState(std::move(client), std::move(state)));
  env->Log("coordinator", absl::StrCat("state in etcd at ", options.etcd,
                                       " under ", options.etcd_prefix));
  return opened;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(CoordinatorOptions options) {
  MESHPOOL_RETURN_IF_ERROR(ValidateOptions(options));
  MESHPOOL_RETURN_IF_ERROR(auth::CheckListen("--listen", options.listen,
                                             options.tls, options.insecure));
  std::unique_ptr<EtcdLeadership> leadership;
  if (options.state == nullptr && options.state_dir.empty() &&
      !options.etcd.empty()) {
    MESHPOOL_ASSIGN_OR_RETURN(options.state, LeadInEtcd(options, leadership));
  }
  if (options.state == nullptr) {
    Env* env = EnvOrDefault(options.env);
    const uint64_t first_id = FirstRegionIdAt(env->Now());
    if (options.state_dir.empty()) {
      options.state = NewInMemoryCoordinatorState({}, first_id);
    } else {
      FileStateOptions file;
      file.dir = options.state_dir;
      file.first_region_id = first_id;
      file.env = env;
      FileStateLoad load;
      MESHPOOL_ASSIGN_OR_RETURN(options.state,
                                OpenFileCoordinatorState(file, &load));
      env->Log(
          "coordinator",
          load.fresh
              ? absl::StrCat("state in ", options.state_dir,
                             " is empty (new, or never changed)")
              : absl::StrCat("state loaded from ", options.state_dir,
                             " (generation ", load.generation, ", ",
                             load.records_replayed, " changes replayed",
                             load.dropped_tail_bytes == 0
                                 ? std::string()
                                 : absl::StrCat(", a torn tail of ",
                                                load.dropped_tail_bytes,
                                                " bytes from a crash dropped"),
                             ")"));
    }
  }
  if (options.region_nodes == nullptr) {
    MESHPOOL_ASSIGN_OR_RETURN(auth::ChannelSecurity security,
                              auth::MakeChannelSecurity(options.tls));
    options.region_nodes = NewGrpcRegionNodes(std::move(security));
  }
  // The region table shares the state Membership owns (and outlives it).
  CoordinatorState* const state = options.state.get();
  auto regions = std::make_unique<RegionTable>(
      state, options.region_nodes.get(), options.env, options.region_quotas);
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<Membership> membership,
      Membership::Create(std::move(options.state), options.dead_after,
                         options.registration, options.env));
  const bool durable = !options.state_dir.empty() || leadership != nullptr;
  const absl::Duration reconcile_every = options.reconcile_every.value_or(
      durable ? kDefaultReconcileEvery : absl::ZeroDuration());
  if (options.stripe_copier && options.repair_every <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator: repair_every (",
        absl::FormatDuration(options.repair_every), ") must be positive"));
  }
  std::unique_ptr<Coordinator> coordinator(new Coordinator(
      std::move(membership), std::move(options.region_nodes),
      std::move(regions), options.heartbeat_interval / 2, reconcile_every,
      options.repair_every, EnvOrDefault(options.env)));
  MESHPOOL_ASSIGN_OR_RETURN(
      coordinator->server_,
      CoordinatorServer::Start(
          options.listen, options.tls, coordinator->membership_.get(),
          coordinator->regions_.get(), options.heartbeat_interval));
  coordinator->leadership_ = std::move(leadership);
  coordinator->listen_host_ = ReachableHost(options.listen);
  coordinator->reaper_ = std::thread([c = coordinator.get()] { c->ReaperLoop(); });
  if (options.stripe_copier) {
    coordinator->repairer_ = std::make_unique<RegionRepairer>(
        state, coordinator->regions_.get(), std::move(options.stripe_copier),
        coordinator->address(), options.env);
    coordinator->repair_thread_ =
        std::thread([c = coordinator.get()] { c->RepairLoop(); });
  }
  // Last: the page reads everything above.
  if (!options.metrics_listen.empty()) {
    metrics::HttpServer::Handlers handlers;
    handlers.metrics = [c = coordinator.get()] { return c->MetricsPage(); };
    handlers.health = [c = coordinator.get()] {
      return c->membership_->Map().status();
    };
    MESHPOOL_ASSIGN_OR_RETURN(coordinator->metrics_,
                              metrics::HttpServer::Start(options.metrics_listen,
                                                         std::move(handlers)));
  }
  return coordinator;
}

Coordinator::Coordinator(std::unique_ptr<Membership> membership,
                         std::unique_ptr<RegionNodes> region_nodes,
                         std::unique_ptr<RegionTable> regions,
                         absl::Duration reap_every,
                         absl::Duration reconcile_every,
                         absl::Duration repair_every, Env* env)
    : reap_every_(reap_every),
      reconcile_every_(reconcile_every),
      repair_every_(repair_every),
      env_(env),
      membership_(std::move(membership)),
      region_nodes_(std::move(region_nodes)),
      regions_(std::move(regions)) {}

Coordinator::~Coordinator() { Shutdown(); }

std::string Coordinator::metrics_url() const {
  return metrics_ == nullptr ? std::string() : metrics_->url();
}

std::string Coordinator::address() const {
  return absl::StrCat(listen_host_, ":", server_->port());
}

proto::ClusterMap Coordinator::Map() const {
  absl::StatusOr<proto::ClusterMap> map = membership_->Map();
  if (!map.ok()) return proto::ClusterMap();
  return *std::move(map);
}

void Coordinator::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  metrics_.reset();
  membership_->Shutdown();  // ends watch streams first, so the grace is short
  if (server_ != nullptr) server_->Shutdown(kShutdownGrace);
  leadership_.reset();  // after the last write: a standby takes over now
  {
    absl::MutexLock reaper_lock(&reaper_mu_);
    reaper_stop_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  if (repair_thread_.joinable()) repair_thread_.join();
  done_.Notify();
}

void Coordinator::Wait() { done_.WaitForNotification(); }

absl::StatusOr<int> Coordinator::Reap() { return membership_->Reap(); }

// Reap errors (a state that cannot be read now) are retried next round.
// Reconciliation waits a full period after start, so every node has
// heartbeated (and reported its regions) to this process first.
void Coordinator::ReaperLoop() {
  const bool reconcile =
      reconcile_every_ > absl::ZeroDuration() && reconcile_every_ != absl::InfiniteDuration();
  absl::Time last_reconcile = env_->Now();
  while (true) {
    {
      absl::MutexLock lock(&reaper_mu_);
      if (reaper_mu_.AwaitWithTimeout(absl::Condition(&reaper_stop_), reap_every_)) return;
    }
    (void)Reap();
    if (reconcile && env_->Now() - last_reconcile >= reconcile_every_) {
      regions_->Reconcile();
      last_reconcile = env_->Now();
    }
  }
}

// A copy in progress stops at Shutdown (the copier polls `stop`).
void Coordinator::RepairLoop() {
  auto stop = [this] {
    absl::MutexLock lock(&reaper_mu_);
    return reaper_stop_;
  };
  while (true) {
    {
      absl::MutexLock lock(&reaper_mu_);
      if (reaper_mu_.AwaitWithTimeout(absl::Condition(&reaper_stop_),
                                      repair_every_))
        return;
    }
    repairer_->RepairOnce(stop);
  }
}

}  // namespace meshpool::coordinator
