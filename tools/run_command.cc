// RunCommand: fork, exec, read the output pipe with poll until EOF or the
// deadline, reap. A second close-on-exec pipe tells exec failure (its
// errno) apart from a command that ran and exited 127.
#include "tools/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/posix.h"

namespace meshpool::tools {
namespace {

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Milliseconds until `deadline`, at least 0, for poll.
int MillisUntil(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         bool merge_stderr) {
  // Everything the child needs is made before fork: it only dups and execs.
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  int exec_error[2];
  if (PipeCloexec(out) != 0) return ErrnoToStatus(errno, "pipe");
  if (PipeCloexec(exec_error) != 0) {
    const int err = errno;
    ::close(out[0]);
    ::close(out[1]);
    return ErrnoToStatus(err, "pipe");
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {out[0], out[1], exec_error[0], exec_error[1]}) ::close(fd);
    return ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    // A group of its own, so that a timeout kills whatever it started too
    // (a helper still holding the output would outlive it otherwise).
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    if (merge_stderr) ::dup2(out[1], STDERR_FILENO);
    ::execvp(args[0], args.data());
    const int err = errno;
    (void)!::write(exec_error[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(exec_error[1]);
  int exec_errno = 0;
  const bool exec_failed =
      ::read(exec_error[0], &exec_errno, sizeof(exec_errno)) ==
      static_cast<ssize_t>(sizeof(exec_errno));
  ::close(exec_error[0]);

  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  char buf[16384];
  while (!exec_failed) {
    if (absl::Now() >= deadline) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, MillisUntil(deadline));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF, or an error: stop reading either way
    const size_t room = kMaxCommandOutputBytes - result.output.size();
    result.output.append(buf, std::min(static_cast<size_t>(n), room));
  }
  ::close(out[0]);
  // Reap: a command that closed its output but keeps running is killed at
  // the deadline too.
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "waitpid");
    }
    if (!timed_out && absl::Now() >= deadline) {
      ::kill(-pid, SIGKILL);
      timed_out = true;
    }
    ::usleep(1000);
  }
  if (exec_failed) {
    if (exec_errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(argv[0], ": no such command on PATH"));
    }
    return ErrnoToStatus(exec_errno, absl::StrCat("exec ", argv[0]));
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(argv[0], " did not finish within ",
                     absl::FormatDuration(timeout), "; it was killed"));
  }
  result.exit_code = ExitCodeOf(status);
  return result;
}

}  // namespace meshpool::tools
