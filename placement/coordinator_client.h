// meshpool/placement/coordinator_client.h: the client stub of the
// coordinator's gRPC service (meshpool.proto.Coordinator), used by memory
// nodes (register, heartbeat) and clients (the cluster map, its watch, the
// region table). The server is coordinator/coordinator.h; the membership
// and region rules it enforces are written there.
//
// Thread-safety: CoordinatorClient is thread-safe.
#ifndef MESHPOOL_PLACEMENT_COORDINATOR_CLIENT_H_
#define MESHPOOL_PLACEMENT_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

// Thin client of the Coordinator service. Thread-safe. Every call carries a
// deadline (kCoordinatorRpcTimeout); a coordinator that does not answer in
// time gives Unavailable (retry). Server-side errors keep their code.
class CoordinatorClient {
 public:
  // Connects to `address`: "host:port", or several coordinators sharing
  // one etcd as "ip:port,ip:port,..." (numeric IPv4): calls go to the one
  // that leads and follow the lead when it moves (a standby refuses calls
  // naming the leader, kLeaderMetadataKey, and the call is sent there).
  // Unavailable, with a message telling the user to start `meshpool
  // coordinator` and to point --coordinator or MESHPOOL_COORDINATOR at it,
  // when it cannot connect within `timeout`. With `tls` enabled the calls
  // go over TLS and present its certificate (auth/auth.h); errors reading
  // its files are returned as they are.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      std::string address, absl::Duration timeout = absl::Seconds(3),
      const auth::TlsConfig& tls = {});
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  const std::string& address() const;

  // InvalidArgument (with what is wrong) for an incomplete NodeInfo: no
  // transport address, no pool region, zero capacity, missing layout, id
  // longer than placement::kMaxNodeIdBytes (placement/placement.h).
  // `last_epoch`: the newest map epoch the node has been told (0: none;
  // RegisterNodeRequest.last_epoch).
  absl::StatusOr<proto::RegisterNodeReply> RegisterNode(
      const proto::NodeInfo& info, uint64_t last_epoch = 0);
  // known=false in the reply: register again.
  absl::StatusOr<proto::HeartbeatReply> Heartbeat(
      const proto::HeartbeatRequest& request);
  absl::StatusOr<proto::ClusterMap> GetClusterMap();
  // Who the coordinator takes this client for (its certificate's role,
  // name and tenant; role "none" without TLS).
  absl::StatusOr<proto::WhoAmIReply> WhoAmI();

  // A running watch; destroying it cancels the stream and joins its thread.
  // REQUIRES: not destroyed from inside its own on_map callback.
  class Watch {
   public:
    virtual ~Watch() = default;
  };
  // Calls on_map for every map newer than known_epoch (and newer than the
  // last one it delivered), in epoch order, from one background thread; on_map
  // must not block for long. Reconnects with backoff when the stream breaks
  // (coordinator restart, network), resuming from the last epoch delivered.
  // One exception: a coordinator that restarted without its state has a
  // lower epoch than the watch knows; its map is then delivered anyway, so
  // the epoch seen by on_map goes backwards exactly then.
  // The Watch shares the client's channel (and follows the lead with it)
  // and may outlive the client.
  // InvalidArgument when on_map is empty.
  absl::StatusOr<std::unique_ptr<Watch>> WatchClusterMap(
      uint64_t known_epoch,
      std::function<void(const proto::ClusterMap&)> on_map);

  // ---- Regions (rules and error codes: coordinator/region_table.h) ----
  // Creating allocates and zero-fills memory on the nodes, so this call's
  // deadline is kCreateRegionTimeout, not kCoordinatorRpcTimeout; a create
  // that times out on the client may still complete (GetRegion shows it).
  absl::StatusOr<proto::RegionInfo> CreateRegion(
      const proto::CreateRegionRequest& request);
  // NotFound when absent.
  absl::StatusOr<proto::RegionInfo> GetRegion(absl::string_view name);
  absl::Status DeleteRegion(absl::string_view name);
  absl::Status RenameRegion(absl::string_view from, absl::string_view to,
                            bool replace);
  // Sorted by name; without slab_offsets and stripe_extents.
  absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(
      absl::string_view prefix);

 private:
  struct Rpc;  // the gRPC channel and stub (coordinator_client.cc)
  class MapWatch;  // a WatchClusterMap stream's thread (coordinator_client.cc)
  CoordinatorClient(std::string address, std::shared_ptr<Rpc> rpc);

  const std::string address_;
  const std::shared_ptr<Rpc> rpc_;  // shared with running watches
};

// The trailing metadata key in which a standby coordinator names the leader
// (its "host:port") when it refuses a call.
inline constexpr absl::string_view kLeaderMetadataKey = "meshpool-leader";
// How many such redirects one call follows before it fails Unavailable.
inline constexpr int kMaxLeaderRedirects = 2;

// The deadline of every unary CoordinatorClient call but CreateRegion.
inline constexpr absl::Duration kCoordinatorRpcTimeout = absl::Seconds(3);
// CreateRegion's deadline: a stats round and an allocation round (which
// zero-fills the region's memory) on the nodes, with room to spare.
inline constexpr absl::Duration kCreateRegionTimeout = absl::Seconds(60);

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_COORDINATOR_CLIENT_H_
