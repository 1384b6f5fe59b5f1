// meshpool/coordinator: RateLimiter, token buckets keyed by who calls (a
// certificate identity, or a peer host without TLS), so that one caller
// cannot churn the cluster map (every registration rewrites it and sends it
// to every watcher) while others go on.
//
// Thread-safe.
#ifndef MESHPOOL_COORDINATOR_RATE_LIMITER_H_
#define MESHPOOL_COORDINATOR_RATE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"

namespace meshpool::coordinator {

// Callers tracked at once; past it, callers whose bucket has refilled are
// forgotten (they are as if new), and a new caller is refused only while
// every tracked one is still throttled.
inline constexpr size_t kMaxRateLimitedCallers = 4096;

class RateLimiter {
 public:
  // Each caller may make `per_minute` calls a minute on average and as
  // many at once (a bucket of per_minute tokens, refilled continuously).
  // per_minute 0: no limit. `what` names the calls in errors ("node
  // registrations") and `setting` what sets the limit. `env` is the clock
  // (null: Env::Default(); not owned, must outlive the limiter).
  RateLimiter(int per_minute, absl::string_view what, absl::string_view setting,
              Env* env);

  // Takes one token of `caller`'s bucket. ResourceExhausted naming the
  // caller, the limit and how long to wait when it has none (or when
  // kMaxRateLimitedCallers others are all throttled).
  absl::Status Admit(absl::string_view caller);

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;  // when `tokens` was last brought up to date
  };
  // `bucket` refilled up to now_ms.
  double Refilled(const Bucket& bucket, int64_t now_ms) const;
  void ForgetRefilledLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double per_minute_;
  const std::string what_;
  const std::string setting_;
  Env* const env_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_RATE_LIMITER_H_
