#include "client/client_core.h"

#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::client_internal {
namespace {

class RegisteredBufferImpl : public Client::RegisteredBuffer {
 public:
  RegisteredBufferImpl(void* addr, size_t length,
                       std::unique_ptr<rdma::MemoryRegion> region,
                       const rdma::Transport* transport,
                       std::shared_ptr<BufferRegistry> registry)
      : span_(static_cast<char*>(addr), length),
        region_(std::move(region)),
        registry_(std::move(registry)) {
    registry_->Add(addr, length, region_->lkey(), transport);
  }
  ~RegisteredBufferImpl() override { registry_->Remove(span_.data()); }
  absl::Span<char> span() const override { return span_; }

 private:
  absl::Span<char> span_;
  std::unique_ptr<rdma::MemoryRegion> region_;
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
  return v;
}

}  // namespace

ClientCore::ClientCore(ClientOptions options)
    : options_(std::move(options)),
      client_id_(NewClientId()),
      sequence_(RandomSequenceStart()) {}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Start(
    ClientOptions options) {
  std::shared_ptr<ClientCore> core(new ClientCore(std::move(options)));
  MESHPOOL_RETURN_IF_ERROR(core->Init());
  return core;
}

absl::Status ClientCore::Init() {
  MESHPOOL_ASSIGN_OR_RETURN(
      coordinator_, placement::CoordinatorClient::Connect(
                        options_.coordinator, options_.connect_timeout));
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
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<NodeConnection>> ClientCore::Route(
    const KeyRef& key) {
  std::shared_ptr<const proto::ClusterMap> map = CurrentMap();
  int home = placement::HomeNode(*map, key.hash.lo, key.hash.hi);
  if (home < 0) {
    return absl::UnavailableError(
        absl::StrCat("no live memory node in cluster map epoch ", map->epoch(),
                     "; start one with `meshpool node --coordinator ",
                     options_.coordinator, "`"));
  }
  return Connection(map->nodes(home).info());
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
  // Registered with the transport the cluster's nodes are reached by: a
  // registration is usable only on the transport that made it.
  MESHPOOL_ASSIGN_OR_RETURN(rdma::Transport * transport,
                            TransportFor(DataScheme()));
  MESHPOOL_ASSIGN_OR_RETURN(auto region,
                            transport->RegisterMemory(addr, length));
  return std::unique_ptr<Client::RegisteredBuffer>(new RegisteredBufferImpl(
      addr, length, std::move(region), transport, buffers_));
}

// Adopts `map` when it is newer. A map from the watch is adopted even when
// its epoch is lower than the current one if it is also lower than the
// watch's previous map: the watch delivers in order, so that means the
// coordinator restarted and counts again from scratch.
void ClientCore::OnMap(const proto::ClusterMap& map, bool from_watch) {
  std::vector<std::shared_ptr<NodeConnection>> dropped;
  {
    absl::MutexLock lock(&mu_);
    bool restarted = from_watch && map.epoch() < last_watch_epoch_;
    if (from_watch) last_watch_epoch_ = map.epoch();
    if (map_ && map.epoch() <= map_->epoch() && !restarted) return;
    map_ = std::make_shared<const proto::ClusterMap>(map);
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
  absl::string_view address = info.transport_addresses().empty()
                                  ? absl::string_view()
                                  : info.transport_addresses(0);
  MESHPOOL_ASSIGN_OR_RETURN(rdma::Transport * transport, TransportFor(address));
  ConnectionOptions copts;
  copts.client_id = client_id_;
  copts.connect_timeout = options_.connect_timeout;
  copts.op_timeout = options_.op_timeout;
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<NodeConnection> conn,
                            NodeConnection::Create(info, *transport, copts));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = connections_.emplace(key, conn);
  return it->second;
}

// The scheme of the first live node's transport address ("verbs://" or
// "tcp://"); "tcp://" when there is none yet.
std::string ClientCore::DataScheme() {
  std::shared_ptr<const proto::ClusterMap> map = CurrentMap();
  for (const proto::NodeEntry& e : map->nodes()) {
    if (e.state() != proto::NODE_ALIVE ||
        e.info().transport_addresses().empty()) {
      continue;
    }
    absl::string_view address = e.info().transport_addresses(0);
    size_t end = address.find("://");
    if (end != absl::string_view::npos) {
      return std::string(address.substr(0, end + 3));
    }
  }
  return "tcp://";
}

absl::StatusOr<rdma::Transport*> ClientCore::TransportFor(
    absl::string_view address) {
  if (options_.transport) return options_.transport.get();
  absl::MutexLock lock(&mu_);
  if (absl::StartsWith(address, "tcp://")) {
    if (!tcp_) {
      MESHPOOL_ASSIGN_OR_RETURN(tcp_, rdma::CreateTcpTransport());
    }
    return tcp_.get();
  }
  if (absl::StartsWith(address, "verbs://")) {
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
  return absl::FailedPreconditionError(absl::StrCat(
      "node transport address '", address,
      "' uses a transport this client does not support (have: tcp, verbs)"));
}

}  // namespace meshpool::client_internal
