// Internal to client/: this client's session on one memory node — what
// lets the node honour its pins without an RPC per operation. The session
// owns a pin table in the node's pool (PinTable mirrors it) and lives while
// the client renews it (RenewSession, from the client's keeper thread,
// every quarter lease, carrying the client's counters for that node). A
// client that dies stops renewing; one lease later the node clears its
// table, so its pins lapse with it.
//
// The client writes its table only while its own view says the session is
// alive (the last renewal it sent plus the lease, less a margin), so a
// client that was paused past its lease does not write into a table the
// node may have given to someone else.
//
// Thread-safe.
#ifndef MESHPOOL_CLIENT_NODE_SESSION_H_
#define MESHPOOL_CLIENT_NODE_SESSION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/pin_table.h"
#include "proto/meshpool.pb.h"

namespace meshpool::client_internal {

class NodeConnection;

// Counters a client keeps per node (reported with each renewal).
struct NodeKvCounters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> puts{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> pins{0};
  proto::KvClientStats ToProto() const;
  bool any() const;
  // A GET's outcome: OK is a hit of `bytes`, NotFound a miss.
  void CountGet(const absl::Status& status, size_t bytes);
  // A PUT's outcome: OK stored `bytes`.
  void CountPut(const absl::Status& status, size_t bytes);
};

class NodeSession {
 public:
  // Writes to the table stop this long (at most; a quarter lease for
  // short leases) before the lease the client knows of runs out.
  static constexpr absl::Duration kMaxWriteMargin = absl::Seconds(1);

  explicit NodeSession(NodeConnection& node) : node_(node) {}

  // The pin table, opening the session first if there is none (or it was
  // lost). ResourceExhausted when the node has no free table; Unavailable
  // when the node cannot be reached or the session is past its write
  // window (renewals failing).
  absl::StatusOr<std::shared_ptr<PinTable>> Table();
  // OK while `table` is this session's current table and the session has
  // time left to write it; else Unavailable (retry: the keeper renews or
  // a new session opens). Checked right before posting pin WRITEs.
  absl::Status CheckWritable(const PinTable* table) const;
  // The node's clock now (unix ms), as estimated from the last reply.
  // REQUIRES: a session was opened.
  uint64_t NodeNowMs() const;

  // Renews when a quarter lease passed since the last renewal; opens a
  // session when there is none and `counters` has anything to report.
  // Called by the keeper thread. A session the node no longer knows is
  // dropped (its pins are gone); the next Table() opens a new one.
  void KeepAlive(const NodeKvCounters& counters);
  // Closes the session (its pins go), reporting final counters.
  void Close(const NodeKvCounters& counters);

 private:
  absl::Status OpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WritableLocked(const PinTable* table) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed open (e.g. every table taken), the keeper waits this
  // long before trying again for counters alone.
  static constexpr absl::Duration kOpenBackoff = absl::Seconds(10);
  void Adopt(absl::Time sent, absl::Time received, uint64_t node_clock_ms,
             uint32_t lease_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NodeConnection& node_;
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_open_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool renewing_ ABSL_GUARDED_BY(mu_) = false;  // a renewal RPC in flight
  uint32_t session_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t token_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<PinTable> table_ ABSL_GUARDED_BY(mu_);
  absl::Duration lease_ ABSL_GUARDED_BY(mu_);
  absl::Time last_renew_sent_ ABSL_GUARDED_BY(mu_);
  // node clock - local clock, in ms, from the last reply.
  int64_t clock_offset_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_NODE_SESSION_H_
