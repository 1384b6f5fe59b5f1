#include "bench/weights_bench_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "common/process_info.h"

namespace meshpool::bench {
namespace {

double RusageSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

// CPU seconds (user + system) a process has used; 0 when it is gone.
double ProcessCpuSecondsOrZero(pid_t pid) {
  return ProcessCpuSeconds(pid).value_or(0);
}

}  // namespace

absl::StatusOr<ScopedDir> ScopedDir::Create(const std::string& base) {
  std::string pattern = base + "/meshpool-weights-bench-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("mkdtemp in ", base,
                                             " (choose another with --dir)"));
  }
  return ScopedDir(pattern);
}

ScopedDir::~ScopedDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

Meter::Meter(std::vector<pid_t> nodes) : nodes_(std::move(nodes)) { Restart(); }

void Meter::Restart() {
  start_ = absl::Now();
  cpu_ = RusageSeconds();
  node_cpu_ = NodeCpu();
}

Phase Meter::Stop(std::string name, uint64_t bytes) const {
  Phase p;
  p.name = std::move(name);
  p.bytes = bytes;
  p.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  p.client_cpu = RusageSeconds() - cpu_;
  p.node_cpu = nodes_.empty() ? -1 : NodeCpu() - node_cpu_;
  return p;
}

double Meter::NodeCpu() const {
  double s = 0;
  for (pid_t pid : nodes_) s += ProcessCpuSecondsOrZero(pid);
  return s;
}

absl::Status ParallelFor(int threads, size_t count,
                         const std::function<absl::Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < count && !failed.load(); i = next++) {
        absl::Status s = fn(i);
        if (!s.ok()) {
          failed = true;
          absl::MutexLock lock(&mu);
          if (first.ok()) first = std::move(s);
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace meshpool::bench
