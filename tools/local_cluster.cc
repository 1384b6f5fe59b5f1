#include "tools/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "placement/coordinator_client.h"

namespace meshpool::tools {
namespace {

constexpr absl::Duration kStopGrace = absl::Seconds(3);

// fork + exec `binary args...`; the child's stdout goes to `stdout_fd` when
// >= 0. The child dies with us.
absl::StatusOr<pid_t> Spawn(const std::string& binary,
                            const std::vector<std::string>& args,
                            int stdout_fd, bool quiet) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
    if (quiet) {
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    }
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

std::string ExitDescription(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return "unknown status";
}

}  // namespace

void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  std::string binary = options.binary;
  if (binary.empty()) {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n < 0) return ErrnoToStatus(errno, "readlink /proc/self/exe");
    binary.assign(buf, n);
  }
  cluster->binary_ = binary;
  cluster->quiet_ = options.quiet;
  // The coordinator prints its bound address as its first stdout line.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  std::vector<std::string> coordinator_args = {
      "coordinator", "--listen",
      absl::StrCat("127.0.0.1:", options.coordinator_port)};
  coordinator_args.insert(coordinator_args.end(),
                          options.coordinator_args.begin(),
                          options.coordinator_args.end());
  if (!options.state_dir.empty()) {
    coordinator_args.push_back("--state-dir");
    coordinator_args.push_back(options.state_dir);
    cluster->restart_coordinator_ = true;
  }
  // The coordinator is silent when healthy; its errors always show.
  absl::StatusOr<pid_t> pid =
      Spawn(binary, coordinator_args, fds[1], /*quiet=*/false);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  cluster->coordinator_pid_ = *pid;
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(fds[0]);
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.empty() || words.back().find(':') == std::string::npos) {
    return absl::UnavailableError(
        "the coordinator did not start (its error is above); is the port "
        "in use? pick another with --port");
  }
  cluster->coordinator_ = words.back();
  // A restart binds the port this one got.
  coordinator_args[2] = cluster->coordinator_;
  cluster->coordinator_args_ = coordinator_args;
  for (int i = 0; i < options.nodes; ++i) {
    std::vector<std::string> args = {
        "node", "--coordinator", cluster->coordinator_, "--capacity",
        absl::StrCat(options.capacity_bytes), "--node-id",
        absl::StrCat("node-", i + 1)};
    if (options.slab_bytes != 0) {
      args.push_back("--slab-size");
      args.push_back(absl::StrCat(options.slab_bytes));
    }
    args.insert(args.end(), options.node_args.begin(), options.node_args.end());
    MESHPOOL_ASSIGN_OR_RETURN(pid_t node, Spawn(binary, args, -1, options.quiet));
    cluster->nodes_.push_back(node);
    cluster->node_args_.push_back(std::move(args));
  }
  // Wait until every node registered.
  MESHPOOL_ASSIGN_OR_RETURN(
      auto coordinator,
      placement::CoordinatorClient::Connect(cluster->coordinator_));
  absl::Time deadline = absl::Now() + options.start_timeout;
  while (true) {
    int alive = 0;
    absl::StatusOr<proto::ClusterMap> map = coordinator->GetClusterMap();
    if (map.ok()) {
      for (const auto& e : map->nodes()) alive += e.state() == proto::NODE_ALIVE;
    }
    if (alive >= options.nodes) break;
    for (pid_t p : cluster->nodes_) {
      int status;
      if (waitpid(p, &status, WNOHANG) == p) {
        return absl::UnavailableError(absl::StrCat(
            "memory node process ", p, " ended (", ExitDescription(status),
            ") before registering; run `meshpool node` by hand to see why"));
      }
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat(
          "only ", alive, " of ", options.nodes, " nodes registered within ",
          absl::FormatDuration(options.start_timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(); }

std::string LocalCluster::WaitForStop(
    const std::function<void(const std::string&)>& report, bool restart_nodes) {
  // Poll children while waiting for a signal.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec tick{0, 200 * 1000 * 1000};
  while (true) {
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig > 0) return absl::StrCat("stopping on signal ", sig);
    int status;
    if (coordinator_pid_ > 0 && waitpid(coordinator_pid_, &status, WNOHANG) == coordinator_pid_) {
      coordinator_pid_ = -1;
      if (!restart_coordinator_) {
        return absl::StrCat("the coordinator ended (", ExitDescription(status),
                            "); stopping the cluster");
      }
      if (absl::Now() - coordinator_started_ < absl::Seconds(2)) {
        return absl::StrCat(
            "the coordinator ended again (", ExitDescription(status),
            ") right after a restart; stopping the cluster (run "
            "`meshpool coordinator` by hand to see why)");
      }
      report(RestartCoordinator(status));
      if (coordinator_pid_ < 0)
        return "the coordinator could not be restarted; stopping the cluster";
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      pid_t p = nodes_[i];
      if (p <= 0 || waitpid(p, &status, WNOHANG) != p) continue;
      nodes_[i] = -1;
      const std::string name = absl::StrCat("node-", i + 1);
      if (!restart_nodes) {
        report(absl::StrCat("memory node ", name, " (pid ", p, ") ended (",
                            ExitDescription(status),
                            "); the cluster serves on without it (--restart-nodes "
                            "starts dead nodes again)"));
        continue;
      }
      absl::StatusOr<pid_t> again = Spawn(binary_, node_args_[i], -1, quiet_);
      if (again.ok()) nodes_[i] = *again;
      report(absl::StrCat("memory node ", name, " (pid ", p, ") ended (", ExitDescription(status),
                          "); ",
                          again.ok() ? absl::StrCat("restarted as pid ", *again)
                                     : absl::StrCat("restarting it failed: ",
                                                    again.status().ToString())));
    }
  }
}

std::string LocalCluster::RestartCoordinator(int status) {
  const std::string ended =
      absl::StrCat("the coordinator ended (", ExitDescription(status), "); ");
  // Its port may stay taken for a moment (connections in TIME_WAIT do not
  // block a listener, but the old socket may still be closing).
  for (int attempt = 0; attempt < 50; ++attempt) {
    absl::StatusOr<pid_t> pid =
        Spawn(binary_, coordinator_args_, -1, /*quiet=*/false);
    if (!pid.ok())
      return absl::StrCat(ended,
                          "restarting it failed: ", pid.status().ToString());
    absl::SleepFor(absl::Milliseconds(200));
    int again;
    if (waitpid(*pid, &again, WNOHANG) == 0) {
      coordinator_pid_ = *pid;
      coordinator_started_ = absl::Now();
      return absl::StrCat(ended, "restarted from its state as pid ", *pid,
                          " on ", coordinator_);
    }
  }
  return absl::StrCat(ended, "it would not start again on ", coordinator_);
}

void LocalCluster::Stop() {
  std::vector<pid_t> all = nodes_;
  all.push_back(coordinator_pid_);
  for (pid_t p : all) if (p > 0) kill(p, SIGTERM);
  absl::Time deadline = absl::Now() + kStopGrace;
  for (pid_t p : all) {
    if (p <= 0) continue;
    while (waitpid(p, nullptr, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  nodes_.clear();
  coordinator_pid_ = -1;
}

}  // namespace meshpool::tools
