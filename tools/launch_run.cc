// RunLaunchPlan: runs a LaunchPlan's commands here as child processes, streams
// their output line by line marked with host and role, and stops them.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "common/posix.h"
#include "tools/launch.h"
#include "tools/local_cluster.h"

namespace meshpool::tools {
namespace {

// How long stopped children get before SIGKILL.
constexpr absl::Duration kStopGrace = absl::Seconds(10);
// A reaped child's reader stops after this long without output.
constexpr absl::Duration kDrainQuiet = absl::Milliseconds(100);
// How often RunLaunchPlan looks for a stop signal and exited children.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(100);
// What the coordinator prints once it serves (tools/cmd_servers.cc).
constexpr absl::string_view kCoordinatorListening =
    "meshpool coordinator listening on";

// One running command: its process and the thread that copies its output.
struct Child {
  LaunchCommand command;
  pid_t pid = -1;
  // Set once the process was reaped: the reader drains what the pipe
  // still holds and stops at its first quiet moment (kDrainQuiet), even if
  // a grandchild still holds the pipe open.
  std::atomic<bool> reaped{false};
  std::thread reader;
};

// Marks `c` reaped and joins its reader.
void Finish(Child& c) {
  c.reaped = true;
  if (c.reader.joinable()) c.reader.join();
}

// Every output line goes through here, whole, marked by its child; a
// check's lines are kept for CheckReportedDevices instead.
class Output {
 public:
  void Line(const LaunchCommand& c, absl::string_view line) {
    absl::MutexLock lock(&mu_);
    if (c.role == "check") {
      absl::StrAppend(&captured_[c.host], line, "\n");
      return;
    }
    std::fprintf(stdout, "[%s %s] %.*s\n", c.host.c_str(), c.role.c_str(),
                 static_cast<int>(line.size()), line.data());
    std::fflush(stdout);
    if (c.role == "coordinator" &&
        absl::StrContains(line, kCoordinatorListening)) {
      listening_ = true;
    }
  }
  // True once the coordinator said it listens, or false at `deadline`.
  bool AwaitListening(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]()
                     ABSL_SHARED_LOCKS_REQUIRED(mu_) { return listening_; };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    return listening_;
  }

  // What `host`'s check printed.
  std::string Captured(const std::string& host) {
    absl::MutexLock lock(&mu_);
    return captured_[host];
  }

 private:
  absl::Mutex mu_;
  bool listening_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> captured_ ABSL_GUARDED_BY(mu_);
};

// Starts `c` with stdout and stderr into one pipe (read by a thread that
// hands lines to `out`) and `c.input` on stdin. The child dies with us
// where the platform can say so (Linux).
absl::StatusOr<std::unique_ptr<Child>> Start(const LaunchCommand& c,
                                             Output& out) {
  int output[2], input[2];
  if (::pipe(output) != 0) return ErrnoToStatus(errno, "pipe");
  if (::pipe(input) != 0) {
    ::close(output[0]);
    ::close(output[1]);
    return ErrnoToStatus(errno, "pipe");
  }
  std::vector<char*> argv;
  for (const std::string& a : c.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {output[0], output[1], input[0], input[1]}) ::close(fd);
    return ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    DieWithParent();
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::dup2(input[0], STDIN_FILENO);
    ::dup2(output[1], STDOUT_FILENO);
    ::dup2(output[1], STDERR_FILENO);
    ::close(input[0]);
    ::close(input[1]);
    ::close(output[0]);
    ::close(output[1]);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(input[0]);
  ::close(output[1]);
  // The input is small (a device matrix): it fits the pipe's buffer.
  const char* p = c.input.data();
  for (size_t left = c.input.size(); left > 0;) {
    const ssize_t n = ::write(input[1], p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child exited: its status says why
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(input[1]);
  auto child = std::make_unique<Child>();
  child->command = c;
  child->pid = pid;
  const int fd = output[0];
  child->reader = std::thread([fd, &out, c = child.get()] {
    const LaunchCommand* cmd = &c->command;
    std::string buffer;
    char chunk[4096];
    while (true) {
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(
          &p, 1, static_cast<int>(absl::ToInt64Milliseconds(kDrainQuiet)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (c->reaped) break;  // dead, and nothing more is coming
        continue;
      }
      const ssize_t n = ::read(fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buffer.append(chunk, static_cast<size_t>(n));
      for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
        std::string line = buffer.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.pop_back();  // -tt
        out.Line(*cmd, line);
        buffer.erase(0, nl + 1);
      }
    }
    if (!buffer.empty()) out.Line(*cmd, buffer);
    ::close(fd);
  });
  return child;
}

std::string Describe(int status) {
  if (WIFEXITED(status))
    return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return "stopped";
}

// SIGTERM to every child, nodes first; SIGKILL after kStopGrace; reaps
// them and joins their readers.
void StopAll(std::vector<std::unique_ptr<Child>>& children) {
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    if ((*it)->pid > 0) ::kill((*it)->pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + kStopGrace;
  for (auto& c : children) {
    if (c->pid <= 0) continue;
    int status = 0;
    while (::waitpid(c->pid, &status, WNOHANG) == 0) {
      if (absl::Now() >= deadline) {
        ::kill(c->pid, SIGKILL);
        ::waitpid(c->pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    c->pid = -1;
  }
  for (auto& c : children) Finish(*c);
  children.clear();
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> AskHosts(
    const std::vector<LaunchCommand>& checks) {
  // All at once: doctor registers a pool on each device (a few seconds).
  Output out;
  std::vector<std::unique_ptr<Child>> children;
  absl::Status started;
  for (const LaunchCommand& c : checks) {
    absl::StatusOr<std::unique_ptr<Child>> child = Start(c, out);
    if (!child.ok()) {
      started = child.status();
      break;
    }
    children.push_back(*std::move(child));
  }
  for (std::unique_ptr<Child>& c : children) {
    int status = 0;
    ::waitpid(c->pid, &status, 0);
    c->pid = -1;
    Finish(*c);
  }
  MESHPOOL_RETURN_IF_ERROR(started);
  std::map<std::string, std::string> reports;
  for (const LaunchCommand& c : checks) reports[c.host] = out.Captured(c.host);
  return reports;
}

absl::StatusOr<std::string> RunLaunchPlan(const LaunchPlan& plan,
                                          absl::Duration start_timeout) {
  // A child that exits before taking its input must not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  Output out;
  std::vector<std::unique_ptr<Child>> children;
  auto fail = [&](absl::Status s) {
    StopAll(children);
    return s;
  };
  // Every host's devices first, then each report against its links.
  if (!plan.checks.empty()) {
    MESHPOOL_ASSIGN_OR_RETURN(auto reports, AskHosts(plan.checks));
    for (const LaunchHost& host : plan.hostfile.hosts) {
      if (host.links.empty()) continue;
      MESHPOOL_RETURN_IF_ERROR(CheckReportedDevices(host, reports[host.name]));
    }
  }
  for (const LaunchCommand& c : plan.setup) {
    MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Child> child, Start(c, out));
    int status = 0;
    ::waitpid(child->pid, &status, 0);
    child->pid = -1;
    Finish(*child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return fail(absl::UnavailableError(
          absl::StrCat("writing the device matrix on ", c.host, " failed (",
                       Describe(status), "); check that --exec reaches it")));
    }
  }
  absl::StatusOr<std::unique_ptr<Child>> coordinator =
      Start(plan.coordinator, out);
  if (!coordinator.ok()) return fail(coordinator.status());
  children.push_back(*std::move(coordinator));
  const absl::Time deadline = absl::Now() + start_timeout;
  while (
      !out.AwaitListening(std::min(deadline, absl::Now() + kWatchInterval))) {
    int status = 0;
    if (::waitpid(children[0]->pid, &status, WNOHANG) == children[0]->pid) {
      children[0]->pid = -1;
      return fail(absl::UnavailableError(absl::StrCat(
          "the coordinator on ", plan.coordinator.host, " exited (",
          Describe(status), ") before it listened; its output is above")));
    }
    if (TakePendingStopSignal() > 0) {
      return fail(absl::CancelledError(
          "stopped by a signal before the coordinator listened"));
    }
    if (absl::Now() >= deadline) {
      return fail(absl::UnavailableError(absl::StrCat(
          "the coordinator on ", plan.coordinator.host,
          " did not say it listens within ",
          absl::FormatDuration(start_timeout), "; its output is above")));
    }
  }
  for (const LaunchCommand& c : plan.nodes) {
    absl::StatusOr<std::unique_ptr<Child>> node = Start(c, out);
    if (!node.ok()) return fail(node.status());
    children.push_back(*std::move(node));
  }
  std::printf(
      "meshpool launch: coordinator %s, %zu nodes started; Ctrl-C stops them\n",
      plan.coordinator_address.c_str(), plan.nodes.size());
  std::fflush(stdout);
  // Until a stop signal: a node that exits is reported and the rest serve
  // on; the coordinator's exit ends the launch (nothing serves without it).
  std::string why;
  while (why.empty()) {
    if (TakePendingStopSignal() > 0) {
      why = "stop signal: stopping every node and the coordinator";
      break;
    }
    for (auto& c : children) {
      int status = 0;
      if (c->pid <= 0 || ::waitpid(c->pid, &status, WNOHANG) != c->pid) {
        continue;
      }
      c->pid = -1;
      const std::string what =
          absl::StrCat(c->command.role, " on ", c->command.host, " exited (",
                       Describe(status), ")");
      if (c->command.role == "coordinator") {
        why = what + ": stopping the nodes";
        break;
      }
      std::printf("meshpool launch: %s; the others serve on\n", what.c_str());
      std::fflush(stdout);
    }
    if (why.empty()) absl::SleepFor(kWatchInterval);
  }
  StopAll(children);
  return why;
}

}  // namespace meshpool::tools
