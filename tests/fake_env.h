// tests/: an Env (common/env.h) whose clock the test moves by hand and
// whose log lines the test can read. Shared by every test that drives
// time: the node's leases and expiries, eviction, the coordinator's
// failure detection.
//
// Thread-safe: the code under test reads the clock and logs from its own
// threads while the test advances it.
#ifndef MESHPOOL_TESTS_FAKE_ENV_H_
#define MESHPOOL_TESTS_FAKE_ENV_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"

namespace meshpool::testing {

class FakeEnv final : public Env {
 public:
  // Starts at a fixed, recent-looking time (not the machine's clock), so
  // runs are repeatable.
  explicit FakeEnv(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

  // Records "<source>: <message>".
  void Log(absl::string_view source, absl::string_view message) override {
    absl::MutexLock lock(&mu_);
    logged_.push_back(absl::StrCat(source, ": ", message));
  }
  std::vector<std::string> logged() const {
    absl::MutexLock lock(&mu_);
    return logged_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> logged_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_FAKE_ENV_H_
