#include "bench/kv_compare_systems.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/memcache_client.h"
#include "bench/resp_client.h"
#include "common/common.h"
#include "meshpool/client.h"

namespace meshpool::bench {
namespace {

// Turns per-key lengths (nullopt: absent) into Get's contract.
absl::Status CheckFound(absl::string_view system,
                        absl::Span<const absl::string_view> keys,
                        const std::vector<std::optional<size_t>>& found,
                        std::vector<size_t>& lengths) {
  lengths.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i].has_value()) {
      return absl::NotFoundError(absl::StrCat(
          system, " has no value for ", keys[i],
          ", which this run stored (evicted? give it more memory)"));
    }
    lengths[i] = *found[i];
  }
  return absl::OkStatus();
}

absl::Status Annotate(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// ---- redis ----

class RedisSession : public KvSession {
 public:
  explicit RedisSession(RespClient client) : client_(std::move(client)) {}
  absl::Status Put(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::string_view> values) override {
    return client_.SetBatch(keys, values);
  }
  absl::Status Get(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::Span<char>> outs,
                   std::vector<size_t>& lengths) override {
    MESHPOOL_ASSIGN_OR_RETURN(auto found, client_.MGet(keys, outs));
    return CheckFound("redis", keys, found, lengths);
  }

 private:
  RespClient client_;
};

class RedisSystem : public KvSystem {
 public:
  RedisSystem(std::string address, absl::Duration timeout)
      : address_(std::move(address)), timeout_(timeout) {}
  std::string name() const override { return "redis"; }
  std::string description() const override {
    return absl::StrCat("redis at ", address_);
  }
  absl::StatusOr<std::unique_ptr<KvSession>> OpenSession() override {
    MESHPOOL_ASSIGN_OR_RETURN(RespClient c,
                              RespClient::Connect(address_, timeout_));
    return std::make_unique<RedisSession>(std::move(c));
  }

 private:
  const std::string address_;
  const absl::Duration timeout_;
};

// ---- memcached ----

class MemcacheSession : public KvSession {
 public:
  explicit MemcacheSession(MemcacheClient client)
      : client_(std::move(client)) {}
  absl::Status Put(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::string_view> values) override {
    return client_.SetBatch(keys, values);
  }
  absl::Status Get(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::Span<char>> outs,
                   std::vector<size_t>& lengths) override {
    MESHPOOL_ASSIGN_OR_RETURN(auto found, client_.GetMulti(keys, outs));
    return CheckFound("memcached", keys, found, lengths);
  }

 private:
  MemcacheClient client_;
};

class MemcacheSystem : public KvSystem {
 public:
  MemcacheSystem(std::string address, std::string version,
                 absl::Duration timeout)
      : address_(std::move(address)),
        version_(std::move(version)),
        timeout_(timeout) {}
  std::string name() const override { return "memcached"; }
  std::string description() const override {
    return absl::StrCat("memcached ", version_, " at ", address_);
  }
  absl::StatusOr<std::unique_ptr<KvSession>> OpenSession() override {
    MESHPOOL_ASSIGN_OR_RETURN(MemcacheClient c,
                              MemcacheClient::Connect(address_, timeout_));
    return std::make_unique<MemcacheSession>(std::move(c));
  }

 private:
  const std::string address_;
  const std::string version_;
  const absl::Duration timeout_;
};

// ---- meshpool ----

class MeshpoolSession : public KvSession {
 public:
  explicit MeshpoolSession(Client& client) : client_(client) {}

  absl::Status Attach(absl::Span<char> put, absl::Span<char> get) override {
    put_reg_.reset();
    get_reg_.reset();
    auto p = client_.RegisterBuffer(put.data(), put.size());
    if (!p.ok()) return Annotate(p.status(), "RegisterBuffer (put buffer)");
    auto g = client_.RegisterBuffer(get.data(), get.size());
    if (!g.ok()) return Annotate(g.status(), "RegisterBuffer (get buffer)");
    put_reg_ = *std::move(p);
    get_reg_ = *std::move(g);
    return absl::OkStatus();
  }

  absl::Status Put(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::string_view> values) override {
    std::vector<absl::Status> s = client_.BatchPut(keys, values);
    if (s.size() != keys.size()) {
      return absl::InternalError(absl::StrCat("BatchPut returned ", s.size(),
                                              " statuses for ", keys.size(),
                                              " keys"));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!s[i].ok()) return Annotate(s[i], absl::StrCat("BatchPut ", keys[i]));
    }
    return absl::OkStatus();
  }

  absl::Status Get(absl::Span<const absl::string_view> keys,
                   absl::Span<const absl::Span<char>> outs,
                   std::vector<size_t>& lengths) override {
    std::vector<absl::StatusOr<size_t>> r = client_.BatchGet(keys, outs);
    if (r.size() != keys.size()) {
      return absl::InternalError(absl::StrCat("BatchGet returned ", r.size(),
                                              " results for ", keys.size(),
                                              " keys"));
    }
    lengths.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!r[i].ok()) {
        return Annotate(
            r[i].status(),
            absl::StrCat("BatchGet ", keys[i],
                         absl::IsNotFound(r[i].status())
                             ? " (this run stored it: evicted? give the "
                               "nodes more --capacity)"
                             : ""));
      }
      lengths[i] = *r[i];
    }
    return absl::OkStatus();
  }

 private:
  Client& client_;
  // Destroyed (unregistered) before the client goes: see KvSystem.
  std::unique_ptr<Client::RegisteredBuffer> put_reg_;
  std::unique_ptr<Client::RegisteredBuffer> get_reg_;
};

class MeshpoolSystem : public KvSystem {
 public:
  MeshpoolSystem(std::string name, std::string coordinator,
                 std::unique_ptr<Client> client, size_t nodes)
      : name_(std::move(name)),
        coordinator_(std::move(coordinator)),
        client_(std::move(client)),
        nodes_(nodes) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return absl::StrCat(name_, ", ", nodes_, " nodes, coordinator ",
                        coordinator_);
  }
  absl::StatusOr<std::unique_ptr<KvSession>> OpenSession() override {
    return std::make_unique<MeshpoolSession>(*client_);
  }

 private:
  const std::string name_;
  const std::string coordinator_;
  std::unique_ptr<Client> client_;
  const size_t nodes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvSystem>> OpenRedis(absl::string_view address,
                                                    absl::Duration timeout) {
  // One connection now, to fail early with a clear message.
  MESHPOOL_RETURN_IF_ERROR(RespClient::Connect(address, timeout).status());
  return std::make_unique<RedisSystem>(std::string(address), timeout);
}

absl::StatusOr<std::unique_ptr<KvSystem>> OpenMemcached(
    absl::string_view address, absl::Duration timeout) {
  MESHPOOL_ASSIGN_OR_RETURN(MemcacheClient c,
                            MemcacheClient::Connect(address, timeout));
  return std::make_unique<MemcacheSystem>(std::string(address), c.version(),
                                          timeout);
}

absl::StatusOr<std::unique_ptr<KvSystem>> OpenMeshpool(
    absl::string_view name, absl::string_view coordinator,
    absl::Duration timeout) {
  ClientOptions options;
  options.coordinator = std::string(coordinator);
  options.connect_timeout = timeout;
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                            Client::Connect(std::move(options)));
  MESHPOOL_ASSIGN_OR_RETURN(ClusterStatus status, client->Status());
  size_t alive = 0;
  for (const NodeStatus& n : status.nodes) alive += n.alive ? 1 : 0;
  if (alive == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the meshpool cluster at ", coordinator, " has no live node"));
  }
  return std::make_unique<MeshpoolSystem>(
      std::string(name), std::string(coordinator), std::move(client), alive);
}

}  // namespace meshpool::bench
