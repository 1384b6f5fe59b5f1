// meshpool/coordinator/region_repair.h: re-replication of regions.
//
// When a memory node dies, the stripe copies it held are gone; a region
// with replicas > 1 keeps serving from its other copies (DEGRADED, see
// proto::RegionHealth). The repairer gives each lost copy a new home:
//  1. PlanRepair chooses, for each lost copy of a stripe that still has a
//     live copy, a live node holding no copy of that stripe, the one with
//     the most free memory first, and rewrites the placement table:
//     one new extent per chosen node, under a fresh allocation id (so one
//     node may hold two extents of a region, and a failed repair frees only
//     what it allocated); extents left with no copy are dropped.
//  2. The repairer allocates the new extents (zero-filled, hard-pinned).
//  3. The StripeCopier fills every new copy from a surviving one and checks
//     it (the nodes digest both copies; bytes already equal are not moved).
//  4. The table records the new layout (layout_version + 1) if the region
//     was not deleted, renamed or repaired meanwhile, and bumps the map
//     epoch so clients holding the region refetch it.
//  5. A pass kRepairSettle later runs the copier once more over them:
//     a write that reached only the surviving copies (its writer still held
//     the old layout) is copied again.
// Readers keep reading surviving copies throughout. Copies with no live
// source (the region is LOST) cannot be repaired. Copies that cannot be
// placed (no other live node has free memory) stay lost, the region stays
// DEGRADED, its health says why, and later passes try again.
//
// Writers during a repair: a write racing step 5 can still leave a new copy
// behind its source; regions the repair is for are mostly write-once
// (weights, published snapshots), and a writer that must know every copy
// holds its bytes calls Region::Verify.
//
// Thread-safety: RegionRepairer is thread-compatible, but for counters(),
// which any thread may call; the coordinator calls RepairOnce from one
// thread. PlanRepair is a pure function.
#ifndef MESHPOOL_COORDINATOR_REGION_REPAIR_H_
#define MESHPOOL_COORDINATOR_REGION_REPAIR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/region_table.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// Copies the bytes a repair needs. Given the region as recorded (`current`)
// and as repaired (`repaired`: the same stripes, some copies on new
// extents), makes every copy of `repaired` that `current` does not have
// hold the bytes of a live copy of the same stripe that both have, and
// checks it with the nodes' digests. kFill: the new copies are fresh
// (zero-filled), copy them all; kRecheck: digest first and copy only what
// differs. Calls progress(bytes) as bytes are copied or checked; when that
// returns false it stops and returns Cancelled. Errors: Unavailable (a
// node failed or did not answer: retry later), Aborted (a source kept
// changing under concurrent writes), DataLoss (a stripe has no live
// source). Must be thread-safe.
enum class CopyPass { kFill, kRecheck };
using RepairProgress = std::function<bool(uint64_t bytes)>;
using StripeCopier = std::function<absl::Status(
    const proto::RegionInfo& current, const proto::RegionInfo& repaired,
    CopyPass pass, const RepairProgress& progress)>;
// Makes a StripeCopier that reaches the cluster through the coordinator at
// `coordinator_address` (tools/ builds one from a meshpool::Client).
using StripeCopierFactory = std::function<absl::StatusOr<StripeCopier>(
    const std::string& coordinator_address)>;

// How long after recording a repair the repairer checks the new copies
// again (clients learn the new layout from the map watch).
inline constexpr absl::Duration kRepairSettle = absl::Seconds(1);

// A repair of one region, as planned.
struct RepairPlan {
  // The region after the repair. The new extents have node, incarnation and
  // slab_bytes set; their allocation ids and slab offsets are not yet.
  proto::RegionInfo repaired;
  std::vector<int> new_extents;        // indices into repaired.extents()
  std::vector<proto::NodeInfo> nodes;  // the node of each new extent
  std::vector<uint64_t> copies;        // stripe copies on each new extent
  uint64_t copies_placed = 0;          // lost copies given a new home
  uint64_t copies_unplaced = 0;        // lost copies no node could take
  uint64_t bytes = 0;                  // bytes of the placed copies
};

// Plans the repair of `info` against `map`, placing on `nodes` (live nodes
// with fresh stats; a node's free stripes are its free slabs times the
// stripes per slab). copies_placed is 0 when there is nothing to do (every
// copy live, or no lost copy has both a live source and a place to go).
// InvalidArgument when `info`'s placement table is malformed.
absl::StatusOr<RepairPlan> PlanRepair(
    const proto::RegionInfo& info, const proto::ClusterMap& map,
    absl::Span<const RegionTable::LiveNode> nodes);

class RegionRepairer {
 public:
  // `state` and `table` are not owned and must outlive the repairer.
  // `factory` is called (once it succeeds) the first time a repair needs
  // a copier, with `coordinator_address`. `env` (null: Env::Default())
  // receives the log lines.
  RegionRepairer(CoordinatorState* state, RegionTable* table,
                 StripeCopierFactory factory, std::string coordinator_address,
                 Env* env = nullptr);

  // What the repairer did since it was made.
  struct Counters {
    uint64_t repaired = 0;      // repairs recorded
    uint64_t failed = 0;        // repair attempts that failed
    uint64_t bytes_copied = 0;  // bytes of the recorded repairs
  };
  Counters counters() const;

  // One pass over the table: repairs every region that lost copies and can
  // be repaired, one after another. Returns how many were recorded
  // repaired; failures are logged and shown in the regions' health.
  // `stop` (may be null) is polled while copying: when it returns true the
  // pass ends early (a copy in progress is dropped and its memory freed).
  size_t RepairOnce(const std::function<bool()>& stop = nullptr);

 private:
  // Plans, allocates, copies and records one region's repair.
  absl::Status Repair(const proto::RegionInfo& info,
                      const proto::ClusterMap& map,
                      const std::function<bool()>& stop);
  // The copier, made on first use. Unavailable when the factory fails.
  absl::StatusOr<StripeCopier> Copier();
  // Runs the copier again over the repairs recorded kRepairSettle ago or
  // more whose region is unchanged since.
  void Recheck();

  struct PendingRecheck {
    proto::RegionInfo before;
    proto::RegionInfo repaired;
    absl::Time due;
  };

  CoordinatorState* const state_;
  RegionTable* const table_;
  const StripeCopierFactory factory_;
  const std::string coordinator_address_;
  Env* const env_;
  StripeCopier copier_;  // empty until made
  mutable absl::Mutex counters_mu_;  // metrics scrapes read them
  Counters counters_ ABSL_GUARDED_BY(counters_mu_);
  std::vector<PendingRecheck> rechecks_;
  // The last failure logged per region id (logged again only when it
  // changes).
  std::map<uint64_t, std::string> last_error_;
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_REGION_REPAIR_H_
