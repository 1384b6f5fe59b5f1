// RegionNodes over gRPC: the coordinator's stub of each memory node's Node
// service (coordinator/region_table.h). The only gRPC code of the region
// table.
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "coordinator/region_table.h"
#include "proto/proto.h"

namespace meshpool::coordinator {
namespace {

class GrpcRegionNodes final : public RegionNodes {
 public:
  explicit GrpcRegionNodes(auth::ChannelSecurity security)
      : security_(std::move(security)) {}

  absl::StatusOr<proto::NodeStats> GetStats(const proto::NodeInfo& node) override {
    return Call<proto::NodeStats>(
        node, "GetStats", kNodeStatsTimeout,
        [](proto::Node::Stub& stub, grpc::ClientContext* context, proto::NodeStats* reply) {
          return stub.GetStats(context, proto::GetStatsRequest(), reply);
        });
  }

  absl::StatusOr<proto::AllocateRegionReply> Allocate(
      const proto::NodeInfo& node, const proto::AllocateRegionRequest& request) override {
    return Call<proto::AllocateRegionReply>(
        node, "AllocateRegion", kNodeAllocateTimeout,
        [&](proto::Node::Stub& stub, grpc::ClientContext* context, auto* reply) {
          return stub.AllocateRegion(context, request, reply);
        });
  }

  absl::Status Free(const proto::NodeInfo& node, const proto::FreeRegionRequest& request) override {
    return Call<proto::FreeRegionReply>(
               node, "FreeRegion", kNodeFreeTimeout,
               [&](proto::Node::Stub& stub, grpc::ClientContext* context, auto* reply) {
                 return stub.FreeRegion(context, request, reply);
               })
        .status();
  }

 private:
  template <typename Reply, typename F>
  absl::StatusOr<Reply> Call(const proto::NodeInfo& node, absl::string_view what,
                             absl::Duration timeout, F call) {
    if (node.control_address().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node.node_id(), " registered no control address"));
    }
    proto::Node::Stub& stub = StubFor(node.control_address());
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    Reply reply;
    MESHPOOL_RETURN_IF_ERROR(FromGrpc(
        call(stub, &context, &reply),
        absl::StrCat(what, " at node ", node.node_id(), " (", node.control_address(), ")")));
    return reply;
  }

  // Stubs live as long as this object; a cluster has tens to hundreds of
  // control addresses, and a restarted node usually keeps its address.
  proto::Node::Stub& StubFor(const std::string& address) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<proto::Node::Stub>& stub = stubs_[address];
    if (stub == nullptr) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
      args.SetMaxReceiveMessageSize(static_cast<int>(placement::kMaxRegionInfoBytes));
      stub = proto::Node::NewStub(security_.Dial(address, &args));
    }
    return *stub;
  }

  const auth::ChannelSecurity security_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<proto::Node::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<RegionNodes> NewGrpcRegionNodes(
    auth::ChannelSecurity security) {
  return std::make_unique<GrpcRegionNodes>(std::move(security));
}

}  // namespace meshpool::coordinator
