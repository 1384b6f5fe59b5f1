#include "store/node_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto.h"

namespace meshpool::store {

class NodeServiceImpl final : public proto::Node::Service {
 public:
  explicit NodeServiceImpl(NodeServiceDeps deps) : deps_(std::move(deps)) {}

  grpc::Status GrantSlab(grpc::ServerContext*,
                         const proto::GrantSlabRequest* request,
                         proto::GrantSlabReply* reply) override {
    if (request->incarnation() != deps_.incarnation) {
      return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
          "node restarted; refresh the cluster map (request names "
          "incarnation ",
          request->incarnation(), ", this node is ", deps_.incarnation, ")")));
    }
    absl::StatusOr<SlabGrant> grant = deps_.slabs->Grant(request->client_id());
    if (!grant.ok()) return ToGrpc(grant.status());
    reply->set_slab(grant->slab);
    reply->set_offset(grant->offset);
    reply->set_length(grant->length);
    reply->set_lease_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(grant->lease)));
    return grpc::Status::OK;
  }

  grpc::Status ReleaseSlab(grpc::ServerContext*,
                           const proto::ReleaseSlabRequest* request,
                           proto::ReleaseSlabReply*) override {
    return ToGrpc(
        deps_.slabs->Release(request->client_id(), request->slab()));
  }

  grpc::Status Handshake(grpc::ServerContext*,
                         const proto::HandshakeRequest* request,
                         proto::HandshakeReply* reply) override {
    if (!request->transport().empty() &&
        request->transport() != deps_.transport->name()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "this node serves transport '", deps_.transport->name(),
          "', not '", request->transport(), "'; pick one of its addresses")));
    }
    absl::StatusOr<std::string> answer =
        deps_.transport->AcceptHandshake(request->request());
    if (!answer.ok()) return ToGrpc(answer.status());
    reply->set_reply(*std::move(answer));
    return grpc::Status::OK;
  }

  grpc::Status GetStats(grpc::ServerContext*, const proto::GetStatsRequest*,
                        proto::NodeStats* reply) override {
    *reply = deps_.stats();
    return grpc::Status::OK;
  }

 private:
  const NodeServiceDeps deps_;
};

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(
    absl::string_view listen, NodeServiceDeps deps) {
  if (deps.slabs == nullptr || deps.transport == nullptr || !deps.stats) {
    return absl::InvalidArgumentError(
        "NodeServer needs a slab manager, a transport and a stats source");
  }
  size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control address '", listen, "' is not host:port; e.g. 127.0.0.1:0"));
  }
  auto service = std::make_unique<NodeServiceImpl>(std::move(deps));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(std::string(listen),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot serve the node's control plane on '", listen,
        "' (port in use or not a local address); pick another control "
        "address"));
  }
  std::string address = absl::StrCat(listen.substr(0, colon), ":", port);
  return std::unique_ptr<NodeServer>(
      new NodeServer(std::move(service), std::move(server), address));
}

NodeServer::NodeServer(std::unique_ptr<NodeServiceImpl> service,
                       std::unique_ptr<grpc::Server> server,
                       std::string address)
    : service_(std::move(service)),
      server_(std::move(server)),
      address_(std::move(address)) {}

NodeServer::~NodeServer() { Shutdown(kDefaultShutdownDeadline); }

void NodeServer::Shutdown(absl::Duration deadline) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + deadline));
  server_->Wait();
}

}  // namespace meshpool::store
