#include "coordinator/coordinator_service.h"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auth/auth.h"
#include "common/common.h"
#include "coordinator/tenants.h"
#include "placement/coordinator_client.h"

namespace meshpool::coordinator {
namespace {

using auth::Role;

// Who may call what (with TLS; without it everyone may everything).
constexpr std::initializer_list<Role> kAnyone = auth::kAnyRole;
constexpr std::initializer_list<Role> kUsers = auth::kDataUsers;

// With TLS, a node registers and heartbeats only under the name its
// certificate gives; `node_id` empty takes that name.
grpc::Status CheckNodeName(const grpc::ServerContext& context,
                           absl::string_view what, std::string* node_id) {
  const auth::Identity peer = auth::PeerIdentity(context);
  if (peer.role == Role::kNone) return grpc::Status::OK;  // no TLS
  if (node_id->empty()) *node_id = peer.name;
  if (*node_id == peer.name) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(peer.ToString(), " may not ", what, " as node '", *node_id,
                   "': a node's id is the name in its certificate"));
}

// Who makes a call, for rate limits: the identity in its certificate, or
// without TLS its host ("ipv4:127.0.0.1" of "ipv4:127.0.0.1:5555"), since
// its port changes with every connection.
std::string Caller(const grpc::ServerContext& context) {
  const auth::Identity peer = auth::PeerIdentity(context);
  if (peer.role != Role::kNone) return peer.ToString();
  std::string host = context.peer();
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host.resize(colon);
  }
  return host;
}

// The owner a non-admin caller must be to change a region ("" = anyone).
std::string OnlyOwner(const grpc::ServerContext& context) {
  const auth::Identity peer = auth::PeerIdentity(context);
  if (peer.role == Role::kNone || peer.role == Role::kAdmin) return "";
  return peer.ToString();
}

absl::Status WatcherGone() {
  return absl::CancelledError("the watcher went away");
}

}  // namespace

CoordinatorService::CoordinatorService(Membership* membership, RegionTable* regions,
                                       absl::Duration heartbeat_interval)
    : membership_(membership), regions_(regions), heartbeat_interval_(heartbeat_interval) {}

CoordinatorService::CoordinatorService(std::function<std::string()> leader)
    : membership_(nullptr),
      regions_(nullptr),
      heartbeat_interval_(absl::ZeroDuration()),
      leader_(std::move(leader)) {}

// Nothing is done here, so a client may send the call again anywhere.
grpc::Status CoordinatorService::Redirect(grpc::ServerContext* context) const {
  const std::string leader = leader_();
  if (leader.empty()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this coordinator stands by and knows of no leader "
                        "now (a failover is under way, or etcd does not "
                        "answer); retry in a moment");
  }
  context->AddTrailingMetadata(std::string(placement::kLeaderMetadataKey),
                               leader);
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("this coordinator stands by; the leader is ", leader,
                   ": call it (clients given every coordinator's address "
                   "follow the leader by themselves)"));
}

grpc::Status CoordinatorService::RegisterNode(grpc::ServerContext* context,
                                              const proto::RegisterNodeRequest* request,
                                              proto::RegisterNodeReply* reply) {
  if (grpc::Status s = auth::Allow(*context, "register nodes", {Role::kNode});
      !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  proto::NodeInfo info = request->info();
  if (grpc::Status s =
          CheckNodeName(*context, "register", info.mutable_node_id());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<proto::RegisterNodeReply> result =
      membership_->Register(info, Caller(*context), request->last_epoch());
  if (!result.ok()) return ToGrpc(result.status());
  *reply = *std::move(result);
  reply->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_interval_)));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context,
                                           const proto::HeartbeatRequest* request,
                                           proto::HeartbeatReply* reply) {
  if (grpc::Status s = auth::Allow(*context, "heartbeat", {Role::kNode});
      !s.ok())
    return s;
  std::string node_id = request->node_id();
  if (grpc::Status s = CheckNodeName(*context, "heartbeat", &node_id); !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  absl::StatusOr<proto::HeartbeatReply> result = membership_->Heartbeat(*request);
  if (!result.ok()) return ToGrpc(result.status());
  *reply = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WhoAmI(grpc::ServerContext* context,
                                        const proto::WhoAmIRequest* request,
                                        proto::WhoAmIReply* reply) {
  const auth::Identity caller = auth::PeerIdentity(*context);
  reply->set_role(std::string(auth::RoleName(caller.role)));
  reply->set_name(caller.name);
  reply->set_tenant(caller.tenant);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetClusterMap(grpc::ServerContext* context,
                                               const proto::GetClusterMapRequest* request,
                                               proto::ClusterMap* reply) {
  if (grpc::Status s = auth::Allow(*context, "read the cluster map", kAnyone);
      !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  absl::StatusOr<proto::ClusterMap> map = membership_->Map();
  if (!map.ok()) return ToGrpc(map.status());
  *reply = *std::move(map);
  return grpc::Status::OK;
}

// The sync API has no cancellation callback, so between epochs the handler
// wakes every kWatchCancelPollInterval to look at IsCancelled().
grpc::Status CoordinatorService::WatchClusterMap(grpc::ServerContext* context,
                                                 const proto::WatchClusterMapRequest* request,
                                                 grpc::ServerWriter<proto::ClusterMap>* writer) {
  return WatchMaps(
      context, *request, [&](uint64_t epoch) -> absl::StatusOr<uint64_t> {
        MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<const proto::ClusterMap> map,
                                  membership_->feed().Latest(epoch));
        if (!writer->Write(*map)) return WatcherGone();
        return map->epoch();
      });
}

grpc::Status CoordinatorService::WatchClusterMapUpdates(
    grpc::ServerContext* context, const proto::WatchClusterMapRequest* request,
    grpc::ServerWriter<proto::ClusterMapUpdate>* writer) {
  std::shared_ptr<const proto::ClusterMap> held;  // what the client holds
  return WatchMaps(
      context, *request, [&](uint64_t epoch) -> absl::StatusOr<uint64_t> {
        MESHPOOL_ASSIGN_OR_RETURN(MapFeedUpdate next,
                                  membership_->feed().UpdateFrom(held, epoch));
        if (!writer->Write(*next.update)) return WatcherGone();
        held = std::move(next.map);
        return held->epoch();
      });
}

// The sync API has no cancellation callback, so between epochs the handler
// wakes every kWatchCancelPollInterval to look at IsCancelled().
grpc::Status CoordinatorService::WatchMaps(
    grpc::ServerContext* context, const proto::WatchClusterMapRequest& request,
    const std::function<absl::StatusOr<uint64_t>(uint64_t)>& send) {
  if (grpc::Status s = auth::Allow(*context, "watch the cluster map", kAnyone);
      !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  // Zero wait: just read the current epoch.
  Membership::EpochWait now =
      membership_->AwaitEpochAbove(request.known_epoch(), absl::ZeroDuration());
  uint64_t sent = request.known_epoch();
  // Epoch below known_epoch: the client saw a map this coordinator lost
  // (restarted without its state); it must take this one.
  bool must_send = now.epoch < sent;
  while (true) {
    if (now.shut_down) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the coordinator is shutting down; reconnect to watch again");
    }
    if (context->IsCancelled()) return ToGrpc(WatcherGone());
    if (must_send || now.epoch > sent) {
      absl::StatusOr<uint64_t> epoch = send(now.epoch);
      if (!epoch.ok()) return ToGrpc(epoch.status());
      sent = *epoch;
      must_send = false;
    }
    now = membership_->AwaitEpochAbove(sent, kWatchCancelPollInterval);
  }
}

grpc::Status CoordinatorService::CreateRegion(grpc::ServerContext* context,
                                              const proto::CreateRegionRequest* request,
                                              proto::RegionInfo* reply) {
  if (grpc::Status s = auth::Allow(*context, "create regions",
                                   {Role::kClient, Role::kAdmin});
      !s.ok()) {
    return s;
  }
  if (membership_ == nullptr) return Redirect(context);
  const auth::Identity peer = auth::PeerIdentity(*context);
  const RegionScope scope(peer);
  proto::CreateRegionRequest scoped = *request;
  absl::StatusOr<std::string> name = scope.Stored(request->name());
  if (!name.ok()) return ToGrpc(name.status());
  scoped.set_name(*std::move(name));
  absl::StatusOr<proto::RegionInfo> info =
      regions_->Create(scoped, peer.role == Role::kNone ? "" : peer.ToString());
  if (!info.ok()) return ToGrpc(info.status());
  *reply = *std::move(info);
  reply->set_name(std::string(scope.Shown(reply->name())));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetRegion(grpc::ServerContext* context,
                                           const proto::GetRegionRequest* request,
                                           proto::RegionInfo* reply) {
  if (grpc::Status s = auth::Allow(*context, "read regions", kUsers); !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  const RegionScope scope(auth::PeerIdentity(*context));
  absl::StatusOr<std::string> name = scope.Stored(request->name());
  if (!name.ok()) return ToGrpc(name.status());
  absl::StatusOr<proto::RegionInfo> info = regions_->Get(*name);
  if (!info.ok()) return ToGrpc(info.status());
  *reply = *std::move(info);
  reply->set_name(std::string(scope.Shown(reply->name())));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteRegion(grpc::ServerContext* context,
                                              const proto::DeleteRegionRequest* request,
                                              proto::DeleteRegionReply* reply) {
  if (grpc::Status s = auth::Allow(*context, "delete regions",
                                   {Role::kClient, Role::kAdmin});
      !s.ok()) {
    return s;
  }
  if (membership_ == nullptr) return Redirect(context);
  const RegionScope scope(auth::PeerIdentity(*context));
  absl::StatusOr<std::string> name = scope.Stored(request->name());
  if (!name.ok()) return ToGrpc(name.status());
  return ToGrpc(regions_->Delete(*name, OnlyOwner(*context)));
}

grpc::Status CoordinatorService::RenameRegion(grpc::ServerContext* context,
                                              const proto::RenameRegionRequest* request,
                                              proto::RenameRegionReply* reply) {
  if (grpc::Status s = auth::Allow(*context, "rename regions",
                                   {Role::kClient, Role::kAdmin});
      !s.ok()) {
    return s;
  }
  if (membership_ == nullptr) return Redirect(context);
  const RegionScope scope(auth::PeerIdentity(*context));
  absl::StatusOr<std::string> from = scope.Stored(request->from());
  if (!from.ok()) return ToGrpc(from.status());
  absl::StatusOr<std::string> to = scope.Stored(request->to());
  if (!to.ok()) return ToGrpc(to.status());
  // Nodes reserve a region's memory for its tenant: it cannot change hands.
  if (TenantOfRegion(*from) != TenantOfRegion(*to)) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "a region stays in its tenant: '", request->from(), "' and '",
        request->to(),
        "' belong to different tenants; create the region in the other "
        "tenant and copy its bytes")));
  }
  return ToGrpc(
      regions_->Rename(*from, *to, request->replace(), OnlyOwner(*context)));
}

grpc::Status CoordinatorService::ListRegions(grpc::ServerContext* context,
                                             const proto::ListRegionsRequest* request,
                                             proto::ListRegionsReply* reply) {
  if (grpc::Status s = auth::Allow(*context, "list regions", kUsers); !s.ok())
    return s;
  if (membership_ == nullptr) return Redirect(context);
  const RegionScope scope(auth::PeerIdentity(*context));
  absl::StatusOr<std::vector<proto::RegionInfo>> regions =
      regions_->List(scope.StoredPrefix(request->prefix()));
  if (!regions.ok()) return ToGrpc(regions.status());
  for (proto::RegionInfo& info : *regions) {
    if (!scope.Sees(info.name())) continue;
    info.set_name(std::string(scope.Shown(info.name())));
    *reply->add_regions() = std::move(info);
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const std::string& listen, const auth::TlsConfig& tls,
    Membership* membership, RegionTable* regions,
    absl::Duration heartbeat_interval) {
  return Serve(listen, tls,
               std::make_unique<CoordinatorService>(membership, regions,
                                                    heartbeat_interval));
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>>
CoordinatorServer::StartStandby(const std::string& listen,
                                const auth::TlsConfig& tls,
                                std::function<std::string()> leader) {
  return Serve(listen, tls,
               std::make_unique<CoordinatorService>(std::move(leader)));
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Serve(
    const std::string& listen, const auth::TlsConfig& tls,
    std::unique_ptr<CoordinatorService> service) {
  MESHPOOL_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      auth::ServerCredentials(tls));
  grpc::ServerBuilder builder;
  builder.SetMaxSendMessageSize(static_cast<int>(placement::kMaxRegionInfoBytes));
  // Without this, gRPC sets SO_REUSEPORT and a second coordinator on the same
  // port would silently share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(listen, credentials, &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator cannot listen on '", listen,
        "': is another coordinator running there? Pick a free host:port (port 0 picks one)"));
  }
  return std::unique_ptr<CoordinatorServer>(
      new CoordinatorServer(std::move(service), std::move(server), port));
}

CoordinatorServer::CoordinatorServer(
    std::unique_ptr<CoordinatorService> service,
    std::unique_ptr<grpc::Server> server, int port)
    : service_(std::move(service)), server_(std::move(server)), port_(port) {}

CoordinatorServer::~CoordinatorServer() { Shutdown(absl::ZeroDuration()); }

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace meshpool::coordinator
