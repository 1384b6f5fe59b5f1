// meshpool/placement: the gRPC face of the coordinator.
//
// CoordinatorService translates meshpool.proto.Coordinator calls into
// Membership and RegionTable calls and absl::Status into grpc::Status
// (ToGrpc); it holds no state of its own. In a coordinator that waits to
// lead it answers every call with Unavailable naming the leader.
// CoordinatorServer owns a grpc::Server serving it. Only these,
// coordinator_client.cc, region_nodes_grpc.cc and etcd_client.cc touch
// gRPC types in coordinator/ and placement/.
#ifndef MESHPOOL_COORDINATOR_COORDINATOR_SERVICE_H_
#define MESHPOOL_COORDINATOR_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "coordinator/membership.h"
#include "coordinator/region_table.h"
#include "proto/proto.h"

namespace meshpool::coordinator {

// How often a watch stream handler checks whether its client went away
// while no epoch changes.
inline constexpr absl::Duration kWatchCancelPollInterval = absl::Milliseconds(200);

// Thread-safe (gRPC calls it from its worker threads).
class CoordinatorService final : public proto::Coordinator::Service {
 public:
  // The leader's service. `membership` and `regions` are not owned and
  // must outlive the service.
  CoordinatorService(Membership* membership, RegionTable* regions,
                     absl::Duration heartbeat_interval);
  // The service of a standby (a coordinator waiting to lead in etcd): every
  // call fails Unavailable, and when a leader is known its address is in
  // the message and in the trailing metadata placement::kLeaderMetadataKey,
  // which CoordinatorClient follows. `leader` returns the leader's address,
  // empty when none is known now; it runs once per call, so must be quick.
  explicit CoordinatorService(std::function<std::string()> leader);

  // Answered by every coordinator, leading or standing by.
  grpc::Status WhoAmI(grpc::ServerContext* context,
                      const proto::WhoAmIRequest* request,
                      proto::WhoAmIReply* reply) override;
  grpc::Status RegisterNode(grpc::ServerContext* context,
                            const proto::RegisterNodeRequest* request,
                            proto::RegisterNodeReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const proto::HeartbeatRequest* request,
                         proto::HeartbeatReply* reply) override;
  grpc::Status GetClusterMap(grpc::ServerContext* context,
                             const proto::GetClusterMapRequest* request,
                             proto::ClusterMap* reply) override;
  // Sends the current map at once when its epoch differs from known_epoch
  // (newer; or older, when this coordinator lost the state the client saw),
  // then each new epoch. Each epoch's map is published once and shared by
  // every watcher (MapFeed), so its heartbeat times and stats are those of
  // that moment; GetClusterMap reads current ones. Ends with UNAVAILABLE on
  // Membership::Shutdown and CANCELLED when the client goes away.
  grpc::Status WatchClusterMap(grpc::ServerContext* context,
                               const proto::WatchClusterMapRequest* request,
                               grpc::ServerWriter<proto::ClusterMap>* writer) override;
  // The same, as ClusterMapUpdates: the stream's first map whole, each
  // later one as a delta on the one before (placement::DiffMaps) when the
  // delta is smaller. Every watcher of a change is sent the same message,
  // built once (MapFeed).
  grpc::Status WatchClusterMapUpdates(
      grpc::ServerContext* context,
      const proto::WatchClusterMapRequest* request,
      grpc::ServerWriter<proto::ClusterMapUpdate>* writer) override;

  grpc::Status CreateRegion(grpc::ServerContext* context,
                            const proto::CreateRegionRequest* request,
                            proto::RegionInfo* reply) override;
  grpc::Status GetRegion(grpc::ServerContext* context, const proto::GetRegionRequest* request,
                         proto::RegionInfo* reply) override;
  grpc::Status DeleteRegion(grpc::ServerContext* context,
                            const proto::DeleteRegionRequest* request,
                            proto::DeleteRegionReply* reply) override;
  grpc::Status RenameRegion(grpc::ServerContext* context,
                            const proto::RenameRegionRequest* request,
                            proto::RenameRegionReply* reply) override;
  grpc::Status ListRegions(grpc::ServerContext* context,
                           const proto::ListRegionsRequest* request,
                           proto::ListRegionsReply* reply) override;

 private:
  // The watch streams' loop: `send` writes what brings the watcher to the
  // map of its argument's epoch or newer (Membership::feed) and returns the
  // epoch it sent; Cancelled when the client went away.
  grpc::Status WatchMaps(
      grpc::ServerContext* context,
      const proto::WatchClusterMapRequest& request,
      const std::function<absl::StatusOr<uint64_t>(uint64_t)>& send);
  // A standby's answer to every call.
  grpc::Status Redirect(grpc::ServerContext* context) const;

  Membership* const membership_;  // null in a standby
  RegionTable* const regions_;    // null in a standby
  const absl::Duration heartbeat_interval_;
  const std::function<std::string()> leader_;  // a standby's
};

// A started grpc::Server with one CoordinatorService. Not copyable.
class CoordinatorServer {
 public:
  // Binds `listen` (host:port, port 0 picks one). FailedPrecondition when it
  // cannot bind. `membership` and `regions` must outlive the server. Replies
  // may be up to kMaxRegionInfoBytes (a large region's RegionInfo). With
  // `tls` enabled it serves TLS, requires client certificates and checks
  // each call's role (auth/auth.h); errors reading its files are returned.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const std::string& listen, const auth::TlsConfig& tls,
      Membership* membership, RegionTable* regions,
      absl::Duration heartbeat_interval);
  // Binds `listen` for a standby's service over `leader` (see
  // CoordinatorService). FailedPrecondition when it cannot bind.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> StartStandby(
      const std::string& listen, const auth::TlsConfig& tls,
      std::function<std::string()> leader);
  ~CoordinatorServer();  // Shutdown(absl::ZeroDuration()) if not done yet
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return port_; }

  // Stops accepting calls, waits up to `grace` for running ones, then
  // cancels the rest. Callers end watch streams first (Membership::Shutdown)
  // so the grace is not spent waiting on them. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  CoordinatorServer(std::unique_ptr<CoordinatorService> service,
                    std::unique_ptr<grpc::Server> server, int port);
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Serve(
      const std::string& listen, const auth::TlsConfig& tls,
      std::unique_ptr<CoordinatorService> service);

  // Member order: the server stops and is destroyed before its service.
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  const int port_;
  bool shut_down_ = false;  // Shutdown is called from one thread at a time
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_COORDINATOR_SERVICE_H_
