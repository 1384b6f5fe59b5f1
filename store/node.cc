// Node::Start wiring and the node's two background loops (heartbeat, and
// reclamation with session expiry and eviction). Teardown order is
// NodeImpl's member order, reversed: threads and the gRPC server stop first
// (Shutdown), then the evictor's endpoint to the node's own transport, then
// the region and transport (no more one-sided access), then the slab
// manager and pin tables, and the pool last.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/common.h"
#include "format/layout.h"
#include "metrics/metrics.h"
#include "placement/coordinator_client.h"
#include "rdma/shm.h"
#include "store/evictor.h"
#include "store/node_metrics.h"
#include "store/node_service.h"
#include "store/pin_tables.h"
#include "store/pool.h"
#include "store/slab_manager.h"
#include "store/slot_clearer.h"
#include "store/store.h"

namespace meshpool::store {
namespace {

// Used when the coordinator's reply names no heartbeat interval.
constexpr absl::Duration kDefaultHeartbeatInterval = absl::Seconds(1);

uint64_t NewIncarnation() {
  absl::BitGen gen;
  uint64_t incarnation = 0;
  while (incarnation == 0) incarnation = absl::Uniform<uint64_t>(gen);
  return incarnation;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// The address clients should dial for `bound` ("host:port" or
// "scheme://host:port"): the bound host, or `advertise` in its place.
// InvalidArgument when the bound host is a wildcard and nothing is
// advertised. Addresses without a port (e.g. "sim://name") pass unchanged.
absl::StatusOr<std::string> Advertised(absl::string_view bound,
                                       absl::string_view advertise) {
  size_t scheme = bound.find("://");
  size_t host_begin = scheme == absl::string_view::npos ? 0 : scheme + 3;
  size_t colon = bound.rfind(':');
  if (colon == absl::string_view::npos || colon < host_begin) {
    return std::string(bound);
  }
  absl::string_view host = bound.substr(host_begin, colon - host_begin);
  if (advertise.empty()) {
    if (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bound ", bound,
          " (all interfaces), which clients cannot dial; "
          "set NodeOptions.advertise_host to this machine's reachable "
          "address"));
    }
    return std::string(bound);
  }
  return absl::StrCat(bound.substr(0, host_begin), advertise,
                      bound.substr(colon));
}

absl::Status CheckOptions(const NodeOptions& o) {
  if (o.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "NodeOptions.coordinator is empty; set it to the host:port of a "
        "running coordinator (`meshpool coordinator`)");
  }
  if (o.capacity_bytes == 0) {
    return absl::InvalidArgumentError(
        "NodeOptions.capacity_bytes is 0; give the pool a size, e.g. 1GiB");
  }
  if (o.reclaim_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "NodeOptions.reclaim_interval must be > 0, e.g. 200ms");
  }
  for (auto [name, d] : {std::pair{"slab_lease", o.slab_lease},
                         std::pair{"max_read_lease", o.max_read_lease}}) {
    if (d <= absl::ZeroDuration() || d > format::kMaxLease) {
      return absl::InvalidArgumentError(
          absl::StrCat("NodeOptions.", name, " is ", absl::FormatDuration(d),
                       "; give a duration in (0, ",
                       absl::FormatDuration(format::kMaxLease), "]"));
    }
  }
  if (o.max_read_lease < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(
        "NodeOptions.max_read_lease is under 1ms, which clients cannot be "
        "told (it travels in whole milliseconds); use e.g. 100ms");
  }
  if (o.coordinator_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "NodeOptions.coordinator_timeout must be > 0, e.g. 3s");
  }
  if (o.session_lease < absl::Milliseconds(1) ||
      o.session_lease > absl::Milliseconds(kMaxSessionLeaseMs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NodeOptions.session_lease is ", absl::FormatDuration(o.session_lease),
        "; give a duration in [1ms, ",
        absl::FormatDuration(absl::Milliseconds(kMaxSessionLeaseMs)),
        "], e.g. 10s"));
  }
  return CheckWatermarks(o.evict_high_watermark, o.evict_low_watermark);
}

void WriteSuperblock(char* pool, const format::PoolLayout& l,
                     uint64_t incarnation) {
  format::Superblock sb{};
  sb.magic = format::kSuperblockMagic;
  sb.version = format::kFormatVersion;
  sb.incarnation = incarnation;
  sb.pool_bytes = l.pool_bytes;
  sb.index_offset = l.index_offset;
  sb.bucket_count = l.bucket_count;
  sb.slab_area_offset = l.slab_area_offset;
  sb.slab_bytes = l.slab_bytes;
  sb.slab_count = l.slab_count;
  sb.slab_meta_offset = l.slab_meta_offset;
  sb.pin_area_offset = l.pin_area_offset;
  sb.pin_sessions = l.pin_sessions;
  sb.pins_per_session = l.pins_per_session;
  std::memset(pool, 0, format::kSuperblockBytes);
  std::memcpy(pool, &sb, sizeof(sb));
  std::memset(pool + l.index_offset, 0, l.bucket_count * format::kBucketBytes);
  std::memset(pool + l.slab_meta_offset, 0,
              l.slab_count * format::kSlabMetaBytes);
  std::memset(pool + l.pin_area_offset, 0,
              l.pin_sessions * l.pins_per_session * format::kPinEntryBytes);
}

void ToProto(const format::PoolLayout& l, proto::PoolLayout* out) {
  out->set_pool_bytes(l.pool_bytes);
  out->set_index_offset(l.index_offset);
  out->set_bucket_count(l.bucket_count);
  out->set_slab_area_offset(l.slab_area_offset);
  out->set_slab_bytes(l.slab_bytes);
  out->set_slab_count(l.slab_count);
  out->set_slab_meta_offset(l.slab_meta_offset);
  out->set_pin_area_offset(l.pin_area_offset);
  out->set_pin_sessions(l.pin_sessions);
  out->set_pins_per_session(l.pins_per_session);
}

}  // namespace

class NodeImpl {
 public:
  static absl::StatusOr<std::unique_ptr<NodeImpl>> Start(
      NodeOptions options, std::unique_ptr<rdma::Transport> transport);
  ~NodeImpl() { Shutdown(); }

  const proto::NodeInfo& info() const { return info_; }
  proto::NodeStats Stats() const;
  void Shutdown();
  void Wait() { done_.WaitForNotification(); }

 private:
  NodeImpl(NodeOptions options, Pool pool,
           std::unique_ptr<rdma::Transport> transport)
      : options_(std::move(options)),
        pool_(std::move(pool)),
        transport_(std::move(transport)) {}

  absl::Status Serve(const format::PoolLayout& layout);  // region, listen, gRPC
  // The evictor, with its endpoint to this node's own transport.
  absl::Status StartEvictor(absl::string_view transport_address);
  // Serves the (shared) pool over shared memory; returns its address.
  absl::StatusOr<std::string> ServeShm(absl::string_view transport_address);
  absl::Status Register();
  // What Register sends: info_ without the pool's address and key, which
  // the coordinator would otherwise publish in the map.
  proto::NodeInfo Registration() const {
    proto::NodeInfo registration = info_;
    registration.mutable_pool()->clear_addr();
    registration.mutable_pool()->clear_rkey();
    return registration;
  }
  // Starts the metrics server (options_.metrics_listen) and publishes its
  // address in info_.
  absl::Status ServeMetrics();
  std::string MetricsPage() const;
  void HeartbeatLoop();
  void ReclaimLoop();
  // Waits up to `d`; true once Shutdown has begun.
  bool WaitForStop(absl::Duration d);
  // As WaitForStop, and also returns early (false) after Wake().
  bool WaitForWork(absl::Duration d);
  void Wake();
  // How long the reclaim loop sleeps, backed off to `interval`: never past
  // the next session's lease end (at least reclaim_interval).
  absl::Duration NextWait(absl::Duration interval) const;
  void Log(absl::string_view message) const {
    options_.env->Log("node", message);
  }

  const NodeOptions options_;  // env is never null
  const uint64_t incarnation_ = NewIncarnation();
  Pool pool_;
  std::unique_ptr<rdma::Transport> transport_;
  std::unique_ptr<rdma::MemoryRegion> region_;
  // Same-host clients' view of the pool (when shared); torn down before
  // the main transport.
  std::unique_ptr<rdma::Transport> shm_transport_;
  std::unique_ptr<rdma::MemoryRegion> shm_region_;
  std::unique_ptr<SlabManager> slabs_;
  std::unique_ptr<PinTables> pins_;
  // Holds an endpoint and a registration on transport_: goes before it.
  std::unique_ptr<Evictor> evictor_;
  std::unique_ptr<NodeServer> server_;
  std::unique_ptr<placement::CoordinatorClient> coordinator_;
  proto::NodeInfo info_;  // immutable once Start returns
  // Stopped first in Shutdown; its handler reads info_ only once
  // metrics_ready_ is set (after registration).
  std::unique_ptr<metrics::HttpServer> metrics_;
  std::atomic<bool> metrics_ready_{false};
  std::atomic<bool> fenced_{false};  // declared dead
  // When the coordinator last answered a heartbeat or registration, in
  // absl::ToUnixNanos of options_.env's clock.
  std::atomic<int64_t> heartbeat_ok_ns_{0};
  absl::Duration heartbeat_interval_ = kDefaultHeartbeatInterval;
  // From the coordinator's RegisterNodeReply (zero: it never forgets).
  absl::Duration forgotten_after_ = absl::ZeroDuration();
  // The newest map epoch the coordinator told this node (registration and
  // heartbeat replies), reported when it registers again. Written by
  // Register, then by the heartbeat thread only.
  uint64_t last_epoch_ = 0;

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool wake_ ABSL_GUARDED_BY(stop_mu_) = false;  // the reclaim loop's
  bool clear_failing_ = false;  // reclaim thread only: log transitions
  absl::Mutex shutdown_mu_;     // held for the whole of Shutdown
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification done_;
  // Last: joined in Shutdown, before anything they use goes away.
  std::thread heartbeat_;
  std::thread reclaimer_;
};

absl::StatusOr<std::unique_ptr<NodeImpl>> NodeImpl::Start(
    NodeOptions options, std::unique_ptr<rdma::Transport> transport) {
  MESHPOOL_RETURN_IF_ERROR(CheckOptions(options));
  options.env = EnvOrDefault(options.env);
  if (transport == nullptr) {
    return absl::InvalidArgumentError("Node::Start needs a transport");
  }
  MESHPOOL_RETURN_IF_ERROR(auth::CheckListen("--listen", options.control_listen,
                                             options.tls, options.insecure));
  if (transport->kind() == rdma::TransportKind::kTcp) {
    MESHPOOL_RETURN_IF_ERROR(auth::CheckListen("--bind", options.transport_bind,
                                               options.tls, options.insecure));
  }
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(
      options.capacity_bytes, options.slab_bytes, options.bucket_count,
      options.pin_sessions, options.pins_per_session);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NodeOptions.capacity_bytes, slab_bytes, bucket_count, "
                     "pin_sessions and pins_per_session: ",
                     layout.status().message()));
  }
  // Faulted in now, so region creation and first writes (TCP and sim serve
  // them on the data path) never pay page faults. Verbs registration would
  // fault the pages in anyway; it then finds them present.
  const bool shared =
      options.shm && (transport->kind() == rdma::TransportKind::kTcp ||
                      transport->kind() == rdma::TransportKind::kVerbs ||
                      transport->kind() == rdma::TransportKind::kUc);
  MESHPOOL_ASSIGN_OR_RETURN(
      Pool pool, Pool::Create(options.capacity_bytes, options.huge_pages,
                              /*populate=*/true, shared));
  options.env->Log(
      "node", absl::StrCat("pool of ", FormatSize(pool.size()), " on ",
                           PageKindName(pool.page_kind()),
                           shared ? ", shared (memfd)" : "", ", faulted in"));
  if (shared && options.huge_pages && pool.page_kind() == PageKind::kNormal) {
    options.env->Log(
        "node",
        "warning: the shared pool got 4 KiB pages (no free reserved huge "
        "pages, and /sys/kernel/mm/transparent_hugepage/shmem_enabled "
        "allows none): clients on this host write into it 2-6 x slower; "
        "`meshpool doctor` says how to fix it");
  }
  std::unique_ptr<NodeImpl> node(
      new NodeImpl(std::move(options), std::move(pool), std::move(transport)));
  WriteSuperblock(node->pool_.data(), *layout, node->incarnation_);
  MESHPOOL_RETURN_IF_ERROR(node->Serve(*layout));
  if (!node->options_.metrics_listen.empty()) {
    MESHPOOL_RETURN_IF_ERROR(node->ServeMetrics());
  }
  MESHPOOL_RETURN_IF_ERROR(node->Register());
  node->metrics_ready_ = true;
  node->heartbeat_ = std::thread([n = node.get()] { n->HeartbeatLoop(); });
  node->reclaimer_ = std::thread([n = node.get()] { n->ReclaimLoop(); });
  return node;
}

absl::Status NodeImpl::Serve(const format::PoolLayout& layout) {
  SlabManagerOptions slab_options;
  slab_options.layout = layout;
  slab_options.lease = options_.slab_lease;
  slab_options.max_read_lease = options_.max_read_lease;
  slab_options.env = options_.env;
  slab_options.max_granted_per_tenant = options_.max_granted_slabs_per_tenant;
  absl::StatusOr<std::unique_ptr<SlabManager>> slabs =
      SlabManager::Create(std::move(slab_options), pool_.data());
  if (!slabs.ok()) {
    return absl::Status(
        slabs.status().code(),
        absl::StrCat("NodeOptions: ", slabs.status().message()));
  }
  slabs_ = *std::move(slabs);
  PinTablesOptions pin_options;
  pin_options.layout = layout;
  pin_options.incarnation = incarnation_;
  pin_options.lease = options_.session_lease;
  pin_options.env = options_.env;
  pin_options.max_sessions_per_tenant = options_.max_sessions_per_tenant;
  MESHPOOL_ASSIGN_OR_RETURN(
      pins_, PinTables::Create(std::move(pin_options), pool_.data()));
  MESHPOOL_ASSIGN_OR_RETURN(
      region_, transport_->RegisterMemory(pool_.data(), pool_.size()));
  MESHPOOL_ASSIGN_OR_RETURN(std::string transport_address,
                            transport_->Listen(options_.transport_bind));
  MESHPOOL_RETURN_IF_ERROR(StartEvictor(transport_address));
  std::string shm_address;
  if (pool_.shared()) {
    MESHPOOL_ASSIGN_OR_RETURN(shm_address, ServeShm(transport_address));
  }
  NodeServiceDeps deps;
  deps.slabs = slabs_.get();
  deps.sessions = pins_.get();
  deps.evictor = evictor_.get();
  deps.pool = pool_.data();
  deps.pool_region = region_->remote();
  deps.transport = transport_.get();
  deps.incarnation = incarnation_;
  deps.stats = [this] { return Stats(); };
  MESHPOOL_ASSIGN_OR_RETURN(
      server_, NodeServer::Start(options_.control_listen, options_.tls,
                                 std::move(deps)));

  info_.set_node_id(options_.node_id);
  info_.set_incarnation(incarnation_);
  info_.set_capacity_bytes(options_.capacity_bytes);
  MESHPOOL_ASSIGN_OR_RETURN(
      std::string control,
      Advertised(server_->address(), options_.advertise_host));
  MESHPOOL_ASSIGN_OR_RETURN(
      std::string data, Advertised(transport_address, options_.advertise_host));
  info_.set_control_address(control);
  info_.add_transport_addresses(data);
  // Second, so transport_addresses(0) stays the one every client can use.
  if (!shm_address.empty()) info_.add_transport_addresses(shm_address);
  rdma::RemoteRegion remote = region_->remote();
  info_.mutable_pool()->set_addr(remote.addr);
  info_.mutable_pool()->set_rkey(remote.rkey);
  info_.mutable_pool()->set_length(remote.length);
  ToProto(layout, info_.mutable_layout());
  info_.set_hostname(HostName());
  info_.set_max_read_lease_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(options_.max_read_lease)));
  return absl::OkStatus();
}

// The pool over shared memory for clients on this host: the same region
// (rkey) as on the main transport, and on verbs the address clients send
// their atomics to (the device's atomics are not atomic with the CPU's).
absl::StatusOr<std::string> NodeImpl::ServeShm(
    absl::string_view transport_address) {
  rdma::ShmOptions shm;
  shm.exports.push_back(
      {pool_.data(), pool_.size(), pool_.fd(), 0, region_->remote().rkey});
  if (transport_->kind() == rdma::TransportKind::kVerbs) {
    shm.atomics_address = std::string(transport_address);
  }
  shm.allowed_uids = options_.shm_allowed_uids;
  // Users named besides the node's own must be able to reach the socket
  // file; the peer check, not the file's mode, then decides.
  if (!shm.allowed_uids.empty()) shm.socket_mode = 0666;
  MESHPOOL_ASSIGN_OR_RETURN(shm_transport_,
                            rdma::CreateShmTransport(std::move(shm)));
  MESHPOOL_ASSIGN_OR_RETURN(
      shm_region_, shm_transport_->RegisterMemory(pool_.data(), pool_.size()));
  return shm_transport_->Listen(options_.shm_socket);
}

absl::Status NodeImpl::StartEvictor(absl::string_view transport_address) {
  std::unique_ptr<SlotClearer> clearer;
  if (options_.evict) {
    absl::StatusOr<std::unique_ptr<TransportSlotClearer>> loopback =
        TransportSlotClearer::Create(transport_.get(), transport_address,
                                     region_->remote());
    if (!loopback.ok()) {
      return absl::Status(loopback.status().code(),
                          absl::StrCat(loopback.status().message(),
                                       "; or run without eviction "
                                       "(NodeOptions.evict = false)"));
    }
    clearer = *std::move(loopback);
  }
  EvictorOptions evict_options;
  evict_options.enabled = options_.evict;
  evict_options.high_watermark = options_.evict_high_watermark;
  evict_options.low_watermark = options_.evict_low_watermark;
  evict_options.reclaim_interval = options_.reclaim_interval;
  evict_options.env = options_.env;
  MESHPOOL_ASSIGN_OR_RETURN(
      evictor_, Evictor::Create(std::move(evict_options), slabs_.get(),
                                pins_.get(), std::move(clearer), pool_.data()));
  evictor_->set_wake([this] { Wake(); });
  return absl::OkStatus();
}

absl::Status NodeImpl::Register() {
  absl::StatusOr<std::unique_ptr<placement::CoordinatorClient>> client =
      placement::CoordinatorClient::Connect(
          options_.coordinator, options_.coordinator_timeout, options_.tls);
  if (!client.ok()) {
    return absl::Status(
        client.status().code(),
        absl::StrCat("memory node cannot reach its coordinator: ",
                     client.status().message()));
  }
  coordinator_ = *std::move(client);
  MESHPOOL_ASSIGN_OR_RETURN(proto::RegisterNodeReply reply,
                            coordinator_->RegisterNode(Registration()));
  heartbeat_ok_ns_ = absl::ToUnixNanos(options_.env->Now());
  last_epoch_ = reply.epoch();
  info_.set_node_id(reply.node_id());
  if (reply.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(reply.heartbeat_interval_ms());
  }
  forgotten_after_ = absl::Milliseconds(reply.forgotten_after_ms());
  Log(absl::StrCat("registered as ", reply.node_id(), " (incarnation ",
                   incarnation_, ", epoch ", reply.epoch(), ") serving ",
                   info_.transport_addresses(0), ", control ",
                   info_.control_address()));
  return absl::OkStatus();
}

bool NodeImpl::WaitForStop(absl::Duration d) {
  absl::MutexLock lock(&stop_mu_);
  return stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
}

bool NodeImpl::WaitForWork(absl::Duration d) {
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithTimeout(
      absl::Condition(
          +[](NodeImpl* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->stop_mu_) {
            return n->stop_ || n->wake_;
          },
          this),
      d);
  wake_ = false;
  return stop_;
}

void NodeImpl::Wake() {
  absl::MutexLock lock(&stop_mu_);
  wake_ = true;
}

absl::Duration NodeImpl::NextWait(absl::Duration interval) const {
  const absl::Time next = pins_->next_expiry();
  if (next == absl::InfiniteFuture()) return interval;
  const absl::Time now = options_.env->Now();
  return std::clamp(next - now, options_.reclaim_interval, interval);
}

void NodeImpl::HeartbeatLoop() {
  bool reachable = true;  // log transitions only, not every failure
  // When the last heartbeat the coordinator answered was sent: it heard
  // from this node no earlier.
  absl::Time heard = options_.env->Now();
  while (!WaitForStop(heartbeat_interval_)) {
    proto::HeartbeatRequest request;
    request.set_node_id(info_.node_id());
    request.set_incarnation(incarnation_);
    *request.mutable_stats() = Stats();
    const absl::Time sent = options_.env->Now();
    absl::StatusOr<proto::HeartbeatReply> reply =
        coordinator_->Heartbeat(request);
    if (!reply.ok()) {
      if (reachable)
        Log(absl::StrCat("heartbeat failed: ", reply.status().ToString()));
      reachable = false;
      continue;
    }
    if (!reachable) Log("coordinator reachable again");
    reachable = true;
    const absl::Time answered = options_.env->Now();
    heartbeat_ok_ns_ = absl::ToUnixNanos(answered);
    if (reply->known()) last_epoch_ = std::max(last_epoch_, reply->epoch());
    // At most how long the coordinator went without hearing from this node
    // when it answered (it may have forgotten it at any point before).
    const absl::Duration silent = answered - heard;
    heard = sent;
    if (reply->known()) continue;
    // Unknown after a silence long enough to have been declared dead and
    // forgotten (a coordinator that restarted since no longer remembers
    // that it did): as good as declared dead.
    const bool maybe_forgotten =
        forgotten_after_ > absl::ZeroDuration() && silent >= forgotten_after_;
    if (reply->declared_dead() || maybe_forgotten) {
      // Keys homed here may have been rewritten on other nodes since; serving
      // these bytes again could return stale values. Fence: drop the pool's
      // registration so every one-sided access is refused from now on.
      Log(reply->declared_dead()
              ? std::string("the coordinator declared this node dead; its "
                            "memory may be stale, so it stops serving "
                            "(restart it to rejoin empty)")
              : absl::StrCat(
                    "the coordinator does not know this node, which it had "
                    "not heard for ",
                    absl::FormatDuration(silent),
                    ", long enough to be declared dead and forgotten; its "
                    "memory may be stale, so it stops serving (restart it "
                    "to rejoin empty)"));
      shm_region_.reset();
      region_.reset();
      fenced_ = true;
      if (options_.on_declared_dead) options_.on_declared_dead();
      return;
    }
    // The coordinator forgot us (restart without state).
    absl::StatusOr<proto::RegisterNodeReply> again =
        coordinator_->RegisterNode(Registration(), last_epoch_);
    if (!again.ok()) {
      Log(absl::StrCat("registering again failed: ",
                       again.status().ToString()));
    } else if (again->node_id() != info_.node_id()) {
      Log(absl::StrCat("coordinator renamed this node to ", again->node_id(),
                       "; keeping ", info_.node_id()));
    } else {
      forgotten_after_ = absl::Milliseconds(again->forgotten_after_ms());
      last_epoch_ = again->epoch();
      Log(absl::StrCat("registered again, epoch ", again->epoch()));
    }
  }
}

// A pass reads the whole index: the node's only recurring work. It runs
// every reclaim_interval while there is reclamation or eviction to do
// (clients asked for slabs since the last pass — granted or refused for
// want of free ones —, regions freed, sealed slabs waiting out their grace,
// slabs just freed or evicted, sessions just expired) and backs off,
// doubling up to kIdleReclaimFactor times that, while passes find nothing:
// an idle or read-only node then costs next to no CPU. It never sleeps past
// the next session's lease end (so a dead client's pins end on time), and a
// GrantSlab that found the pool full wakes it at once.
void NodeImpl::ReclaimLoop() {
  absl::Duration interval = options_.reclaim_interval;
  // Grant requests and freed regions since the last pass mean work.
  auto activity = [this] {
    SlabCounts c = slabs_->Counts();
    return c.grant_requests + c.regions_freed;
  };
  uint64_t requests = activity();
  while (!WaitForWork(NextWait(interval))) {
    const size_t expired = pins_->ExpireStale();
    ReclaimPass pass = slabs_->Reclaim();
    EvictRound round = evictor_->RunOnce();
    if (!round.status.ok() && !clear_failing_) {
      Log(absl::StrCat("eviction could not clear index slots: ",
                       round.status.ToString(), " (retrying)"));
    } else if (round.status.ok() && clear_failing_) {
      Log("eviction clears index slots again");
    }
    clear_failing_ = !round.status.ok();
    uint64_t now_requests = activity();
    bool busy = pass.freed > 0 || pass.candidates > 0 ||
                now_requests != requests || expired > 0 || round.evicted > 0 ||
                round.second_chances > 0 || !round.status.ok();
    requests = now_requests;
    interval = busy ? options_.reclaim_interval
                    : std::min(interval * 2,
                               options_.reclaim_interval * kIdleReclaimFactor);
  }
}

proto::NodeStats NodeImpl::Stats() const {
  SlabCounts c = slabs_->Counts();
  proto::NodeStats s;
  s.set_capacity_bytes(options_.capacity_bytes);
  s.set_used_bytes(c.used_bytes);
  s.set_objects(c.objects);
  s.set_slabs_total(c.total);
  s.set_slabs_free(c.free);
  s.set_slabs_granted(c.granted);
  s.set_slabs_sealed(c.sealed);
  s.set_slabs_region(c.region);
  s.set_slabs_reclaimed(c.reclaimed);
  s.set_index_slots(c.index_slots);
  s.set_slabs_evicted(c.evicted);
  s.set_objects_evicted(c.objects_evicted);
  for (uint64_t id : slabs_->RegionIds()) s.add_region_ids(id);
  pins_->FillStats(&s);
  return s;
}

absl::Status NodeImpl::ServeMetrics() {
  metrics::HttpServer::Handlers handlers;
  handlers.metrics = [this] { return MetricsPage(); };
  handlers.health = [this] {
    if (fenced_) {
      return absl::FailedPreconditionError(
          "the coordinator declared this node dead: it serves nothing; restart "
          "it");
    }
    return absl::OkStatus();
  };
  MESHPOOL_ASSIGN_OR_RETURN(
      metrics_,
      metrics::HttpServer::Start(options_.metrics_listen, std::move(handlers)));
  MESHPOOL_ASSIGN_OR_RETURN(
      std::string url, Advertised(metrics_->url(), options_.advertise_host));
  info_.set_metrics_address(url);
  Log(absl::StrCat("metrics on ", info_.metrics_address()));
  return absl::OkStatus();
}

std::string NodeImpl::MetricsPage() const {
  if (!metrics_ready_) return "";  // registering: info_ is still changing
  const proto::NodeStats stats = Stats();
  NodeMetricsInput in;
  in.info = &info_;
  in.stats = &stats;
  in.slabs = slabs_->Counts();
  in.fenced = fenced_;
  const int64_t ok_ns = heartbeat_ok_ns_;
  if (ok_ns != 0)
    in.since_heartbeat = options_.env->Now() - absl::FromUnixNanos(ok_ns);
  return NodeMetricsText(in);
}

void NodeImpl::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock stop_lock(&stop_mu_);
    stop_ = true;
  }
  metrics_.reset();  // no scrape reads what the rest of Shutdown stops
  if (server_ != nullptr)
    server_->Shutdown(NodeServer::kDefaultShutdownDeadline);
  if (heartbeat_.joinable()) heartbeat_.join();
  if (reclaimer_.joinable()) reclaimer_.join();
  if (evictor_ != nullptr) evictor_->Shutdown();  // its endpoint, before...
  shm_region_.reset();
  shm_transport_.reset();  // same-host clients see it closed
  region_.reset();         // before the transport that registered it
  transport_.reset();      // ends one-sided access; the pool outlives it
  done_.Notify();
}

Node::Node(std::unique_ptr<NodeImpl> impl) : impl_(std::move(impl)) {}
Node::~Node() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Node>> Node::Start(
    NodeOptions options, std::unique_ptr<rdma::Transport> transport) {
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<NodeImpl> impl,
      NodeImpl::Start(std::move(options), std::move(transport)));
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

const proto::NodeInfo& Node::info() const { return impl_->info(); }
proto::NodeStats Node::Stats() const { return impl_->Stats(); }
void Node::Shutdown() { impl_->Shutdown(); }
void Node::Wait() { impl_->Wait(); }

}  // namespace meshpool::store
