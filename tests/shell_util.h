// For tests that run a command line (the `meshpool` binary, `ip`): its exit
// status and everything it printed.
#ifndef MESHPOOL_TESTS_SHELL_UTIL_H_
#define MESHPOOL_TESTS_SHELL_UTIL_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace meshpool::testing {

struct ShellResult {
  int exit_code = -1;  // -1 when it could not start or did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` with /bin/sh and waits for it.
inline ShellResult Shell(const std::string& command) {
  ShellResult run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
    run.output.append(buf, n);
  }
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_SHELL_UTIL_H_
