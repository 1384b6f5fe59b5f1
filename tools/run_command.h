// RunCommand: one external command, run to completion with a time limit,
// its output captured. POSIX only (fork, exec, poll), so the tools that
// shell out (openssl for certificates, Apple's tools for `doctor`) run the
// same way on Linux and macOS.
//
// Thread-safety: safe to call from several threads; each call owns its
// child. The child inherits no descriptor but its output pipe.
#ifndef MESHPOOL_TOOLS_RUN_COMMAND_H_
#define MESHPOOL_TOOLS_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshpool::tools {

// Output kept from one command, at most; the rest is read and dropped.
inline constexpr size_t kMaxCommandOutputBytes = size_t{4} << 20;

struct CommandResult {
  int exit_code = 0;   // the command's exit status (128 + N for signal N)
  std::string output;  // standard output (and error, when merged)
};

// Runs `argv` (argv[0] looked up on PATH) to completion. With
// `merge_stderr` its standard error joins `output`; otherwise it goes to
// this process's. REQUIRES: argv is not empty.
// NotFound when argv[0] cannot be executed (not installed, not on PATH);
// DeadlineExceeded when it runs past `timeout` (it is killed, with every
// process it started: it runs in a process group of its own);
// errors of pipe/fork through ErrnoToStatus. A non-zero exit is not an
// error here: it is in exit_code.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         bool merge_stderr);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_RUN_COMMAND_H_
