// meshpool/coordinator: the durable CoordinatorState, kept in a state
// directory (`meshpool coordinator --state-dir DIR`).
//
// Every change is one record (proto::StateRecord, absolute values) appended
// to the directory's log and fdatasync'd before the method returns, so a
// change the coordinator acknowledged survives a crash; the log is
// compacted into a snapshot (proto::StateSnapshot) as it grows. The file
// format and its crash rules are StateLog's (coordinator/state_log.h).
//
// Durable: the map's epoch, every node entry's info and state (so a node
// declared dead stays fenced: its incarnation is remembered), the regions
// and the next region id. Liveness (heartbeat times, stats) is kept in
// memory only; on load every node marked alive is treated as heard from at
// load time, so nodes get a full dead_after to resume heartbeating.
//
// Fail-stop: when a write fails (disk full, I/O error) the change is not
// acknowledged, and every later call fails FailedPrecondition saying so;
// restarting the coordinator reloads what was acknowledged.
//
// Thread-safe; each method is atomic (one lock around memory and log).
#ifndef MESHPOOL_COORDINATOR_FILE_STATE_H_
#define MESHPOOL_COORDINATOR_FILE_STATE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"

namespace meshpool::coordinator {

struct FileStateOptions {
  std::string dir;  // created if missing (its parent must exist)
  // A state directory with no snapshot yet starts handing out region ids
  // here (see FirstRegionIdAt: nodes may hold regions of an earlier,
  // non-durable coordinator).
  uint64_t first_region_id = 1;
  // Compact when the log holds this many records (and is larger than the
  // snapshot): a restart replays at most this many.
  size_t compact_after_records = 4096;
  Env* env = nullptr;  // the load-time clock; null: Env::Default()
};

// What a load found, for the coordinator's start-up line.
struct FileStateLoad {
  uint64_t generation = 0;
  size_t records_replayed = 0;
  uint64_t dropped_tail_bytes = 0;  // a torn tail from a crash, cut off
  bool fresh = false;               // the directory had no state
};

// Loads (or creates) the state in options.dir. DataLoss naming the file
// and offset for corrupt state (nothing is loaded); InvalidArgument for an
// empty dir; the errno mapping for an unusable directory.
absl::StatusOr<std::unique_ptr<CoordinatorState>> OpenFileCoordinatorState(
    const FileStateOptions& options, FileStateLoad* load = nullptr);

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_FILE_STATE_H_
