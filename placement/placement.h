// meshpool/placement: where keys live, and the coordinator that knows the
// cluster.
//
//  * HomeNode / RankNodes: weighted rendezvous hashing over a ClusterMap.
//    Pure functions of their arguments; thread-safe.
//  * Coordinator: the control-plane server (gRPC service
//    meshpool.proto.Coordinator): node membership, the cluster map and its
//    epoch, heartbeats, failure detection, map watch streams. Thread-safe.
//    It also keeps the region table (placement/region_table.h has the
//    rules): named memory striped across the nodes.
//  * CoordinatorClient: a thin client of that service. Thread-safe.
//
// Membership rules (the Coordinator enforces them):
//  * RegisterNode with an empty node_id gets "node-<n>" (n one above the
//    highest n already in the map, so ids are never reused).
//  * Registering an id again with a new incarnation (a restarted node)
//    replaces the old entry; any registration makes the node NODE_ALIVE and
//    bumps the epoch.
//  * Heartbeat from an unknown id, a stale incarnation or a node already
//    declared NODE_DEAD answers known=false: the node must register again.
//    A heartbeat stores the node's stats and does not bump the epoch.
//  * A node with no heartbeat (or registration) for dead_after becomes
//    NODE_DEAD (epoch bumped). Dead nodes stay in the map; placement skips
//    them, so their keys have no home until the node registers again.
#ifndef MESHPOOL_PLACEMENT_PLACEMENT_H_
#define MESHPOOL_PLACEMENT_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"
#include "placement/coordinator_state.h"
#include "placement/region_table.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

// Node ids are at most this long (RegisterNode rejects longer ones).
inline constexpr size_t kMaxNodeIdBytes = 64;
static_assert(kMaxNodeIdBytes >= 5 + 20, "assigned ids \"node-<uint64>\" must fit");

// Rendezvous (highest random weight) hashing, weighted by capacity: score of
// node i = -capacity_i / ln(u_i) where u_i in (0,1) comes from XXH3-64 of
// (key_hash_lo, key_hash_hi, node_id) (the two words little-endian, then the
// id's bytes). A node gets a share of keys proportional to its
// info.capacity_bytes, and adding or removing a node moves only the keys that
// node wins or held.
// Only NODE_ALIVE nodes with capacity_bytes > 0 count. Ties (vanishingly rare)
// go to the smaller node_id, so the result does not depend on node order.
// Returns the index into map.nodes() of the key's home node, or -1 when no
// node is eligible.
int HomeNode(const proto::ClusterMap& map, uint64_t key_hash_lo, uint64_t key_hash_hi);

// The first min(count, eligible nodes) nodes in rendezvous order, as distinct
// indices into map.nodes(); element 0 is HomeNode's answer. Empty when no
// node is eligible or count is 0.
std::vector<int> RankNodes(const proto::ClusterMap& map, uint64_t key_hash_lo,
                           uint64_t key_hash_hi, size_t count);

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one
  absl::Duration heartbeat_interval = absl::Milliseconds(500);  // told to nodes
  absl::Duration dead_after = absl::Seconds(3);  // no heartbeat this long -> NODE_DEAD
  std::function<absl::Time()> clock;             // null -> absl::Now
  std::unique_ptr<CoordinatorState> state;       // null -> in-memory state
  // How the region table reaches memory nodes; null -> gRPC to each node's
  // control address (tests pass a fake).
  std::unique_ptr<RegionNodes> region_nodes;
};

class Membership;
class CoordinatorServer;
class RegionTable;

// The coordinator server. Thread-safe. A background reaper thread, woken
// every heartbeat_interval/2, declares silent nodes dead (time read from
// options.clock).
class Coordinator {
 public:
  // Validates the options (InvalidArgument: heartbeat_interval must be > 0
  // and < dead_after), binds options.listen and starts serving.
  // FailedPrecondition when the address cannot be bound (in use, or not a
  // local address); Unavailable when the state cannot be read.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(CoordinatorOptions options);
  ~Coordinator();  // Shutdown()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // "<host>:<bound port>", where host is the listen host ("127.0.0.1" when
  // listening on a wildcard address).
  std::string address() const;

  // A copy of the current map. Empty (epoch 0) if the state cannot be read,
  // which the in-memory state never fails to.
  proto::ClusterMap Map() const;

  // Stops serving: ends watch streams (their clients see Unavailable),
  // finishes or cancels in-flight calls, stops the reaper. Idempotent; a
  // concurrent caller returns once the first one is done.
  void Shutdown();

  // Blocks until Shutdown has completed.
  void Wait();

 private:
  friend class CoordinatorTestPeer;
  Coordinator(std::unique_ptr<Membership> membership, std::unique_ptr<RegionNodes> region_nodes,
              std::unique_ptr<RegionTable> regions, absl::Duration reap_every);

  // Declares nodes silent for dead_after dead, now. Returns how many.
  absl::StatusOr<int> Reap();
  void ReaperLoop();

  const absl::Duration reap_every_;
  std::string listen_host_;
  // Teardown order: the reaper and server stop (in Shutdown) before the
  // region table and membership they use are destroyed; the table uses the
  // membership's state and the region nodes.
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<RegionNodes> region_nodes_;
  std::unique_ptr<RegionTable> regions_;
  std::unique_ptr<CoordinatorServer> server_;
  absl::Mutex reaper_mu_;
  bool reaper_stop_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
  absl::Mutex shutdown_mu_;  // held for the whole of Shutdown
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification done_;
};

// Thin client of the Coordinator service. Thread-safe. Every call carries a
// deadline (kCoordinatorRpcTimeout); a coordinator that does not answer in
// time gives Unavailable (retry). Server-side errors keep their code.
class CoordinatorClient {
 public:
  // Connects to `address` ("host:port"). Unavailable, with a message telling
  // the user to start `meshpool coordinator` and to point --coordinator or
  // MESHPOOL_COORDINATOR at it, when it cannot connect within `timeout`.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      std::string address, absl::Duration timeout = absl::Seconds(3));
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  const std::string& address() const;

  // InvalidArgument (with what is wrong) for an incomplete NodeInfo: no
  // transport address, no pool region, zero capacity, missing layout, id
  // longer than kMaxNodeIdBytes.
  absl::StatusOr<proto::RegisterNodeReply> RegisterNode(const proto::NodeInfo& info);
  // known=false in the reply: register again.
  absl::StatusOr<proto::HeartbeatReply> Heartbeat(const proto::HeartbeatRequest& request);
  absl::StatusOr<proto::ClusterMap> GetClusterMap();

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
  // The Watch shares the client's channel and may outlive the client.
  // InvalidArgument when on_map is empty.
  absl::StatusOr<std::unique_ptr<Watch>> WatchClusterMap(
      uint64_t known_epoch, std::function<void(const proto::ClusterMap&)> on_map);

  // ---- Regions (rules and error codes: RegionTable in region_table.h) ----
  // Creating allocates and zero-fills memory on the nodes, so this call's
  // deadline is kCreateRegionTimeout, not kCoordinatorRpcTimeout; a create
  // that times out on the client may still complete (GetRegion shows it).
  absl::StatusOr<proto::RegionInfo> CreateRegion(const proto::CreateRegionRequest& request);
  // NotFound when absent.
  absl::StatusOr<proto::RegionInfo> GetRegion(absl::string_view name);
  absl::Status DeleteRegion(absl::string_view name);
  absl::Status RenameRegion(absl::string_view from, absl::string_view to, bool replace);
  // Sorted by name; without slab_offsets and stripe_extents.
  absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(absl::string_view prefix);

 private:
  struct Rpc;  // the gRPC channel and stub (coordinator_client.cc)
  CoordinatorClient(std::string address, std::unique_ptr<Rpc> rpc);

  const std::string address_;
  std::unique_ptr<Rpc> rpc_;
};

// The deadline of every unary CoordinatorClient call but CreateRegion.
inline constexpr absl::Duration kCoordinatorRpcTimeout = absl::Seconds(3);
// CreateRegion's deadline: a stats round and an allocation round (which
// zero-fills the region's memory) on the nodes, with room to spare.
inline constexpr absl::Duration kCreateRegionTimeout = absl::Seconds(60);
// (absl's Duration arithmetic is not constexpr here: 60 s > 3 s + 45 s.)
static_assert(kCreateRegionTimeout > kNodeAllocateTimeout &&
              kCreateRegionTimeout > kNodeStatsTimeout);

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_PLACEMENT_H_
