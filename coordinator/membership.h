// meshpool/placement: Membership, the coordinator's rules over its
// CoordinatorState (the rules are listed in placement/placement.h).
//
// No gRPC here: the service layer (coordinator_service.h) translates protos
// to these calls. Thread-safe: one mutex serialises every read-decide-write
// sequence on the state and guards the cached epoch watchers wait on.
#ifndef MESHPOOL_COORDINATOR_MEMBERSHIP_H_
#define MESHPOOL_COORDINATOR_MEMBERSHIP_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/map_feed.h"
#include "coordinator/rate_limiter.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// Bounds on the strings a registration puts in the map every client reads.
inline constexpr size_t kMaxNodeAddressBytes = 256;
inline constexpr int kMaxTransportAddresses = 8;
// Registrations one caller may make a minute by default (a burst of as
// many): far above what restarts need, far below what churns the map.
inline constexpr int kDefaultRegistrationsPerMinute = 120;
// The map holds at most this many node entries, alive and dead: a new id
// past it is ResourceExhausted until dead entries are forgotten.
inline constexpr size_t kMaxMapNodes = 16384;
// How long a dead node's entry stays in the map by default.
inline constexpr absl::Duration kDefaultForgetDeadAfter = absl::Hours(1);
// Forgotten (node id, incarnation) pairs this coordinator remembers, so
// that such a process coming back is still told it was declared dead.
inline constexpr size_t kMaxForgottenIncarnations = 4 * kMaxMapNodes;
static_assert(kMaxForgottenIncarnations >= kMaxMapNodes);
// How far past the newest epoch a node reports a coordinator that lost its
// state starts its history: clients (and the objects they wrote) may have
// seen epochs a little newer than any node heard of before the loss.
inline constexpr uint64_t kLostHistoryEpochGap = uint64_t{1} << 20;

// What one node may make of the cluster (CoordinatorOptions).
struct RegistrationLimits {
  // The largest capacity a node may report: placement weighs nodes by it,
  // so a node that claims more draws the keys of all others. 0: the largest
  // pool a node can address (format::kMaxPoolBytes).
  uint64_t max_node_bytes = 0;
  // Registrations per minute per caller (its certificate's identity, or its
  // host without TLS); 0: no limit.
  int registrations_per_minute = kDefaultRegistrationsPerMinute;
  // A node dead this long (counted from its last heartbeat, or from the
  // coordinator's start for entries it loaded) leaves the map; zero: dead
  // entries stay for good.
  absl::Duration forget_dead_after = kDefaultForgetDeadAfter;
};

// InvalidArgument naming the first piece of a registration that is missing
// or does not hold: id too long, no transport address (or an empty one),
// addresses too many or too long, no pool region, zero capacity, missing
// layout, a layout that does not fit the pool region or a capacity beyond
// the pool (placement::ValidateNodeLayout), a capacity above
// `max_node_bytes` (0: format::kMaxPoolBytes). OK otherwise.
absl::Status ValidateNodeInfo(const proto::NodeInfo& info,
                              uint64_t max_node_bytes = 0);

class Membership {
 public:
  // Takes ownership of `state`. `env` (null: Env::Default(); not owned,
  // must outlive the membership) is its clock.
  // Unavailable when the state cannot be read. Nodes alive in `state` get a
  // grace period of dead_after from now before they can be declared dead.
  static absl::StatusOr<std::unique_ptr<Membership>> Create(
      std::unique_ptr<CoordinatorState> state, absl::Duration dead_after,
      const RegistrationLimits& limits, Env* env);

  // Admits one registration by `caller` (who registers: a certificate
  // identity or a peer host; ResourceExhausted past
  // limits.registrations_per_minute), validates it (ValidateNodeInfo,
  // InvalidArgument), assigns an id when info.node_id is empty, stores the
  // node NODE_ALIVE and bumps the epoch. FailedPrecondition for an
  // incarnation declared dead (also when its entry was forgotten since);
  // ResourceExhausted for a new id when the map holds kMaxMapNodes. Reply
  // carries node_id and the new epoch (heartbeat_interval_ms is left to the
  // caller). Unavailable after Shutdown.
  // `last_epoch` is the newest epoch the node was told: one above the
  // current epoch means this coordinator lost the state that node saw, and
  // the map's history restarts kLostHistoryEpochGap past it
  // (CoordinatorState::RestartHistory), so no epoch is used twice.
  absl::StatusOr<proto::RegisterNodeReply> Register(const proto::NodeInfo& info,
                                                    absl::string_view caller,
                                                    uint64_t last_epoch = 0);

  // known=false for an unknown id, a stale incarnation or a dead node;
  // otherwise stores the heartbeat time and stats. Unavailable after Shutdown.
  absl::StatusOr<proto::HeartbeatReply> Heartbeat(const proto::HeartbeatRequest& request);

  // A copy of the current map.
  absl::StatusOr<proto::ClusterMap> Map() const;

  // The maps and deltas watch streams send, published from Map() once per
  // epoch (map_feed.h). Lives as long as the membership.
  MapFeed& feed() { return feed_; }

  // Marks NODE_DEAD every alive node silent for at least dead_after (by the
  // clock), one epoch bump per node, and forgets (removes from the map) the
  // dead ones silent for dead_after + limits.forget_dead_after. Returns how
  // many it marked.
  absl::StatusOr<int> Reap();

  struct EpochWait {
    uint64_t epoch;  // the current epoch
    bool shut_down;  // Shutdown was called: stop waiting
  };
  // Blocks until the epoch exceeds `epoch`, Shutdown, or `timeout` passes.
  EpochWait AwaitEpochAbove(uint64_t epoch, absl::Duration timeout) const;

  // Wakes every AwaitEpochAbove for good; later mutations fail Unavailable.
  void Shutdown();

 private:
  Membership(std::unique_ptr<CoordinatorState> state, absl::Duration dead_after,
             const RegistrationLimits& limits, Env* env, uint64_t epoch,
             int64_t start_ms);
  int64_t NowMillis() const;
  absl::Status CheckRunning() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ForgottenLocked(absl::string_view node_id, uint64_t incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberForgottenLocked(const proto::NodeInfo& info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<CoordinatorState> state_;
  const absl::Duration dead_after_;
  const uint64_t max_node_bytes_;
  const absl::Duration forget_dead_after_;
  Env* const env_;
  RateLimiter registrations_;
  const int64_t start_ms_;  // the grace period for nodes found in the state
  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // The (node id, incarnation) pairs Reap forgot, oldest first, at most
  // kMaxForgottenIncarnations (kept in memory only).
  std::deque<std::pair<std::string, uint64_t>> forgotten_order_
      ABSL_GUARDED_BY(mu_);
  std::set<std::pair<std::string, uint64_t>> forgotten_ ABSL_GUARDED_BY(mu_);
  MapFeed feed_{[this] { return Map(); }};  // last: it calls Map()
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_MEMBERSHIP_H_
