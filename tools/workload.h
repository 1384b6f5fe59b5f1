// The load generator behind `meshpool bench` and `meshpool demo`: threads
// issue batched GETs and PUTs against a key space, every value
// self-describing (key id, version, pattern) so each GET is checked for torn
// or foreign bytes.
#ifndef MESHPOOL_TOOLS_WORKLOAD_H_
#define MESHPOOL_TOOLS_WORKLOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshpool/client.h"

namespace meshpool::tools {

struct WorkloadOptions {
  uint64_t value_bytes = 4096;
  int threads = 4;
  int batch = 1;                 // keys per operation (1: Get/Put, else
                                 // BatchGet/BatchPut)
  bool register_buffers = true;  // RegisterBuffer the value buffers
  double read_fraction = 0.9;    // share of operations that are GETs
  absl::Duration duration = absl::Seconds(5);
  uint64_t keys = 1000;          // key space, written once before timing
  uint64_t seed = 1;
};
inline constexpr uint64_t kMinWorkloadValueBytes = 16;  // id + version

struct WorkloadResult {
  uint64_t get_keys = 0;
  uint64_t put_keys = 0;
  uint64_t misses = 0;            // NotFound on GET
  uint64_t errors = 0;            // any other failure
  uint64_t corrupt = 0;           // GETs returning bytes never put
  std::string first_error;
  absl::Duration elapsed;
  double p50_us = 0, p99_us = 0, p999_us = 0;  // per operation (batch)
  uint64_t operations = 0;
};

// InvalidArgument for nonsensical options; otherwise the measured result
// (errors are counted, not returned).
absl::StatusOr<WorkloadResult> RunWorkload(Client& client,
                                           const WorkloadOptions& options);
std::string FormatWorkload(const WorkloadOptions& options,
                           const WorkloadResult& result);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_WORKLOAD_H_
