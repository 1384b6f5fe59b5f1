// The coordinator's state in etcd (coordinator/etcd_state.h): an in-memory
// mirror, and one guarded transaction per change.
#include "coordinator/etcd_state.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"

namespace meshpool::coordinator {
namespace {

constexpr absl::string_view kMapKey = "map";
constexpr absl::string_view kNextIdKey = "next_region_id";
constexpr absl::string_view kRegionsDir = "regions/";

etcdserverpb::RequestOp PutOp(std::string key, std::string value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::move(value));
  return op;
}

etcdserverpb::RequestOp DeleteOp(std::string key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(key));
  return op;
}

class EtcdState final : public CoordinatorState {
 public:
  EtcdState(std::shared_ptr<EtcdClient> client, EtcdStateOptions options)
      : client_(std::move(client)),
        options_(std::move(options)),
        env_(EnvOrDefault(options_.env)) {}

  absl::Status LoadNow() {
    absl::MutexLock lock(&write_mu_);
    return Load();
  }

  // ---- Reads and liveness: from the mirror, never waiting on etcd (mu_ is
  // never held across an etcd call).

  absl::StatusOr<proto::ClusterMap> Snapshot() const override {
    absl::MutexLock lock(&mu_);
    return mem_->Snapshot();
  }
  absl::StatusOr<proto::NodeEntry> FindNode(
      absl::string_view node_id) const override {
    absl::MutexLock lock(&mu_);
    return mem_->FindNode(node_id);
  }
  absl::StatusOr<proto::RegionInfo> FindRegion(
      absl::string_view name) const override {
    absl::MutexLock lock(&mu_);
    return mem_->FindRegion(name);
  }
  absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(
      absl::string_view prefix) const override {
    absl::MutexLock lock(&mu_);
    return mem_->ListRegions(prefix);
  }
  absl::Status RecordHeartbeat(absl::string_view node_id, int64_t unix_ms,
                               const proto::NodeStats& stats) override {
    absl::MutexLock lock(&mu_);
    return mem_->RecordHeartbeat(node_id, unix_ms, stats);
  }

  // ---- Writes, one at a time (write_mu_): checked against the mirror,
  // written to etcd, and applied to the mirror only once etcd took them.

  absl::StatusOr<uint64_t> UpsertNode(const proto::NodeEntry& entry) override {
    return ChangeMap([&](CoordinatorState& s) { return s.UpsertNode(entry); });
  }
  absl::StatusOr<uint64_t> MarkDead(absl::string_view node_id) override {
    return ChangeMap([&](CoordinatorState& s) { return s.MarkDead(node_id); });
  }
  absl::StatusOr<uint64_t> RemoveNode(absl::string_view node_id) override {
    return ChangeMap(
        [&](CoordinatorState& s) { return s.RemoveNode(node_id); });
  }
  absl::StatusOr<uint64_t> BumpEpoch() override {
    return ChangeMap([&](CoordinatorState& s) { return s.BumpEpoch(); });
  }
  absl::StatusOr<uint64_t> RestartHistory(uint64_t at_least) override {
    return ChangeMap(
        [&](CoordinatorState& s) { return s.RestartHistory(at_least); });
  }
  absl::StatusOr<uint64_t> NextRegionId() override {
    absl::MutexLock write(&write_mu_);
    MESHPOOL_RETURN_IF_ERROR(Settle());
    uint64_t id;
    {
      // Taken now: a failed write skips it, and ids need only never repeat.
      absl::MutexLock lock(&mu_);
      MESHPOOL_ASSIGN_OR_RETURN(id, mem_->NextRegionId());
    }
    MESHPOOL_RETURN_IF_ERROR(
        Commit({PutOp(Key(kNextIdKey), absl::StrCat(id + 1))}));
    return id;
  }
  absl::Status PutRegion(const proto::RegionInfo& info) override {
    if (info.name().empty()) {
      return absl::InvalidArgumentError("PutRegion: the region has no name");
    }
    absl::MutexLock write(&write_mu_);
    MESHPOOL_RETURN_IF_ERROR(Settle());
    MESHPOOL_RETURN_IF_ERROR(
        Commit({PutOp(RegionKey(info.name()), info.SerializeAsString())}));
    absl::MutexLock lock(&mu_);
    return mem_->PutRegion(info);
  }
  absl::StatusOr<proto::RegionInfo> RemoveRegion(
      absl::string_view name) override {
    absl::MutexLock write(&write_mu_);
    MESHPOOL_RETURN_IF_ERROR(Settle());
    MESHPOOL_RETURN_IF_ERROR(FindRegion(name).status());  // NotFound
    MESHPOOL_RETURN_IF_ERROR(Commit({DeleteOp(RegionKey(name))}));
    absl::MutexLock lock(&mu_);
    return mem_->RemoveRegion(name);
  }
  absl::StatusOr<std::optional<proto::RegionInfo>> RenameRegion(
      absl::string_view from, absl::string_view to, bool replace) override {
    if (to.empty())
      return absl::InvalidArgumentError("RenameRegion: empty target name");
    absl::MutexLock write(&write_mu_);
    MESHPOOL_RETURN_IF_ERROR(Settle());
    // The checks the mirror's own rename makes; writers are serialised, so
    // they still hold when it runs below.
    MESHPOOL_ASSIGN_OR_RETURN(proto::RegionInfo moved, FindRegion(from));
    if (from != to) {
      absl::StatusOr<proto::RegionInfo> taken = FindRegion(to);
      if (taken.ok() && !replace) {
        return absl::AlreadyExistsError(absl::StrCat(
            "a region named '", to, "' exists; pass replace to replace it"));
      }
      moved.set_name(std::string(to));
      MESHPOOL_RETURN_IF_ERROR(
          Commit({DeleteOp(RegionKey(from)),
                  PutOp(RegionKey(to), moved.SerializeAsString())}));
    }
    absl::MutexLock lock(&mu_);
    return mem_->RenameRegion(from, to, replace);
  }

 private:
  std::string Key(absl::string_view name) const {
    return absl::StrCat(options_.prefix, name);
  }
  std::string RegionKey(absl::string_view name) const {
    return absl::StrCat(options_.prefix, kRegionsDir, name);
  }

  // A change to the map: tried on a copy of the map (for its outcome and
  // the map to write), written whole, then made on the mirror.
  template <typename Change>
  absl::StatusOr<uint64_t> ChangeMap(Change change) {
    absl::MutexLock write(&write_mu_);
    MESHPOOL_RETURN_IF_ERROR(Settle());
    MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, Snapshot());
    std::unique_ptr<CoordinatorState> scratch =
        NewInMemoryCoordinatorState(std::move(map));
    MESHPOOL_RETURN_IF_ERROR(change(*scratch).status());
    const proto::ClusterMap durable = DurableMap(*scratch->Snapshot());
    MESHPOOL_RETURN_IF_ERROR(
        Commit({PutOp(Key(kMapKey), durable.SerializeAsString())}));
    absl::MutexLock lock(&mu_);
    return change(*mem_);
  }

  // Before a write: when an earlier write went unanswered, reload what
  // etcd holds. Unavailable while etcd does not answer.
  absl::Status Settle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    if (!uncertain_) return absl::OkStatus();
    return Load();
  }

  // Reads every key (without mu_), then swaps the mirror in.
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // One guarded transaction. Unanswered (Unavailable, deadline): the state
  // becomes uncertain, and the next write reloads first.
  absl::Status Commit(std::vector<etcdserverpb::RequestOp> ops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const std::shared_ptr<EtcdClient> client_;
  const EtcdStateOptions options_;
  Env* const env_;
  // Serialises writes, and is held across their etcd calls; taken before
  // mu_.
  absl::Mutex write_mu_;
  bool uncertain_ ABSL_GUARDED_BY(write_mu_) = false;
  mutable absl::Mutex mu_;
  // What etcd holds as far as this process knows, plus liveness.
  std::unique_ptr<CoordinatorState> mem_ ABSL_GUARDED_BY(mu_);
};

absl::Status EtcdState::Load() {
  absl::StatusOr<etcdserverpb::RangeResponse> all =
      client_->Range(options_.prefix, EtcdPrefixEnd(options_.prefix));
  if (!all.ok()) return all.status();
  proto::ClusterMap map;
  uint64_t next_id = options_.first_region_id;
  std::vector<proto::RegionInfo> regions;
  for (const etcdserverpb::KeyValue& kv : all->kvs()) {
    absl::string_view name = kv.key();
    name.remove_prefix(options_.prefix.size());
    auto corrupt = [&](absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat("etcd key '", kv.key(), "' does not hold ", what,
                       "; restore the state from a backup, or delete the "
                       "key if it is not meshpool's"));
    };
    if (name == kMapKey) {
      if (!map.ParseFromString(kv.value())) return corrupt("a cluster map");
    } else if (name == kNextIdKey) {
      if (!absl::SimpleAtoi(kv.value(), &next_id))
        return corrupt("a region id");
    } else if (absl::StartsWith(name, kRegionsDir)) {
      proto::RegionInfo info;
      if (!info.ParseFromString(kv.value()) ||
          info.name() != name.substr(kRegionsDir.size())) {
        return corrupt("that region");
      }
      regions.push_back(std::move(info));
    }
  }
  // Liveness: what this process heard, else "now" for nodes marked alive
  // (a full dead_after to resume heartbeating).
  const int64_t now_ms = absl::ToUnixMillis(env_->Now());
  absl::MutexLock lock(&mu_);
  for (proto::NodeEntry& e : *map.mutable_nodes()) {
    absl::StatusOr<proto::NodeEntry> heard =
        mem_ ? mem_->FindNode(e.info().node_id()) : absl::NotFoundError("");
    if (heard.ok() && heard->info().incarnation() == e.info().incarnation()) {
      e.set_last_heartbeat_unix_ms(heard->last_heartbeat_unix_ms());
      *e.mutable_stats() = heard->stats();
    } else if (e.state() == proto::NODE_ALIVE) {
      e.set_last_heartbeat_unix_ms(now_ms);
    }
  }
  std::unique_ptr<CoordinatorState> mem =
      NewInMemoryCoordinatorState(std::move(map), next_id);
  for (const proto::RegionInfo& info : regions)
    MESHPOOL_RETURN_IF_ERROR(mem->PutRegion(info));
  mem_ = std::move(mem);
  uncertain_ = false;
  return absl::OkStatus();
}

absl::Status EtcdState::Commit(std::vector<etcdserverpb::RequestOp> ops) {
  etcdserverpb::TxnRequest txn;
  if (options_.guard.has_value()) {
    etcdserverpb::Compare* c = txn.add_compare();
    c->set_result(etcdserverpb::Compare::EQUAL);
    c->set_target(etcdserverpb::Compare::CREATE);
    c->set_key(options_.guard->key);
    c->set_create_revision(options_.guard->create_revision);
  }
  for (etcdserverpb::RequestOp& op : ops) *txn.add_success() = std::move(op);
  absl::StatusOr<etcdserverpb::TxnResponse> reply = client_->Txn(txn);
  if (reply.ok() && reply->succeeded()) return absl::OkStatus();
  if (reply.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the coordinator state in etcd was not changed: this "
                     "coordinator no longer holds ",
                     options_.guard->key, " (another one leads now)"));
  }
  // No answer: etcd may have applied it.
  if (absl::IsUnavailable(reply.status()) ||
      absl::IsDeadlineExceeded(reply.status())) {
    uncertain_ = true;
  }
  if (absl::StrContains(reply.status().message(), "request is too large")) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "etcd refused the change as too large (", reply.status().message(),
        "); a region's placement table must fit etcd's --max-request-bytes: "
        "use larger "
        "stripes (fewer copies), or raise that limit on every etcd member"));
  }
  return reply.status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorState>> OpenEtcdCoordinatorState(
    std::shared_ptr<EtcdClient> client, EtcdStateOptions options) {
  if (options.prefix.empty() || options.prefix.back() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd prefix '", options.prefix, "' must be non-empty and end in '/'"));
  }
  auto state =
      std::make_unique<EtcdState>(std::move(client), std::move(options));
  MESHPOOL_RETURN_IF_ERROR(state->LoadNow());
  return std::unique_ptr<CoordinatorState>(std::move(state));
}

}  // namespace meshpool::coordinator
