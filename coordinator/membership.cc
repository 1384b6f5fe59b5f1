#include "coordinator/membership.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/common.h"
#include "format/layout.h"
#include "placement/placement.h"

namespace meshpool::coordinator {
namespace {

constexpr absl::string_view kAssignedIdPrefix = "node-";

// "node-<n>" with n one above the highest such n in the map. Once a dead
// entry is forgotten its id may be handed out again; that is safe because
// everything that names a node's memory also names its incarnation
// (region extents, clients' connections, objects), and the old process,
// should it come back, is told it was declared dead (forgotten_).
std::string NextNodeId(const proto::ClusterMap& map) {
  uint64_t highest = 0;
  for (const proto::NodeEntry& entry : map.nodes()) {
    absl::string_view id = entry.info().node_id();
    uint64_t n = 0;
    if (absl::ConsumePrefix(&id, kAssignedIdPrefix) && absl::SimpleAtoi(id, &n)) {
      highest = std::max(highest, n);
    }
  }
  return absl::StrCat(kAssignedIdPrefix, highest + 1);
}

absl::Status Invalid(const proto::NodeInfo& info, absl::string_view what) {
  const std::string who = info.node_id().empty()
                              ? std::string("a new node")
                              : absl::StrCat("node '", info.node_id(), "'");
  return absl::InvalidArgumentError(absl::StrCat("cannot register ", who, ": ", what));
}

}  // namespace

absl::Status ValidateNodeInfo(const proto::NodeInfo& info,
                              uint64_t max_node_bytes) {
  if (info.node_id().size() > placement::kMaxNodeIdBytes) {
    return Invalid(info, absl::StrCat("node_id is ", info.node_id().size(),
                                      " bytes; use at most ", placement::kMaxNodeIdBytes));
  }
  if (info.transport_addresses().empty()) {
    return Invalid(info, "no transport address; give at least one, e.g. tcp://127.0.0.1:7001");
  }
  if (info.transport_addresses_size() > kMaxTransportAddresses) {
    return Invalid(info, absl::StrCat(info.transport_addresses_size(),
                                      " transport addresses; give at most ",
                                      kMaxTransportAddresses));
  }
  for (const std::string& address : info.transport_addresses()) {
    if (address.empty()) return Invalid(info, "a transport address is empty");
    if (address.size() > kMaxNodeAddressBytes) {
      return Invalid(
          info, absl::StrCat("a transport address is ", address.size(),
                             " bytes; use at most ", kMaxNodeAddressBytes));
    }
  }
  if (info.control_address().empty()) {
    return Invalid(info, "no control address; clients need the node's gRPC "
                         "service for slab grants");
  }
  for (const auto& [name, value] :
       {std::pair<absl::string_view, absl::string_view>{"control address",
                                                        info.control_address()},
        {"hostname", info.hostname()},
        {"metrics address", info.metrics_address()}}) {
    if (value.size() > kMaxNodeAddressBytes) {
      return Invalid(
          info, absl::StrCat("its ", name, " is ", value.size(),
                             " bytes; use at most ", kMaxNodeAddressBytes));
    }
  }
  if (!info.has_pool() || info.pool().length() == 0) {
    return Invalid(info, "no pool region; register the pool memory and send its RemoteRegion");
  }
  if (info.capacity_bytes() == 0) {
    return Invalid(info, "capacity_bytes is 0; report the pool's usable bytes");
  }
  if (!info.has_layout() || info.layout().pool_bytes() == 0) {
    return Invalid(info, "missing pool layout; send the node's PoolLayout");
  }
  if (absl::Status layout = placement::ValidateNodeLayout(info); !layout.ok()) {
    return Invalid(info, absl::StrCat("its pool layout: ", layout.message()));
  }
  if (max_node_bytes == 0) max_node_bytes = format::kMaxPoolBytes;
  if (info.capacity_bytes() > max_node_bytes) {
    return Invalid(
        info,
        absl::StrCat(
            "capacity_bytes ", info.capacity_bytes(),
            " exceeds this coordinator's limit of ", max_node_bytes,
            " per node (--max-node-bytes); give the node a smaller pool, or "
            "raise the limit if nodes really are that large"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(
    std::unique_ptr<CoordinatorState> state, absl::Duration dead_after,
    const RegistrationLimits& limits, Env* env) {
  if (state == nullptr) state = NewInMemoryCoordinatorState();
  env = EnvOrDefault(env);
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state->Snapshot());
  const int64_t start_ms = absl::ToUnixMillis(env->Now());
  return std::unique_ptr<Membership>(new Membership(
      std::move(state), dead_after, limits, env, map.epoch(), start_ms));
}

Membership::Membership(std::unique_ptr<CoordinatorState> state,
                       absl::Duration dead_after,
                       const RegistrationLimits& limits, Env* env,
                       uint64_t epoch, int64_t start_ms)
    : state_(std::move(state)),
      dead_after_(dead_after),
      max_node_bytes_(limits.max_node_bytes),
      forget_dead_after_(limits.forget_dead_after),
      env_(env),
      registrations_(limits.registrations_per_minute, "node registrations",
                     "--registrations-per-minute", env),
      start_ms_(start_ms),
      epoch_(epoch) {}

int64_t Membership::NowMillis() const { return absl::ToUnixMillis(env_->Now()); }

absl::Status Membership::CheckRunning() const {
  if (!shut_down_) return absl::OkStatus();
  return absl::UnavailableError("the coordinator is shutting down; retry against its successor");
}

bool Membership::ForgottenLocked(absl::string_view node_id,
                                 uint64_t incarnation) const {
  return forgotten_.count({std::string(node_id), incarnation}) > 0;
}

void Membership::RememberForgottenLocked(const proto::NodeInfo& info) {
  if (!forgotten_.insert({info.node_id(), info.incarnation()}).second) return;
  forgotten_order_.emplace_back(info.node_id(), info.incarnation());
  if (forgotten_order_.size() > kMaxForgottenIncarnations) {
    forgotten_.erase(forgotten_order_.front());
    forgotten_order_.pop_front();
  }
}

absl::StatusOr<proto::RegisterNodeReply> Membership::Register(
    const proto::NodeInfo& info, absl::string_view caller,
    uint64_t last_epoch) {
  MESHPOOL_RETURN_IF_ERROR(registrations_.Admit(caller));
  MESHPOOL_RETURN_IF_ERROR(ValidateNodeInfo(info, max_node_bytes_));
  absl::MutexLock lock(&mu_);
  MESHPOOL_RETURN_IF_ERROR(CheckRunning());
  proto::NodeEntry entry;
  *entry.mutable_info() = info;
  // The map is readable by anyone the coordinator serves: it never carries
  // what one-sided access needs (clients ask the node, authenticated).
  entry.mutable_info()->mutable_pool()->clear_addr();
  entry.mutable_info()->mutable_pool()->clear_rkey();
  auto dead = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", info.node_id(), " incarnation ", info.incarnation(),
        " was declared dead and its memory may be stale; restart the "
        "node process to rejoin with a new incarnation"));
  };
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  const bool map_full = static_cast<size_t>(map.nodes_size()) >= kMaxMapNodes;
  auto full = [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the cluster map holds ", map.nodes_size(), " nodes, its limit (",
        kMaxMapNodes, "); a dead node's entry leaves it ",
        absl::FormatDuration(forget_dead_after_),
        " after its death (--forget-dead-after): retry then, or reuse a "
        "dead node's id"));
  };
  if (info.node_id().empty()) {
    if (map_full) return full();
    entry.mutable_info()->set_node_id(NextNodeId(map));
  } else {
    if (ForgottenLocked(info.node_id(), info.incarnation())) return dead();
    absl::StatusOr<proto::NodeEntry> old = state_->FindNode(info.node_id());
    if (!old.ok() && !absl::IsNotFound(old.status())) return old.status();
    if (!old.ok() && map_full) return full();
    // The same process registering again (a retry) keeps its last stats; a
    // new incarnation starts afresh. An incarnation declared dead may not
    // come back: clients may have rewritten its keys elsewhere meanwhile.
    if (old.ok() && old->info().incarnation() == info.incarnation()) {
      if (old->state() == proto::NODE_DEAD) return dead();
      *entry.mutable_stats() = old->stats();
    }
  }
  entry.set_state(proto::NODE_ALIVE);
  entry.set_last_heartbeat_unix_ms(NowMillis());
  if (last_epoch > epoch_) {
    // The node saw epochs this coordinator never made: its state (and the
    // departures objects are checked against) was lost. Start past them.
    MESHPOOL_ASSIGN_OR_RETURN(
        epoch_, state_->RestartHistory(last_epoch + kLostHistoryEpochGap));
  }
  MESHPOOL_ASSIGN_OR_RETURN(epoch_, state_->UpsertNode(entry));
  proto::RegisterNodeReply reply;
  reply.set_node_id(entry.info().node_id());
  reply.set_epoch(epoch_);
  if (forget_dead_after_ > absl::ZeroDuration()) {
    reply.set_forgotten_after_ms(static_cast<uint64_t>(
        absl::ToInt64Milliseconds(dead_after_ + forget_dead_after_)));
  }
  return reply;
}

absl::StatusOr<proto::HeartbeatReply> Membership::Heartbeat(
    const proto::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  MESHPOOL_RETURN_IF_ERROR(CheckRunning());
  proto::HeartbeatReply reply;
  reply.set_epoch(epoch_);
  absl::StatusOr<proto::NodeEntry> entry = state_->FindNode(request.node_id());
  if (!entry.ok()) {
    if (!absl::IsNotFound(entry.status())) return entry.status();
    reply.set_known(false);
    // Declared dead and forgotten since: it must stop, not register again.
    reply.set_declared_dead(
        ForgottenLocked(request.node_id(), request.incarnation()));
    return reply;
  }
  if (entry->info().incarnation() != request.incarnation() ||
      entry->state() != proto::NODE_ALIVE) {
    // Either this incarnation was declared dead, or another incarnation now
    // holds the id (a restart took over while this process was paused). In
    // both cases its memory may be stale, and registering again would take
    // the id back from the live holder: it must stop instead.
    reply.set_known(false);
    reply.set_declared_dead(true);
    return reply;
  }
  MESHPOOL_RETURN_IF_ERROR(
      state_->RecordHeartbeat(request.node_id(), NowMillis(), request.stats()));
  reply.set_known(true);
  return reply;
}

absl::StatusOr<proto::ClusterMap> Membership::Map() const {
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  // Entries a coordinator before DescribePool stored still hold them.
  for (proto::NodeEntry& entry : *map.mutable_nodes()) {
    entry.mutable_info()->mutable_pool()->clear_addr();
    entry.mutable_info()->mutable_pool()->clear_rkey();
  }
  return map;
}

absl::StatusOr<int> Membership::Reap() {
  absl::MutexLock lock(&mu_);
  MESHPOOL_RETURN_IF_ERROR(CheckRunning());
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  const int64_t now_ms = NowMillis();
  const int64_t dead_after_ms = absl::ToInt64Milliseconds(dead_after_);
  const int64_t forget_ms =
      forget_dead_after_ > absl::ZeroDuration()
          ? dead_after_ms + absl::ToInt64Milliseconds(forget_dead_after_)
          : INT64_MAX;
  int marked = 0;
  for (const proto::NodeEntry& entry : map.nodes()) {
    const int64_t last_ms = std::max(entry.last_heartbeat_unix_ms(), start_ms_);
    if (entry.state() != proto::NODE_ALIVE) {
      if (now_ms - last_ms < forget_ms) continue;
      MESHPOOL_ASSIGN_OR_RETURN(epoch_,
                                state_->RemoveNode(entry.info().node_id()));
      RememberForgottenLocked(entry.info());
      continue;
    }
    if (now_ms - last_ms < dead_after_ms) continue;
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, state_->MarkDead(entry.info().node_id()));
    ++marked;
  }
  return marked;
}

Membership::EpochWait Membership::AwaitEpochAbove(uint64_t epoch,
                                                  absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shut_down_ || epoch_ > epoch;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return EpochWait{epoch_, shut_down_};
}

void Membership::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

}  // namespace meshpool::coordinator
