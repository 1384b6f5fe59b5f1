// meshpool/coordinator/etcd_leader.h: which coordinator leads, decided in
// etcd. The leader holds one key (`<prefix>leader`, its value the
// coordinator's address) bound to an etcd lease that it keeps alive; the
// key's create revision fences its writes (EtcdStateOptions.guard), so a
// coordinator that lost the key can no longer change the state even if it
// has not noticed yet. When the leader dies its lease expires (the TTL)
// and the key disappears; a coordinator waiting in Acquire then creates it.
//
// Thread-safety: EtcdLeadership is thread-safe.
#ifndef MESHPOOL_COORDINATOR_ETCD_LEADER_H_
#define MESHPOOL_COORDINATOR_ETCD_LEADER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "coordinator/etcd_client.h"

namespace meshpool::coordinator {

// The lease's time to live: how long a dead leader keeps the key. etcd
// counts whole seconds.
inline constexpr absl::Duration kLeaderLeaseTtl = absl::Seconds(2);
// A waiting coordinator tries to take the key this often.
inline constexpr absl::Duration kLeaderPollEvery = absl::Milliseconds(250);

class EtcdLeadership {
 public:
  struct Options {
    std::string key;      // e.g. "/meshpool/leader"
    std::string address;  // this coordinator's, stored as the key's value
    // Wait for the key when another coordinator holds it (a standby);
    // false: FailedPrecondition naming the holder instead.
    bool wait = true;
    // Called (from the keep-alive thread) when the lease is lost: the
    // coordinator must stop serving writes. May be empty.
    std::function<void()> on_lost;
    // Polled while waiting: true gives up (Cancelled). May be empty.
    std::function<bool()> stop;
    // Called while waiting after every look at the key with its holder's
    // address (empty: nobody holds it, or etcd did not answer). May be
    // empty.
    std::function<void(const std::string& holder)> on_holder;
    Env* env = nullptr;  // log lines; null: Env::Default()
  };

  // Takes the key (creating a lease for it), waiting as options.wait says,
  // then keeps the lease alive in a background thread. Errors:
  // Unavailable (etcd unreachable while not waiting), FailedPrecondition
  // (held by another and !wait), Cancelled (options.stop).
  static absl::StatusOr<std::unique_ptr<EtcdLeadership>> Acquire(
      std::shared_ptr<EtcdClient> client, Options options);
  // Gives the key up (revokes the lease) so a standby takes over at once.
  ~EtcdLeadership();

  // The key's create revision while this process holds it (the fence).
  int64_t create_revision() const { return create_revision_; }
  const std::string& key() const { return options_.key; }
  // True once the lease could not be renewed within its TTL.
  bool lost() const { return lost_; }

 private:
  EtcdLeadership(std::shared_ptr<EtcdClient> client, Options options,
                 int64_t lease, int64_t create_revision);
  void KeepAliveLoop();

  const std::shared_ptr<EtcdClient> client_;
  const Options options_;
  const int64_t lease_;
  const int64_t create_revision_;
  std::atomic<bool> lost_{false};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread keepalive_;  // last: joined first
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_ETCD_LEADER_H_
