// meshpool/common/env.h: the one seam between meshpool's libraries and the
// process around them: what time it is, and where log lines go (after
// leveldb's Env and info_log). Libraries never print: a node or coordinator
// reports what it noticed through Env::Log, and the program that embeds it
// decides where that goes (the `meshpool` binary: stderr; tests: a record
// they can assert on). Tests also drive time through it.
//
// Options structs take an `Env*` (not owned; it must outlive what uses it);
// null means Env::Default(): the real clock, and log lines dropped.
//
// Thread-safety: implementations must be thread-safe; Default() is.
#ifndef MESHPOOL_COMMON_ENV_H_
#define MESHPOOL_COMMON_ENV_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshpool {

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide default: absl::Now(), and Log discards. Never null;
  // lives for the whole process.
  static Env* Default();

  // Wall-clock time, as leases, expiries and failure detection use it.
  virtual absl::Time Now() = 0;

  // One line from `source` ("node", "coordinator", ...): something an
  // operator should know (a peer became unreachable or came back, a
  // background step failed and will be retried). Never on a data path.
  virtual void Log(absl::string_view source, absl::string_view message) = 0;
};

// `env`, or Env::Default() when it is null.
inline Env* EnvOrDefault(Env* env) {
  return env != nullptr ? env : Env::Default();
}

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_ENV_H_
