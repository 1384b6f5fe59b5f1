// meshpool/coordinator/region_table.h: the coordinator's region rules.
//
// A region is named memory striped across the memory nodes and hard-pinned
// there (proto/meshpool.proto, "Regions"). RegionTable creates, finds,
// renames, lists and deletes regions; it keeps them in the CoordinatorState
// (as proto::RegionInfo) and asks the nodes for memory through RegionNodes.
//
// Rules:
//  * Names are stored names (coordinator/tenants.h: NAME, or a tenant's
//    "~TENANT/NAME"); a name is taken from the moment a CreateRegion for it
//    starts (a second create, or a rename onto it, gets AlreadyExists
//    meanwhile).
//  * A create that would take its tenant past its RegionQuota (regions,
//    or bytes as size * replicas, counting creates in progress) fails
//    ResourceExhausted before anything is allocated. Renames and repairs
//    are not charged.
//  * Create places stripes over the NODE_ALIVE nodes that answer a fresh
//    GetStats, in proportion to their free slabs (PlaceStripes), allocates
//    on every chosen node, and records the region only when every
//    allocation succeeded; otherwise it frees what it asked for (except on
//    nodes that refused with FailedPrecondition: they took nothing, and
//    may hold another region under that id) and records nothing.
//  * Delete (and a rename that replaces) forgets the region first, then
//    frees its memory on each node still alive with the incarnation that
//    holds it. A node that died took that memory with it; freeing errors
//    are logged, not returned.
//  * Region ids are never reused (and a restarted coordinator's in-memory
//    state starts past the old ones: FirstRegionIdAt), so a late
//    FreeRegion cannot hit another region.
//
// No gRPC here (region_nodes_grpc.cc implements RegionNodes over gRPC).
// Thread-safety: RegionTable is thread-safe; node calls run without its
// lock held, so a slow create does not block other calls.
#ifndef MESHPOOL_COORDINATOR_REGION_TABLE_H_
#define MESHPOOL_COORDINATOR_REGION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/tenants.h"
#include "placement/region_layout.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// Deadlines of the coordinator's calls to memory nodes. Allocation
// zero-fills the slabs, so it gets long; the client's CreateRegion
// deadline (kCreateRegionTimeout, placement.h) covers a stats round and an
// allocation round.
inline constexpr absl::Duration kNodeStatsTimeout = absl::Seconds(3);
inline constexpr absl::Duration kNodeAllocateTimeout = absl::Seconds(45);
inline constexpr absl::Duration kNodeFreeTimeout = absl::Seconds(3);
// Node calls of one create or delete run on at most this many threads.
inline constexpr size_t kMaxParallelNodeCalls = 32;
// How long an allocation the table freed itself is remembered, so that
// Reconcile takes a node's report of it (a heartbeat sent before the free)
// as stale rather than as memory left behind. Heartbeats are seconds apart.
inline constexpr absl::Duration kFreedReportGrace = absl::Seconds(30);
static_assert(kMaxParallelNodeCalls >= 1);

// What the coordinator asks of memory nodes; gRPC in production, a fake in
// tests. Implementations are thread-safe. Each call names the node by its
// NodeInfo (control_address, incarnation).
class RegionNodes {
 public:
  virtual ~RegionNodes() = default;
  // Unavailable when the node does not answer in time.
  virtual absl::StatusOr<proto::NodeStats> GetStats(const proto::NodeInfo& node) = 0;
  // The node's codes: FailedPrecondition (another incarnation),
  // ResourceExhausted (not enough free slabs), InvalidArgument; Unavailable
  // when it does not answer in time.
  virtual absl::StatusOr<proto::AllocateRegionReply> Allocate(
      const proto::NodeInfo& node, const proto::AllocateRegionRequest& request) = 0;
  // OK also for a region the node does not hold.
  virtual absl::Status Free(const proto::NodeInfo& node,
                            const proto::FreeRegionRequest& request) = 0;
};

// RegionNodes over each node's gRPC Node service (region_nodes_grpc.cc),
// with the deadlines above. Channels are cached per control address and
// present `security`'s certificate (the coordinator's).
std::unique_ptr<RegionNodes> NewGrpcRegionNodes(auth::ChannelSecurity security);

// The id a node holds `extent`'s slabs under: its allocation_id, or the
// region's id when that is 0 (extents made when the region was created).
inline uint64_t AllocationId(const proto::RegionInfo& info,
                             const proto::RegionExtent& extent) {
  return extent.allocation_id() != 0 ? extent.allocation_id()
                                     : info.region_id();
}

// The region's health against `map` (a copy is live while its extent's
// node is NODE_ALIVE with the extent's incarnation); state, degraded and
// lost stripe counts only. UNKNOWN when the placement table is malformed.
proto::RegionHealth HealthOf(const proto::RegionInfo& info,
                             const proto::ClusterMap& map);

class RegionTable {
 public:
  // `state` and `nodes` are not owned and must outlive the table; the table
  // reads the cluster map from `state`. `env` (null: Env::Default(); not
  // owned, must outlive the table) stamps created_unix_ms and receives
  // what Delete cannot report (memory that could not be freed). Creates
  // are held to `quotas`.
  RegionTable(CoordinatorState* state, RegionNodes* nodes, Env* env = nullptr,
              RegionQuotas quotas = {});
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // Places, allocates and records a region (the file comment has the
  // rules). stripe_bytes 0 picks min(kDefaultStripeBytes, the smallest slab
  // of the answering nodes); replicas 0 means 1. Errors:
  //   InvalidArgument    - bad name, size 0, stripe_bytes not a multiple of
  //                        kStripeAlign or above a node's slab (the message
  //                        gives the largest allowed), replicas above
  //                        kMaxReplicas, more than kMaxRegionStripes stripes;
  //   AlreadyExists      - the name is taken (or being created);
  //   FailedPrecondition - fewer live nodes with free memory than replicas;
  //   ResourceExhausted  - the nodes' free memory cannot hold it (the
  //                        message says how much is free), or the
  //                        region's tenant would exceed its quota (the
  //                        message says which limit and the usage);
  //   Unavailable        - no live node answered, or a node failed while
  //                        allocating (nothing is left allocated; retry).
  // `owner` is recorded in the region (RegionInfo.owner).
  absl::StatusOr<proto::RegionInfo> Create(
      const proto::CreateRegionRequest& request, absl::string_view owner = "");

  // The region with its health filled in. NotFound if there is no region
  // of that name.
  absl::StatusOr<proto::RegionInfo> Get(absl::string_view name) const;

  // Forgets the region, then frees its memory on the nodes. NotFound if
  // absent. With `only_owner` set, PermissionDenied unless the region's
  // owner is `only_owner` (checked atomically with the change).
  absl::Status Delete(absl::string_view name,
                      absl::string_view only_owner = "");

  // Atomically renames `from` to `to`. InvalidArgument (bad `to`), NotFound
  // (no `from`), AlreadyExists (`to` exists and not `replace`, or is being
  // created). With `replace`, the region `to` named is deleted (as Delete).
  // `only_owner` as for Delete, for `from` and a replaced `to` alike.
  absl::Status Rename(absl::string_view from, absl::string_view to,
                      bool replace, absl::string_view only_owner = "");

  // Regions whose name starts with `prefix`, sorted by name, with their
  // health, without slab_offsets and stripe_extents.
  absl::StatusOr<std::vector<proto::RegionInfo>> List(absl::string_view prefix) const;

  // Frees, on each live node, the allocations its last heartbeat reported
  // (NodeStats.region_ids) that no extent of the table holds and no create
  // or repair in progress is making: memory a create left behind when the
  // coordinator died between allocating and recording it. Only sound when
  // the table is durable (a restarted in-memory table knows no region, and
  // clients may still use theirs). An allocation the table freed itself
  // in the last kFreedReportGrace is not freed again (the report predates
  // the free). Returns how many frees it asked for; each is logged.
  // Idempotent (a node frees an unknown region as OK).
  size_t Reconcile();

  // ---- For the repairer (coordinator/region_repair.h). ----

  // A live node that answered a fresh GetStats.
  struct LiveNode {
    proto::NodeInfo info;
    proto::NodeStats stats;
  };
  // Fresh stats of every NODE_ALIVE node with a slab layout, in map order;
  // nodes that do not answer are left out. `live` receives how many were
  // alive. Unavailable when the state cannot be read.
  absl::StatusOr<std::vector<LiveNode>> FreshLiveNodes(size_t& live);

  // A fresh allocation id (from the region id counter) that Reconcile
  // leaves alone until ReleaseAllocationId; for extents a repair adds.
  absl::StatusOr<uint64_t> ReserveAllocationId();
  void ReleaseAllocationId(uint64_t id);

  // Allocates extents extents[i] of `info` (copies[i] stripe copies on
  // nodes[i], under each extent's AllocationId), filling in their
  // slab_offsets; on failure frees what it asked for and returns the first
  // error (Unavailable when a node restarted or did not answer,
  // ResourceExhausted when it is full).
  absl::Status Allocate(proto::RegionInfo& info,
                        const std::vector<int>& extents,
                        const std::vector<proto::NodeInfo>& nodes,
                        const std::vector<uint64_t>& copies);
  // Frees extents `extents` of `info` (all when empty) on their nodes while
  // the map shows the incarnation holding them alive; logs failures.
  void FreeMemory(const proto::RegionInfo& info,
                  const std::vector<int>& extents = {});

  // Records `repaired` in place of `before` (same region id and
  // layout_version, under the name `before` had) and bumps the map epoch so
  // clients holding the region refetch its layout. FailedPrecondition when
  // the region was deleted, renamed or changed meanwhile (the caller frees
  // what it allocated and plans again).
  absl::Status CommitRepair(const proto::RegionInfo& before,
                            const proto::RegionInfo& repaired);

  // What GetRegion and ListRegions report of a repair in progress or
  // failed (RegionHealth's repair fields), by region id; cleared by
  // passing nullopt.
  void SetRepairStatus(uint64_t region_id,
                       std::optional<proto::RegionHealth> status);

 private:
  // Fills info.health from the map and the repair status.
  void FillHealth(proto::RegionInfo& info, const proto::ClusterMap& map) const;
  // The rest of Create once the name is reserved. REQUIRES: candidates is
  // not empty.
  absl::StatusOr<proto::RegionInfo> Place(
      const proto::CreateRegionRequest& request, uint64_t stripe_bytes,
      uint32_t replicas, std::vector<LiveNode> candidates,
      absl::string_view owner);
  // PermissionDenied unless `only_owner` is empty, the region `name` does
  // not exist, or `only_owner` owns it.
  absl::Status CheckOwnerLocked(absl::string_view name,
                                absl::string_view only_owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when one more region of `bytes` (size * replicas)
  // named `name` takes its tenant past its quota; counts recorded regions
  // and creates in progress.
  absl::Status CheckQuotaLocked(absl::string_view name, uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(absl::string_view message) const;

  CoordinatorState* const state_;
  RegionNodes* const nodes_;
  Env* const env_;
  const RegionQuotas quotas_;
  // Serialises each read-decide-write sequence on the region table.
  mutable absl::Mutex mu_;
  // Creates in progress, by name.
  struct Creating {
    uint64_t region_id = 0;  // 0 until one is assigned
    uint64_t bytes = 0;      // size * replicas, charged to its tenant
  };
  std::map<std::string, Creating, std::less<>> creating_ ABSL_GUARDED_BY(mu_);
  // Allocation ids repairs in progress are allocating under.
  std::set<uint64_t> repairing_ ABSL_GUARDED_BY(mu_);
  // Allocation ids FreeMemory freed on their node, with when (pruned after
  // kFreedReportGrace by Reconcile).
  std::map<uint64_t, absl::Time> freed_ ABSL_GUARDED_BY(mu_);
  // Repair progress and failures, by region id.
  mutable absl::Mutex status_mu_;
  std::map<uint64_t, proto::RegionHealth> repair_status_
      ABSL_GUARDED_BY(status_mu_);
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_REGION_TABLE_H_
