#include "client/meshpool/client.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auth/auth.h"
#include "client/client_access.h"
#include "client/client_core.h"
#include "client/client_impl.h"
#include "client/client_test_peer.h"
#include "client/kv_protocol.h"
#include "client/meshpool/region.h"
#include "client/node_connection.h"
#include "client/region.h"
#include "common/common.h"
#include "format/layout.h"
#include "format/protocol.h"
#include "rdma/device_matrix.h"
#include "rdma/uc.h"

namespace meshpool {

static_assert(kMaxBusyPoll == rdma::kUcMaxBusyPoll);
static_assert(kDefaultBusyPoll <= kMaxBusyPoll);

using client_internal::KeyRef;
using client_internal::NodeConnection;

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

namespace {

// Client::Connect, with the test peer's fixed transport (null: none).
absl::StatusOr<std::unique_ptr<Client>> ConnectWith(
    ClientOptions options, std::shared_ptr<rdma::Transport> fixed_transport) {
  if (options.coordinator.empty()) {
    const char* env = std::getenv("MESHPOOL_COORDINATOR");
    if (env == nullptr || *env == '\0') {
      return absl::InvalidArgumentError(
          "no coordinator: give ClientOptions.coordinator (HOST:PORT) or set "
          "MESHPOOL_COORDINATOR (`meshpool up` prints the address)");
    }
    options.coordinator = env;
  }
  const int tls_files = !options.tls_ca_file.empty() +
                        !options.tls_cert_file.empty() +
                        !options.tls_key_file.empty();
  if (tls_files == 0) {
    const char* dir = std::getenv("MESHPOOL_TLS_DIR");
    const char* name = std::getenv("MESHPOOL_TLS_NAME");
    if (dir != nullptr && *dir != '\0') {
      auth::TlsConfig tls = auth::TlsConfig::InDir(
          dir, name != nullptr && *name != '\0' ? name : "client");
      options.tls_ca_file = tls.ca_file;
      options.tls_cert_file = tls.cert_file;
      options.tls_key_file = tls.key_file;
    }
  } else if (tls_files != 3) {
    return absl::InvalidArgumentError(
        "give all three of ClientOptions.tls_ca_file, tls_cert_file and "
        "tls_key_file, or none (no TLS)");
  }
  if (options.op_timeout <= absl::ZeroDuration() ||
      options.op_timeout >= format::kLeaseMargin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op_timeout ", absl::FormatDuration(options.op_timeout),
        " must be positive and below the memory nodes' lease margin (",
        absl::FormatDuration(format::kLeaseMargin), ")"));
  }
  if (options.batch_threads < 1 ||
      options.batch_threads > client_internal::kMaxBatchThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_threads ", options.batch_threads, " must be in 1..",
                     client_internal::kMaxBatchThreads));
  }
  if (options.rdma.busy_poll < absl::ZeroDuration() ||
      options.rdma.busy_poll > kMaxBusyPoll) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdma.busy_poll ", absl::FormatDuration(options.rdma.busy_poll),
        " must be in 0..", absl::FormatDuration(kMaxBusyPoll)));
  }
  if (options.pins_per_node > format::kMaxPinsPerSession) {
    return absl::InvalidArgumentError(
        absl::StrCat("pins_per_node ", options.pins_per_node, " must be in 0..",
                     format::kMaxPinsPerSession, " (0: the node's default)"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      std::shared_ptr<client_internal::ClientCore> core,
      client_internal::ClientCore::Start(std::move(options),
                                         std::move(fixed_transport)));
  return ClientAccess::Wrap(std::move(core));
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> DeviceMatrixRow(
    absl::string_view matrix_text, absl::string_view host) {
  return rdma::ParseDeviceMatrix(matrix_text, host);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  return ConnectWith(std::move(options), nullptr);
}

absl::StatusOr<std::unique_ptr<Client>> ClientTestPeer::ConnectThrough(
    ClientOptions options, std::shared_ptr<rdma::Transport> transport) {
  if (transport == nullptr) {
    return absl::InvalidArgumentError("ConnectThrough needs a transport");
  }
  return ConnectWith(std::move(options), std::move(transport));
}

void ClientTestPeer::StopRenewingSessions(Client& client) {
  client.impl_->core()->AbandonSessions();
}

void ClientTestPeer::IgnoreMapWatch(Client& client) {
  client.impl_->core()->IgnoreMapWatch();
}

absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>>
Client::RegisterBuffer(void* addr, size_t length) {
  return impl_->core()->Register(addr, length);
}

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = impl_->core()->MakeKeyRef(key);
  uint64_t seq = impl_->NextSequence();
  return impl_->OnHome<absl::Status>(ref, [&](NodeConnection& node) {
    absl::Status put = client_internal::PutValue(
        node, ref, value, seq,
        impl_->RegisteredLkey(value.data(), value.size(), node));
    node.counters().CountPut(put, value.size());
    return put;
  });
}

absl::StatusOr<size_t> Client::Get(absl::string_view key,
                                   absl::Span<char> out) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = impl_->core()->MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<size_t>>(
      ref, [&](NodeConnection& node) -> absl::StatusOr<size_t> {
        std::optional<uint32_t> lkey =
            impl_->RegisteredLkey(out.data(), out.size(), node);
        client_internal::DirectBuffer direct{out, lkey.value_or(0)};
        size_t length = 0;
        absl::Status got = client_internal::GetValue(
            node, ref, impl_->options().max_verify_retries,
            [&](absl::string_view value) {
              return client_internal::CopyValueTo(value, out, &length);
            },
            lkey ? &direct : nullptr);
        node.counters().CountGet(got, length);
        if (!got.ok()) return got;
        return length;
      });
}

absl::StatusOr<std::string> Client::Get(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = impl_->core()->MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<std::string>>(
      ref, [&](NodeConnection& node) -> absl::StatusOr<std::string> {
        std::string result;
        absl::Status got = client_internal::GetValue(
            node, ref, impl_->options().max_verify_retries,
            [&](absl::string_view value) {
              result.assign(value.data(), value.size());
              return absl::OkStatus();
            });
        node.counters().CountGet(got, result.size());
        if (!got.ok()) return got;
        return result;
      });
}

absl::Status Client::Delete(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = impl_->core()->MakeKeyRef(key);
  return impl_->OnHome<absl::Status>(ref, [&](NodeConnection& node) {
    return client_internal::DeleteKey(node, ref,
                                      impl_->options().max_verify_retries);
  });
}

absl::StatusOr<bool> Client::Exists(absl::string_view key) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateKey(key));
  KeyRef ref = impl_->core()->MakeKeyRef(key);
  return impl_->OnHome<absl::StatusOr<bool>>(ref, [&](NodeConnection& node) {
    return client_internal::KeyExists(node, ref,
                                      impl_->options().max_verify_retries);
  });
}

namespace {

KvStats FromProto(const proto::KvClientStats& p) {
  return {p.hits(),     p.misses(),    p.puts(),
          p.bytes_in(), p.bytes_out(), p.pins()};
}

}  // namespace

absl::StatusOr<ClusterStatus> Client::Status() {
  MESHPOOL_RETURN_IF_ERROR(impl_->core()->RefreshMap());
  std::shared_ptr<const proto::ClusterMap> map = impl_->core()->CurrentMap();
  ClusterStatus status;
  status.epoch = map->epoch();
  for (const proto::NodeEntry& e : map->nodes()) {
    NodeStatus n;
    n.node_id = e.info().node_id();
    n.alive = e.state() == proto::NODE_ALIVE;
    n.control_address = e.info().control_address();
    n.metrics_address = e.info().metrics_address();
    if (!e.info().transport_addresses().empty()) {
      n.transport_address = e.info().transport_addresses(0);
    }
    proto::NodeStats stats = e.stats();
    if (n.alive) {
      absl::StatusOr<std::shared_ptr<NodeConnection>> conn =
          impl_->core()->Connection(e.info());
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
    n.slabs_region = stats.slabs_region();
    n.slabs_evicted = stats.slabs_evicted();
    n.objects_evicted = stats.objects_evicted();
    n.pinned_objects = stats.pinned_objects();
    n.pinned_bytes = stats.pinned_bytes();
    n.clients = FromProto(stats.clients_total());
    for (const proto::SessionStats& ss : stats.sessions()) {
      n.sessions.push_back({ss.client_id(), FromProto(ss.stats()),
                            ss.pinned_objects(), ss.pinned_bytes()});
    }
    status.nodes.push_back(std::move(n));
  }
  return status;
}

uint64_t Client::map_epoch() const {
  std::shared_ptr<const proto::ClusterMap> map = impl_->core()->CurrentMap();
  return map ? map->epoch() : 0;
}

absl::StatusOr<std::unique_ptr<Region>> CreateRegion(
    Client& client, absl::string_view name, uint64_t size,
    const RegionOptions& options) {
  return client_internal::CreateRegion(ClientAccess::Impl(client).core(), name,
                                       size, options);
}

absl::StatusOr<std::unique_ptr<Region>> OpenRegion(Client& client,
                                                   absl::string_view name) {
  return client_internal::OpenRegion(ClientAccess::Impl(client).core(), name);
}

absl::Status DeleteRegion(Client& client, absl::string_view name) {
  return client_internal::DeleteRegion(*ClientAccess::Impl(client).core(),
                                       name);
}

absl::Status RenameRegion(Client& client, absl::string_view from,
                          absl::string_view to, bool replace) {
  return client_internal::RenameRegion(*ClientAccess::Impl(client).core(), from,
                                       to, replace);
}

absl::StatusOr<std::vector<RegionDescription>> ListRegions(
    Client& client, absl::string_view prefix) {
  return client_internal::ListRegions(*ClientAccess::Impl(client).core(),
                                      prefix);
}

const char* RegionHealthName(RegionHealthState state) {
  switch (state) {
    case RegionHealthState::kHealthy:
      return "healthy";
    case RegionHealthState::kDegraded:
      return "degraded";
    case RegionHealthState::kLost:
      return "lost";
    case RegionHealthState::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace meshpool
