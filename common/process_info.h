// meshpool/common: what the OS knows about a running process, for
// benchmarks and tests that watch the processes they start: CPU time used,
// whether it has exited, how many threads this process has.
//
// Linux reads /proc (process_info_linux.cc); macOS asks libproc
// (process_info_darwin.cc, written against Apple's documented API and not
// yet compiled on a Mac). Stateless and thread-safe.
#ifndef MESHPOOL_COMMON_PROCESS_INFO_H_
#define MESHPOOL_COMMON_PROCESS_INFO_H_

#include <sys/types.h>

#include <cstddef>

#include "absl/status/statusor.h"

namespace meshpool {

// CPU seconds (user + system) process `pid` has used so far. NotFound when
// it is gone (reaped); Internal when the OS's answer cannot be read.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

// Whether `pid` has exited: a zombie not yet reaped, or gone. Its files,
// sockets and devices are closed by then. Does not reap it.
bool ProcessHasExited(pid_t pid);

// The number of threads of this process; Internal when it cannot be read.
absl::StatusOr<size_t> SelfThreadCount();

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_PROCESS_INFO_H_
