// For bench/weights_bench: small helpers — a self-removing temporary
// directory, a scope guard, a phase timer that also counts CPU time, and a
// parallel loop. Each type is used from one thread unless stated.
#ifndef MESHPOOL_BENCH_WEIGHTS_BENCH_UTIL_H_
#define MESHPOOL_BENCH_WEIGHTS_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/weights_bench_report.h"

namespace meshpool::bench {

// A fresh directory under `base`, removed with its contents when this goes
// away.
class ScopedDir {
 public:
  // ErrnoToStatus's codes when `base` is unusable (the message says so).
  static absl::StatusOr<ScopedDir> Create(const std::string& base);
  ScopedDir(ScopedDir&& o) noexcept : path_(std::exchange(o.path_, "")) {}
  ScopedDir& operator=(ScopedDir&&) = delete;
  ~ScopedDir();
  const std::string& path() const { return path_; }

 private:
  explicit ScopedDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Runs `fn` when it goes away (best-effort cleanup on every exit path).
class Defer {
 public:
  explicit Defer(std::function<void()> fn) : fn_(std::move(fn)) {}
  Defer(const Defer&) = delete;
  Defer& operator=(const Defer&) = delete;
  ~Defer() {
    if (fn_) fn_();
  }

 private:
  std::function<void()> fn_;
};

// Times one phase from construction (or Restart) to Stop: wall clock, this
// process's CPU (getrusage) and the CPU of the processes `nodes` names
// (/proc/PID/stat; the local cluster's nodes).
class Meter {
 public:
  explicit Meter(std::vector<pid_t> nodes);
  void Restart();
  // node_cpu is -1 when no node pids were given.
  Phase Stop(std::string name, uint64_t bytes) const;

 private:
  double NodeCpu() const;
  const std::vector<pid_t> nodes_;
  absl::Time start_;
  double cpu_ = 0;
  double node_cpu_ = 0;
};

// Runs fn(i) for every i in [0, count) on `threads` threads, each taking
// the next i; stops handing out work after the first error and returns it.
absl::Status ParallelFor(int threads, size_t count,
                         const std::function<absl::Status(size_t)>& fn);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_WEIGHTS_BENCH_UTIL_H_
