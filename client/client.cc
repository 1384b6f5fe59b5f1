#include "client/meshpool/client.h"

#include <atomic>
#include <cstdlib>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/buffer_registry.h"
#include "client/kv_protocol.h"
#include "client/node_connection.h"
#include "common/common.h"
#include "placement/placement.h"
#include "rdma/rdma.h"
#include "store/slab_manager.h"

namespace meshpool {

using client_internal::KeyRef;
using client_internal::NodeConnection;

namespace {

class RegisteredBufferImpl : public Client::RegisteredBuffer {
 public:
  RegisteredBufferImpl(void* addr, size_t length,
                       std::unique_ptr<rdma::MemoryRegion> region,
                       const rdma::Transport* transport,
                       std::shared_ptr<client_internal::BufferRegistry> registry)
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
  std::shared_ptr<client_internal::BufferRegistry> registry_;
};

uint64_t RandomSequenceStart() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string NewClientId() {
  std::random_device rd;
  return absl::StrCat("client-", absl::Hex(rd()), absl::Hex(rd()));
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options)
      : options_(std::move(options)),
        client_id_(NewClientId()),
        sequence_(RandomSequenceStart()) {}

  absl::Status Start() {
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
        watch_, coordinator_->WatchClusterMap(
                    map.epoch(),
                    [this](const proto::ClusterMap& m) {
                      OnMap(m, /*from_watch=*/true);
                    }));
    return absl::OkStatus();
  }

  // Routes `key` to its home node's connection.
  absl::StatusOr<std::shared_ptr<NodeConnection>> Route(const KeyRef& key) {
    std::shared_ptr<const proto::ClusterMap> map = CurrentMap();
    int home = placement::HomeNode(*map, key.hash.lo, key.hash.hi);
    if (home < 0) {
      return absl::UnavailableError(absl::StrCat(
          "no live memory node in cluster map epoch ", map->epoch(),
          "; start one with `meshpool node --coordinator ",
          options_.coordinator, "`"));
    }
    return Connection(map->nodes(home).info());
  }

  // Runs `op` on the key's home node; after an Unavailable, refreshes the
  // map once and retries if the key's home changed (a node died or joined).
  template <typename Result, typename Op>
  Result OnHome(const KeyRef& key, Op op) {
    absl::StatusOr<std::shared_ptr<NodeConnection>> node = Route(key);
    if (!node.ok()) return node.status();
    Result result = op(**node);
    if (result.ok() ||
        StatusOf(result).code() != absl::StatusCode::kUnavailable) {
      return result;
    }
    if (!RefreshMap().ok()) return result;
    absl::StatusOr<std::shared_ptr<NodeConnection>> again = Route(key);
    if (!again.ok()) return again.status();
    if (*again == *node) return result;
    return op(**again);
  }

  // Validates and routes `keys`, then calls
  //   per_node(node, indices, refs)
  // once per home node with the indices (into `keys`) of the keys it holds
  // and their refs. An invalid or unroutable key gets its error through
  // fail(index, status) instead.
  template <typename Fail, typename PerNode>
  void ForEachNode(absl::Span<const absl::string_view> keys, Fail fail,
                   PerNode per_node) {
    struct Group {
      std::shared_ptr<NodeConnection> node;
      std::vector<size_t> indices;
      std::vector<KeyRef> refs;
    };
    std::vector<Group> groups;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (absl::Status valid = client_internal::ValidateKey(keys[i]);
          !valid.ok()) {
        fail(i, valid);
        continue;
      }
      KeyRef ref = client_internal::MakeKeyRef(keys[i]);
      absl::StatusOr<std::shared_ptr<NodeConnection>> node = Route(ref);
      if (!node.ok()) {
        fail(i, node.status());
        continue;
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.node == *node; });
      if (it == groups.end()) it = groups.insert(groups.end(), {*node, {}, {}});
      it->indices.push_back(i);
      it->refs.push_back(ref);
    }
    for (Group& g : groups) per_node(*g.node, g.indices, g.refs);
  }

  absl::Status RefreshMap() {
    MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map,
                              coordinator_->GetClusterMap());
    OnMap(map);
    return absl::OkStatus();
  }

  std::shared_ptr<const proto::ClusterMap> CurrentMap() {
    absl::MutexLock lock(&mu_);
    return map_;
  }

  absl::StatusOr<std::unique_ptr<RegisteredBuffer>> Register(void* addr,
                                                             size_t length) {
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
    return std::unique_ptr<RegisteredBuffer>(new RegisteredBufferImpl(
        addr, length, std::move(region), transport, buffers_));
  }

  // The lkey when [data, data + size) lies in a buffer registered with the
  // transport `node` is reached by.
  std::optional<uint32_t> RegisteredLkey(const void* data, size_t size,
                                         const NodeConnection& node) const {
    if (size == 0) return std::nullopt;
    return buffers_->Find(data, size, &node.transport());
  }

  uint64_t NextSequence(uint64_t n = 1) { return sequence_.fetch_add(n); }
  const ClientOptions& options() const { return options_; }

 private:
  static absl::Status StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  // Adopts `map` when it is newer. A map from the watch is adopted even when
  // its epoch is lower than the current one if it is also lower than the
  // watch's previous map: the watch delivers in order, so that means the
  // coordinator restarted and counts again from scratch.
  void OnMap(const proto::ClusterMap& map, bool from_watch = false) {
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

  static std::string ConnKey(const proto::NodeInfo& info) {
    return absl::StrCat(info.node_id(), "/", info.incarnation());
  }

 public:
  absl::StatusOr<std::shared_ptr<NodeConnection>> Connection(
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
    MESHPOOL_ASSIGN_OR_RETURN(rdma::Transport * transport,
                              TransportFor(address));
    client_internal::ConnectionOptions copts;
    copts.client_id = client_id_;
    copts.connect_timeout = options_.connect_timeout;
    copts.op_timeout = options_.op_timeout;
    MESHPOOL_ASSIGN_OR_RETURN(
        std::shared_ptr<NodeConnection> conn,
        NodeConnection::Create(info, *transport, copts));
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = connections_.emplace(key, conn);
    return it->second;
  }


 private:
  // The scheme of the first live node's transport address ("verbs://" or
  // "tcp://"); "tcp://" when there is none yet.
  std::string DataScheme() {
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

  absl::StatusOr<rdma::Transport*> TransportFor(absl::string_view address) {
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
          return absl::FailedPreconditionError(absl::StrCat(
              "node at ", address, " serves RDMA (verbs), but this client "
              "cannot open an RDMA device: ", verbs.status().message(),
              " (run `meshpool doctor`)"));
        }
        verbs_ = *std::move(verbs);
      }
      return verbs_.get();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node transport address '", address,
        "' uses a transport this client does not support (have: tcp, verbs)"));
  }

  static rdma::VerbsOptions VerbsOptionsFrom(const ClientOptions::Rdma& rdma) {
    rdma::VerbsOptions v;
    v.devices = rdma.devices;
    v.gid_index = rdma.gid_index;
    v.self_name = rdma.self_name;
    v.peer_devices = rdma.peer_devices;
    return v;
  }

  const ClientOptions options_;
  const std::string client_id_;
  const std::shared_ptr<client_internal::BufferRegistry> buffers_ =
      std::make_shared<client_internal::BufferRegistry>();
  // Object headers carry it, so it starts at random: two clients' objects
  // of the same key and size never have identical headers (and digest
  // seeds).
  std::atomic<uint64_t> sequence_;
  std::unique_ptr<placement::CoordinatorClient> coordinator_;
  absl::Mutex mu_;
  std::unique_ptr<rdma::Transport> tcp_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<rdma::Transport> verbs_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const proto::ClusterMap> map_ ABSL_GUARDED_BY(mu_);
  uint64_t last_watch_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections go before the transport they use.
  absl::flat_hash_map<std::string, std::shared_ptr<NodeConnection>>
      connections_ ABSL_GUARDED_BY(mu_);
  // Stops first: no map callback runs into a half-destroyed client.
  std::unique_ptr<placement::CoordinatorClient::Watch> watch_;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.coordinator.empty()) {
    const char* env = std::getenv("MESHPOOL_COORDINATOR");
    if (env == nullptr || *env == '\0') {
      return absl::InvalidArgumentError(
          "no coordinator: pass --coordinator HOST:PORT or set "
          "MESHPOOL_COORDINATOR (`meshpool up` prints the address)");
    }
    options.coordinator = env;
  }
  if (options.op_timeout <= absl::ZeroDuration() ||
      options.op_timeout >= store::kLeaseMargin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op_timeout ", absl::FormatDuration(options.op_timeout),
        " must be positive and below the memory nodes' lease margin (",
        absl::FormatDuration(store::kLeaseMargin), ")"));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  MESHPOOL_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>>
Client::RegisterBuffer(void* addr, size_t length) {
  return impl_->Register(addr, length);
}

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = client_internal::MakeKeyRef(key);
  uint64_t seq = impl_->NextSequence();
  return impl_->OnHome<absl::Status>(ref, [&](NodeConnection& node) {
    return client_internal::PutValue(
        node, ref, value, seq,
        impl_->RegisteredLkey(value.data(), value.size(), node));
  });
}

absl::StatusOr<size_t> Client::Get(absl::string_view key,
                                   absl::Span<char> out) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = client_internal::MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<size_t>>(
      ref, [&](NodeConnection& node) -> absl::StatusOr<size_t> {
        std::optional<uint32_t> lkey =
            impl_->RegisteredLkey(out.data(), out.size(), node);
        client_internal::DirectBuffer direct{out, lkey.value_or(0)};
        size_t length = 0;
        MESHPOOL_RETURN_IF_ERROR(client_internal::GetValue(
            node, ref, impl_->options().max_verify_retries,
            [&](absl::string_view value) {
              return client_internal::CopyValueTo(value, out, &length);
            },
            lkey ? &direct : nullptr));
        return length;
      });
}

absl::StatusOr<std::string> Client::Get(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = client_internal::MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<std::string>>(
      ref, [&](NodeConnection& node) -> absl::StatusOr<std::string> {
        std::string result;
        MESHPOOL_RETURN_IF_ERROR(client_internal::GetValue(
            node, ref, impl_->options().max_verify_retries,
            [&](absl::string_view value) {
              result.assign(value.data(), value.size());
              return absl::OkStatus();
            }));
        return result;
      });
}

absl::Status Client::Delete(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = client_internal::MakeKeyRef(key);
  return impl_->OnHome<absl::Status>(ref, [&](NodeConnection& node) {
    return client_internal::DeleteKey(node, ref,
                                      impl_->options().max_verify_retries);
  });
}

absl::StatusOr<bool> Client::Exists(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = client_internal::MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<bool>>(ref, [&](NodeConnection& node) {
    return client_internal::KeyExists(node, ref,
                                      impl_->options().max_verify_retries);
  });
}

namespace {

absl::Status SizeMismatch(size_t keys, size_t others, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "batch has ", keys, " keys but ", others, " ", what,
      "; pass one per key"));
}

}  // namespace

std::vector<absl::Status> Client::BatchPut(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> values) {
  std::vector<absl::Status> results(keys.size());
  if (keys.size() != values.size()) {
    for (auto& r : results) r = SizeMismatch(keys.size(), values.size(), "values");
    return results;
  }
  impl_->ForEachNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); },
      [&](NodeConnection& node, const std::vector<size_t>& indices,
          const std::vector<KeyRef>& refs) {
        std::vector<absl::string_view> v;
        for (size_t i : indices) v.push_back(values[i]);
        std::vector<absl::Status> out(refs.size());
        client_internal::BatchPutValues(node, refs, v,
                                        impl_->NextSequence(refs.size()),
                                        absl::MakeSpan(out));
        for (size_t j = 0; j < indices.size(); ++j) results[indices[j]] = out[j];
      });
  return results;
}

std::vector<absl::StatusOr<size_t>> Client::BatchGet(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  std::vector<absl::StatusOr<size_t>> results(keys.size());
  if (keys.size() != outs.size()) {
    for (auto& r : results) r = SizeMismatch(keys.size(), outs.size(), "buffers");
    return results;
  }
  impl_->ForEachNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); },
      [&](NodeConnection& node, const std::vector<size_t>& indices,
          const std::vector<KeyRef>& refs) {
        std::vector<absl::Span<char>> o;
        for (size_t i : indices) o.push_back(outs[i]);
        std::vector<absl::StatusOr<size_t>> out(refs.size());
        client_internal::BatchGetValues(node, refs, o,
                                        impl_->options().max_verify_retries,
                                        absl::MakeSpan(out));
        for (size_t j = 0; j < indices.size(); ++j) results[indices[j]] = out[j];
      });
  return results;
}

std::vector<absl::StatusOr<bool>> Client::BatchExists(
    absl::Span<const absl::string_view> keys) {
  std::vector<absl::StatusOr<bool>> results(keys.size());
  impl_->ForEachNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); },
      [&](NodeConnection& node, const std::vector<size_t>& indices,
          const std::vector<KeyRef>& refs) {
        std::vector<absl::StatusOr<bool>> out(refs.size());
        client_internal::BatchKeysExist(node, refs,
                                        impl_->options().max_verify_retries,
                                        absl::MakeSpan(out));
        for (size_t j = 0; j < indices.size(); ++j) results[indices[j]] = out[j];
      });
  return results;
}

absl::StatusOr<ClusterStatus> Client::Status() {
  MESHPOOL_RETURN_IF_ERROR(impl_->RefreshMap());
  std::shared_ptr<const proto::ClusterMap> map = impl_->CurrentMap();
  ClusterStatus status;
  status.epoch = map->epoch();
  for (const proto::NodeEntry& e : map->nodes()) {
    NodeStatus n;
    n.node_id = e.info().node_id();
    n.alive = e.state() == proto::NODE_ALIVE;
    n.control_address = e.info().control_address();
    if (!e.info().transport_addresses().empty()) {
      n.transport_address = e.info().transport_addresses(0);
    }
    proto::NodeStats stats = e.stats();
    if (n.alive) {
      absl::StatusOr<std::shared_ptr<NodeConnection>> conn =
          impl_->Connection(e.info());
      absl::StatusOr<proto::NodeStats> fresh =
          conn.ok() ? (*conn)->GetStats() : conn.status();
      if (fresh.ok()) {
        stats = *fresh;
      } else {
        n.error = std::string(fresh.status().message());
      }
    }
    n.capacity_bytes = e.info().capacity_bytes();
    n.used_bytes = stats.used_bytes();
    n.objects = stats.objects();
    n.slabs_total = stats.slabs_total();
    n.slabs_free = stats.slabs_free();
    n.slabs_reclaimed = stats.slabs_reclaimed();
    status.nodes.push_back(std::move(n));
  }
  return status;
}

uint64_t Client::map_epoch() const {
  std::shared_ptr<const proto::ClusterMap> map = impl_->CurrentMap();
  return map ? map->epoch() : 0;
}

}  // namespace meshpool
