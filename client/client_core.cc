#include "client/client_core.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "placement/placement.h"
#include "rdma/shm.h"
#include "rdma/tcp.h"
#include "rdma/uc.h"
#include "rdma/verbs.h"

namespace meshpool::client_internal {
namespace {

// One caller buffer, registered with every transport the client reaches
// nodes by; unregisters (and leaves the registry) when destroyed.
class RegisteredBufferImpl : public Client::RegisteredBuffer {
 public:
  struct Registration {
    const rdma::Transport* transport;
    std::unique_ptr<rdma::MemoryRegion> region;
  };
  RegisteredBufferImpl(void* addr, size_t length,
                       std::vector<Registration> registrations,
                       std::shared_ptr<BufferRegistry> registry)
      : span_(static_cast<char*>(addr), length),
        registrations_(std::move(registrations)),
        registry_(std::move(registry)) {
    for (const Registration& r : registrations_) {
      registry_->Add(addr, length, r.region->lkey(), r.transport);
    }
  }
  ~RegisteredBufferImpl() override { registry_->Remove(span_.data()); }
  absl::Span<char> span() const override { return span_; }

 private:
  absl::Span<char> span_;
  std::vector<Registration> registrations_;
  std::shared_ptr<BufferRegistry> registry_;
};

uint64_t RandomSequenceStart() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string NewClientId() {
  std::random_device rd;
  return absl::StrCat("client-", absl::Hex(rd()), absl::Hex(rd()));
}

rdma::VerbsOptions VerbsOptionsFrom(const ClientOptions::Rdma& rdma) {
  rdma::VerbsOptions v;
  v.devices = rdma.devices;
  v.gid_index = rdma.gid_index;
  v.self_name = rdma.self_name;
  v.peer_devices = rdma.peer_devices;
  v.busy_poll = rdma.busy_poll;
  return v;
}

}  // namespace

ClientCore::ClientCore(ClientOptions options,
                       std::shared_ptr<rdma::Transport> fixed_transport)
    : options_(std::move(options)),
      fixed_transport_(std::move(fixed_transport)),
      client_id_(NewClientId()),
      sequence_(RandomSequenceStart()) {}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Start(
    ClientOptions options, std::shared_ptr<rdma::Transport> fixed_transport) {
  std::shared_ptr<ClientCore> core(
      new ClientCore(std::move(options), std::move(fixed_transport)));
  MESHPOOL_RETURN_IF_ERROR(core->Init());
  return core;
}

absl::Status ClientCore::Init() {
  auth::TlsConfig tls;
  tls.ca_file = options_.tls_ca_file;
  tls.cert_file = options_.tls_cert_file;
  tls.key_file = options_.tls_key_file;
  MESHPOOL_ASSIGN_OR_RETURN(security_, auth::MakeChannelSecurity(tls));
  MESHPOOL_ASSIGN_OR_RETURN(
      coordinator_, placement::CoordinatorClient::Connect(
                        options_.coordinator, options_.connect_timeout, tls));
  if (tls.enabled()) {
    // A tenant's keys are its own: they hash in its key space.
    MESHPOOL_ASSIGN_OR_RETURN(proto::WhoAmIReply me, coordinator_->WhoAmI());
    key_space_ = format::KeySpaceOf(me.tenant());
  }
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map,
                            coordinator_->GetClusterMap());
  OnMap(map);
  {
    // The watch starts from this map's epoch.
    absl::MutexLock lock(&mu_);
    last_watch_epoch_ = map.epoch();
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      watch_, coordinator_->WatchClusterMap(map.epoch(),
                                            [this](const proto::ClusterMap& m) {
                                              OnMap(m, /*from_watch=*/true);
                                            }));
  keeper_ = std::thread([this] { KeeperLoop(); });
  return absl::OkStatus();
}

ClientCore::~ClientCore() {
  if (keeper_.joinable()) {
    {
      absl::MutexLock lock(&keeper_mu_);
      keeper_stop_ = true;
    }
    keeper_.join();
  }
  {
    absl::MutexLock lock(&keeper_mu_);
    if (abandoned_) return;
  }
  for (const std::shared_ptr<NodeConnection>& c : Connections()) {
    c->session().Close(c->counters());
  }
}

void ClientCore::AbandonSessions() {
  {
    absl::MutexLock lock(&keeper_mu_);
    keeper_stop_ = true;
    abandoned_ = true;
  }
  if (keeper_.joinable()) keeper_.join();
}

std::vector<std::shared_ptr<NodeConnection>> ClientCore::Connections() {
  std::vector<std::shared_ptr<NodeConnection>> all;
  absl::MutexLock lock(&mu_);
  for (auto& [key, conn] : connections_) all.push_back(conn);
  return all;
}

void ClientCore::ForEachConnection(
    const std::function<void(NodeConnection&)>& fn) {
  for (const std::shared_ptr<NodeConnection>& c : Connections()) fn(*c);
}

void ClientCore::KeeperLoop() {
  while (true) {
    {
      absl::MutexLock lock(&keeper_mu_);
      if (keeper_mu_.AwaitWithTimeout(absl::Condition(&keeper_stop_),
                                      kKeeperInterval)) {
        return;
      }
    }
    for (const std::shared_ptr<NodeConnection>& c : Connections()) {
      c->session().KeepAlive(c->counters());
    }
  }
}

absl::StatusOr<std::shared_ptr<NodeConnection>> ClientCore::Route(KeyRef& key) {
  std::shared_ptr<const proto::ClusterMap> map;
  int home;
  {
    absl::MutexLock lock(&mu_);
    map = map_;
    home = table_->Home(key.hash.lo, key.hash.hi);
    if (home >= 0) {
      key.map_epoch = map->epoch();
      key.oldest_epoch =
          table_->OldestCurrentObjectEpoch(key.hash.lo, key.hash.hi);
      // The common case: the home's connection, found by its index in the
      // map (no key string, no hash lookup).
      if (static_cast<size_t>(home) < routed_.size() &&
          routed_[home] != nullptr) {
        return routed_[home];
      }
    }
  }
  if (home < 0) {
    return absl::UnavailableError(
        absl::StrCat("no live memory node in cluster map epoch ", map->epoch(),
                     "; start one with `meshpool node --coordinator ",
                     options_.coordinator, "`"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<NodeConnection> conn,
                            Connection(map->nodes(home).info()));
  absl::MutexLock lock(&mu_);
  if (map_ == map) {
    routed_.resize(std::max<size_t>(routed_.size(), map->nodes_size()));
    routed_[home] = conn;
  }
  return conn;
}

absl::Status ClientCore::RefreshMap() {
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map,
                            coordinator_->GetClusterMap());
  OnMap(map);
  return absl::OkStatus();
}

std::shared_ptr<const proto::ClusterMap> ClientCore::CurrentMap() {
  absl::MutexLock lock(&mu_);
  return map_;
}

absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>> ClientCore::Register(
    void* addr, size_t length) {
  if (addr == nullptr || length == 0) {
    return absl::InvalidArgumentError(
        "RegisterBuffer needs a non-null, non-empty range");
  }
  // Registered with every transport the cluster's live nodes are reached
  // by: a registration is usable only on the transport that made it.
  std::vector<RegisteredBufferImpl::Registration> registrations;
  for (rdma::Transport* transport : TransportsInUse()) {
    MESHPOOL_ASSIGN_OR_RETURN(auto region,
                              transport->RegisterMemory(addr, length));
    registrations.push_back({transport, std::move(region)});
  }
  return std::unique_ptr<Client::RegisteredBuffer>(new RegisteredBufferImpl(
      addr, length, std::move(registrations), buffers_));
}

std::vector<rdma::Transport*> ClientCore::TransportsInUse() {
  std::vector<rdma::Transport*> out;
  auto add = [&](rdma::Transport* t) {
    if (t != nullptr && std::find(out.begin(), out.end(), t) == out.end()) {
      out.push_back(t);
    }
  };
  std::shared_ptr<const proto::ClusterMap> map = CurrentMap();
  for (const proto::NodeEntry& e : map->nodes()) {
    if (e.state() != proto::NODE_ALIVE) continue;
    for (absl::string_view address : CandidateAddresses(e.info())) {
      absl::StatusOr<rdma::Transport*> t = TransportFor(address);
      if (t.ok()) add(*t);
    }
  }
  if (out.empty()) {
    absl::StatusOr<rdma::Transport*> t = TransportFor("tcp://");
    if (t.ok()) add(*t);
  }
  return out;
}

// The addresses to try for a node, best first: its shared-memory address
// when it is on this host (and no test transport overrides), then its main
// one.
std::vector<std::string> ClientCore::CandidateAddresses(
    const proto::NodeInfo& info) const {
  std::vector<std::string> out;
  if (!fixed_transport_) {
    for (const std::string& a : info.transport_addresses()) {
      if (rdma::IsLocalShmAddress(a)) out.push_back(a);
    }
  }
  for (const std::string& a : info.transport_addresses()) {
    if (!absl::StartsWith(a, "shm://")) {
      out.push_back(a);
      break;
    }
  }
  return out;
}

// Adopts `map` when it is newer. A map from the watch is adopted even when
// its epoch is lower than the current one if it is also lower than the
// watch's previous map: the watch delivers in order, so that means the
// coordinator restarted and counts again from scratch.
void ClientCore::OnMap(const proto::ClusterMap& map, bool from_watch) {
  if (from_watch && map_watch_ignored_.load()) return;
  // The bucket table is built outside the lock, from the current one (the
  // same result as from scratch, cheaper when few nodes changed).
  std::shared_ptr<const placement::BucketTable> previous;
  {
    absl::MutexLock lock(&mu_);
    previous = table_;
  }
  std::shared_ptr<const placement::BucketTable> table =
      placement::BucketTable::Build(map, previous.get());
  std::vector<std::shared_ptr<NodeConnection>> dropped;
  {
    absl::MutexLock lock(&mu_);
    bool restarted = from_watch && map.epoch() < last_watch_epoch_;
    if (from_watch) last_watch_epoch_ = map.epoch();
    if (map_ && map.epoch() <= map_->epoch() && !restarted) return;
    map_ = std::make_shared<const proto::ClusterMap>(map);
    table_ = std::move(table);
    routed_.clear();
    // Forget connections to nodes that died or restarted.
    absl::flat_hash_map<std::string, bool> alive;
    for (const proto::NodeEntry& e : map.nodes()) {
      if (e.state() == proto::NODE_ALIVE) alive[ConnKey(e.info())] = true;
    }
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!alive.contains(it->first)) {
        dropped.push_back(std::move(it->second));
        connections_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Destroyed outside the lock: a connection's destructor calls its node.
  dropped.clear();
}

std::string ClientCore::ConnKey(const proto::NodeInfo& info) {
  return absl::StrCat(info.node_id(), "/", info.incarnation());
}

absl::StatusOr<std::shared_ptr<NodeConnection>> ClientCore::Connection(
    const proto::NodeInfo& info) {
  std::string key = ConnKey(info);
  {
    absl::MutexLock lock(&mu_);
    auto it = connections_.find(key);
    if (it != connections_.end()) return it->second;
  }
  ConnectionOptions copts;
  copts.client_id = client_id_;
  copts.security = security_;
  copts.connect_timeout = options_.connect_timeout;
  copts.op_timeout = options_.op_timeout;
  copts.pins = options_.pins_per_node;
  std::vector<std::string> addresses = CandidateAddresses(info);
  absl::Status last = absl::FailedPreconditionError(absl::StrCat(
      "node ", info.node_id(), " registered no transport address"));
  for (size_t i = 0; i < addresses.size(); ++i) {
    absl::StatusOr<rdma::Transport*> transport = TransportFor(addresses[i]);
    if (!transport.ok()) {
      last = transport.status();
      continue;
    }
    absl::StatusOr<std::shared_ptr<NodeConnection>> conn =
        NodeConnection::Create(info, **transport, addresses[i], copts);
    if (!conn.ok()) {
      last = conn.status();
      continue;
    }
    // A same-host address is used only once a lane connects (the socket
    // may be another user's, or the node's mount namespace another).
    if (i + 1 < addresses.size() && !(*conn)->AcquireLane().ok()) continue;
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = connections_.emplace(key, *conn);
    return it->second;
  }
  return last;
}

absl::StatusOr<rdma::Transport*> ClientCore::TransportFor(
    absl::string_view address) {
  if (fixed_transport_) return fixed_transport_.get();
  absl::MutexLock lock(&mu_);
  if (absl::StartsWith(address, "tcp://")) {
    if (!tcp_) {
      MESHPOOL_ASSIGN_OR_RETURN(tcp_, rdma::CreateTcpTransport());
    }
    return tcp_.get();
  }
  if (absl::StartsWith(address, "shm://")) {
    if (!shm_) {
      rdma::ShmOptions shm;
      // A forwarded atomic waits no longer than any other operation (a
      // publishing CAS must land within the nodes' lease margin).
      shm.atomics_timeout = options_.op_timeout;
      shm.connect_timeout = options_.connect_timeout;
      absl::StatusOr<rdma::ShmAddress> parsed = rdma::ParseShmAddress(address);
      if (parsed.ok() && absl::StartsWith(parsed->atomics, "verbs://")) {
        // Atomics go through the node's device (DESIGN §3), so this client
        // needs its own verbs transport for them.
        MESHPOOL_ASSIGN_OR_RETURN(shm.atomics_transport, VerbsLocked(address));
      }
      MESHPOOL_ASSIGN_OR_RETURN(shm_, rdma::CreateShmTransport(std::move(shm)));
    }
    return shm_.get();
  }
  if (absl::StartsWith(address, "verbs://")) {
    return VerbsLocked(address);
  }
  if (absl::StartsWith(address, "uc://")) {
    if (!uc_) {
      rdma::UcOptions uc;
      uc.connect_timeout = options_.connect_timeout;
      // uc://NAME nodes are reached over UC queue pairs on these devices.
      uc.verbs = VerbsOptionsFrom(options_.rdma);
      uc.busy_poll = options_.rdma.busy_poll;
#ifdef __APPLE__
      uc.profile = rdma::UcProfile::kThunderbolt;
#endif
      MESHPOOL_ASSIGN_OR_RETURN(uc_, rdma::CreateUcTransport(uc));
    }
    return uc_.get();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "node transport address '", address,
      "' uses a transport this client does not support (have: tcp, verbs, "
      "shm, uc)"));
}

absl::StatusOr<rdma::Transport*> ClientCore::VerbsLocked(
    absl::string_view address) {
  if (!verbs_) {
    absl::StatusOr<std::unique_ptr<rdma::Transport>> verbs =
        rdma::CreateVerbsTransport(VerbsOptionsFrom(options_.rdma));
    if (!verbs.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("node at ", address,
                       " serves RDMA (verbs), but this client "
                       "cannot open an RDMA device: ",
                       verbs.status().message(), " (run `meshpool doctor`)"));
    }
    verbs_ = *std::move(verbs);
  }
  return verbs_.get();
}

}  // namespace meshpool::client_internal
