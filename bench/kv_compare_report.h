// For bench/kv_compare: the results, the printed table and the JSON file.
// Plain values and functions; use from one thread.
#ifndef MESHPOOL_BENCH_KV_COMPARE_REPORT_H_
#define MESHPOOL_BENCH_KV_COMPARE_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace meshpool::bench {

// One system at one block size. GB = 1e9 bytes.
struct Row {
  uint64_t block = 0;
  std::string system;  // "redis", "memcached", "meshpool"
  double put_blk_s = 0;
  double put_gbs = 0;
  double get_blk_s = 0;
  double get_gbs = 0;
  uint64_t rounds = 0;  // timed rounds, all threads together
  double wall_s = 0;
};

struct Report {
  std::string command;  // the exact command line, shell-quoted
  int threads = 0;
  int batch = 0;
  double seconds = 0;
  std::string verify;
  std::vector<std::string> systems;      // what was reached
  std::optional<double> iperf3_bytes_s;  // with `threads` streams
  std::optional<double> memcpy_bytes_s;  // with `threads` threads
  // memcpy + XXH3 of each copied block, per block size, `threads` threads.
  std::map<uint64_t, double> copy_digest_bytes_s;
  std::vector<Row> rows;
};

// argv as one line a shell would run again.
std::string QuoteCommand(int argc, char** argv);

// meshpool's rate over each other system's and over the ceilings at
// `block`, for GET (`get`) or PUT: ("meshpool/redis", ratio) and so on;
// nullopt where either side was not measured.
std::vector<std::pair<std::string, std::optional<double>>> Ratios(
    const Report& report, uint64_t block, bool get);

// The parameters, what was reached, and the ceilings.
void PrintHeader(const Report& report, FILE* out);
// A block size's heading and the table's column names.
void PrintBlockStart(uint64_t block, uint64_t ring, uint64_t working_set,
                     FILE* out);
void PrintRow(const Row& row, FILE* out);
// The ratio lines of one block size (GET, then PUT).
void PrintRatios(const Report& report, uint64_t block, FILE* out);

// Writes everything in `report` and the run's outcome to `path`.
// ErrnoToStatus's codes when the file cannot be written.
absl::Status WriteJson(const Report& report, const absl::Status& outcome,
                       const std::string& path);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_KV_COMPARE_REPORT_H_
