// For bench/weights_bench: the results of one run and the table they are
// printed as. Plain values; not thread-safe.
#ifndef MESHPOOL_BENCH_WEIGHTS_BENCH_REPORT_H_
#define MESHPOOL_BENCH_WEIGHTS_BENCH_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace meshpool::bench {

// Load must reach this share of the raw WRITE bandwidth...
inline constexpr double kLoadTarget = 0.7;
// ...and ReadTensor this share of the raw READ bandwidth.
inline constexpr double kReadTarget = 0.85;

// One timed phase.
struct Phase {
  std::string name;
  uint64_t bytes = 0;     // payload moved (tensor bytes for load/read)
  double seconds = 0;     // wall time
  double client_cpu = 0;  // this process, user + system seconds
  double node_cpu = -1;   // the local nodes together; < 0: unknown
  std::string detail;     // e.g. "3 passes", "4 threads x 8MiB calls"

  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

struct Report {
  // The exact parameters, in print order ("model", "2GiB in 4 files ...").
  std::vector<std::pair<std::string, std::string>> params;
  Phase raw_write, raw_read, load, read;
  std::vector<Phase> breakdown;  // --breakdown: the parts of a load
  std::string transport;         // "tcp" / "verbs", as the nodes serve
  size_t raw_endpoints = 0;
  uint64_t stripe_bytes = 0;
  size_t verified_tensors = 0;
  uint64_t verified_bytes = 0;
};

// Prints the parameters, the main table (raw write, raw read, load with its
// ratio to raw write and target, read with its ratio to raw read and
// target), the breakdown and the verification line. Phases without a name
// (a failed run did not reach them) are left out.
void PrintReport(const Report& report, std::FILE* out);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_WEIGHTS_BENCH_REPORT_H_
