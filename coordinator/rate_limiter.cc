#include "coordinator/rate_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace meshpool::coordinator {

RateLimiter::RateLimiter(int per_minute, absl::string_view what,
                         absl::string_view setting, Env* env)
    : per_minute_(std::max(per_minute, 0)),
      what_(what),
      setting_(setting),
      env_(EnvOrDefault(env)) {}

double RateLimiter::Refilled(const Bucket& bucket, int64_t now_ms) const {
  const double elapsed_ms =
      static_cast<double>(std::max<int64_t>(now_ms - bucket.at_ms, 0));
  return std::min(per_minute_, bucket.tokens + elapsed_ms * per_minute_ / 60e3);
}

void RateLimiter::ForgetRefilledLocked(int64_t now_ms) {
  absl::erase_if(buckets_, [&](const auto& entry) {
    return Refilled(entry.second, now_ms) >= per_minute_;
  });
}

absl::Status RateLimiter::Admit(absl::string_view caller) {
  if (per_minute_ == 0) return absl::OkStatus();
  const int64_t now_ms = absl::ToUnixMillis(env_->Now());
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(caller);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxRateLimitedCallers) ForgetRefilledLocked(now_ms);
    if (buckets_.size() >= kMaxRateLimitedCallers) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many callers making ", what_, " at once (",
          kMaxRateLimitedCallers, " throttled); retry in a minute"));
    }
    it = buckets_.emplace(std::string(caller), Bucket{per_minute_, now_ms})
             .first;
  }
  Bucket& bucket = it->second;
  bucket.tokens = Refilled(bucket, now_ms);
  bucket.at_ms = now_ms;
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return absl::OkStatus();
  }
  const double wait_s = std::ceil((1 - bucket.tokens) * 60 / per_minute_);
  return absl::ResourceExhaustedError(
      absl::StrCat(caller, " made more than ", per_minute_, " ", what_,
                   " in a minute (this coordinator's limit, ", setting_,
                   "); retry in ", wait_s, " s"));
}

}  // namespace meshpool::coordinator
