#include "client/meshpool/client.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "client/kv_protocol.h"
#include "client/node_connection.h"
#include "client/region.h"
#include "common/common.h"
#include "store/slab_manager.h"

namespace meshpool {

using client_internal::KeyRef;
using client_internal::NodeConnection;

// The public Client's state is a ClientCore, shared with the Regions it
// opens; Impl adds the key-routing helpers the KV calls use.
class Client::Impl {
 public:
  explicit Impl(std::shared_ptr<client_internal::ClientCore> core)
      : core_(std::move(core)) {}

  const std::shared_ptr<client_internal::ClientCore>& core() { return core_; }

  // Runs `op` on the key's home node; after an Unavailable, refreshes the
  // map once and retries if the key's home changed (a node died or joined).
  template <typename Result, typename Op>
  Result OnHome(const KeyRef& key, Op op) {
    absl::StatusOr<std::shared_ptr<NodeConnection>> node = core_->Route(key);
    if (!node.ok()) return node.status();
    Result result = op(**node);
    if (result.ok() ||
        StatusOf(result).code() != absl::StatusCode::kUnavailable) {
      return result;
    }
    if (!core_->RefreshMap().ok()) return result;
    absl::StatusOr<std::shared_ptr<NodeConnection>> again = core_->Route(key);
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
      absl::StatusOr<std::shared_ptr<NodeConnection>> node = core_->Route(ref);
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

  std::optional<uint32_t> RegisteredLkey(const void* data, size_t size,
                                         const NodeConnection& node) const {
    return core_->RegisteredLkey(data, size, node);
  }
  uint64_t NextSequence(uint64_t n = 1) { return core_->NextSequence(n); }
  const ClientOptions& options() const { return core_->options(); }

 private:
  static absl::Status StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  const std::shared_ptr<client_internal::ClientCore> core_;
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
  MESHPOOL_ASSIGN_OR_RETURN(
      std::shared_ptr<client_internal::ClientCore> core,
      client_internal::ClientCore::Start(std::move(options)));
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(std::move(core))));
}

absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>>
Client::RegisterBuffer(void* addr, size_t length) {
  return impl_->core()->Register(addr, length);
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
  MESHPOOL_RETURN_IF_ERROR(impl_->core()->RefreshMap());
  std::shared_ptr<const proto::ClusterMap> map = impl_->core()->CurrentMap();
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
    status.nodes.push_back(std::move(n));
  }
  return status;
}

uint64_t Client::map_epoch() const {
  std::shared_ptr<const proto::ClusterMap> map = impl_->core()->CurrentMap();
  return map ? map->epoch() : 0;
}

absl::StatusOr<std::unique_ptr<Region>> Client::CreateRegion(
    absl::string_view name, uint64_t size, const RegionOptions& options) {
  return client_internal::CreateRegion(impl_->core(), name, size, options);
}

absl::StatusOr<std::unique_ptr<Region>> Client::OpenRegion(
    absl::string_view name) {
  return client_internal::OpenRegion(impl_->core(), name);
}

absl::Status Client::DeleteRegion(absl::string_view name) {
  return client_internal::DeleteRegion(*impl_->core(), name);
}

absl::Status Client::RenameRegion(absl::string_view from, absl::string_view to,
                                  bool replace) {
  return client_internal::RenameRegion(*impl_->core(), from, to, replace);
}

absl::StatusOr<std::vector<RegionDescription>> Client::ListRegions(
    absl::string_view prefix) {
  return client_internal::ListRegions(*impl_->core(), prefix);
}

}  // namespace meshpool
