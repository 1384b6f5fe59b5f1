// For bench/kv_compare: the machine's ceilings, measured in the same run as
// the stores, with the same concurrency.
//
//   MeasureIperf3: runs `iperf3 -c HOST -p PORT -P streams -t seconds -J`
//     against an `iperf3 -s` the caller started (bench/kv_compare.sh starts
//     one on loopback) and returns end.sum_received.bits_per_second / 8, in
//     bytes per second: what TCP over this path moves with that many
//     streams.
//   MeasureMemcpy: `threads` threads each memcpy their own buffer of
//     `bytes_per_thread` (larger than the caches) over and over for
//     `seconds`; returns bytes copied per second, all threads together.
//   MeasureCopyAndDigest: the same, but each thread copies its buffer one
//     `block_bytes` block at a time and, after each block, digests the copy
//     with XXH3 in the store's digest chunks (format::kDigestChunkBytes):
//     what a verified GET over shared memory does with a block (copy out
//     of the pool, then check the value's digests).
//
// Thread-compatible: call from one thread (each starts its own threads or
// process and waits for them).
#ifndef MESHPOOL_BENCH_KV_COMPARE_CEILINGS_H_
#define MESHPOOL_BENCH_KV_COMPARE_CEILINGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool::bench {

// Errors: InvalidArgument for a malformed address or streams/seconds out of
// range; NotFound when the iperf3 binary cannot be run (install the iperf3
// package or pass its path); Unavailable when iperf3 fails (its own error
// message is included: is `iperf3 -s` listening there?); DataLoss when its
// JSON lacks end.sum_received.bits_per_second.
absl::StatusOr<double> MeasureIperf3(const std::string& binary,
                                     absl::string_view address, int streams,
                                     double seconds);

// ResourceExhausted when the buffers cannot be allocated; InvalidArgument
// for threads < 1, bytes_per_thread < 1 MiB or seconds <= 0.
absl::StatusOr<double> MeasureMemcpy(int threads, uint64_t bytes_per_thread,
                                     double seconds);

// As MeasureMemcpy; also InvalidArgument when block_bytes is 0 or larger
// than bytes_per_thread.
absl::StatusOr<double> MeasureCopyAndDigest(int threads,
                                            uint64_t bytes_per_thread,
                                            uint64_t block_bytes,
                                            double seconds);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_KV_COMPARE_CEILINGS_H_
