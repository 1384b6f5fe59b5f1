#include "tools/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "common/posix.h"
#include "placement/coordinator_client.h"

namespace meshpool::tools {
namespace {

constexpr absl::Duration kStopGrace = absl::Seconds(3);
// `meshpool up --coordinators N`: enough for any failover demo.
constexpr int kMaxLocalCoordinators = 9;
// A child that dies again this soon after a restart is not restarted again.
constexpr absl::Duration kRestartFlapWindow = absl::Seconds(2);

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
    DieWithParent();
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

// The first line `fd` delivers; empty at EOF or once `deadline` passes.
std::string ReadLine(int fd, absl::Time deadline) {
  std::string line;
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return std::string();
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::string();
    char c;
    if (read(fd, &c, 1) != 1) return std::string();
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// A loopback TCP port nothing listens on now (the kernel's pick; another
// process could take it before we bind it, which a local cluster accepts).
absl::StatusOr<int> FreePort() {
  const int fd = SocketCloexec(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    close(fd);
    return ErrnoToStatus(e, "finding a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// True once something accepts TCP connections on 127.0.0.1:port.
bool Accepts(int port) {
  const int fd = SocketCloexec(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
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

int TakePendingStopSignal() {
  sigset_t pending;
  sigemptyset(&pending);
  if (::sigpending(&pending) != 0) return 0;
  if (!sigismember(&pending, SIGINT) && !sigismember(&pending, SIGTERM)) {
    return 0;
  }
  return WaitForStopSignal();  // pending: returns at once
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
  if (options.coordinators < 1 ||
      options.coordinators > kMaxLocalCoordinators) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local cluster runs 1 to ", kMaxLocalCoordinators,
                     " coordinators, not ", options.coordinators));
  }
  if (options.coordinators > 1 && options.state_dir.empty()) {
    return absl::InvalidArgumentError(
        "several coordinators keep their state in a local etcd, whose data "
        "lives in the state directory: drop --no-state");
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  std::string binary = options.binary;
  if (binary.empty()) {
    if (SelfExecutablePath(&binary) != 0) {
      return ErrnoToStatus(errno, "finding this executable's path");
    }
  }
  cluster->binary_ = binary;
  cluster->quiet_ = options.quiet;
  const absl::Time deadline = absl::Now() + options.start_timeout;
  // Flags every coordinator gets.
  std::vector<std::string> shared = options.coordinator_args;
  if (!options.tls_dir.empty()) {
    shared.insert(shared.end(), {"--tls-dir", options.tls_dir});
  }
  if (options.coordinators > 1) {
    MESHPOOL_RETURN_IF_ERROR(cluster->StartEtcd(options, deadline));
    shared.insert(shared.end(), {"--etcd", cluster->etcd_});
    cluster->restart_coordinator_ = true;
  } else if (!options.state_dir.empty()) {
    shared.insert(shared.end(), {"--state-dir", options.state_dir});
    cluster->restart_coordinator_ = true;
  }
  std::vector<std::string> addresses;
  for (int i = 0; i < options.coordinators; ++i) {
    const int port =
        options.coordinator_port == 0 ? 0 : options.coordinator_port + i;
    std::vector<std::string> args = {"coordinator", "--listen",
                                     absl::StrCat("127.0.0.1:", port)};
    args.insert(args.end(), shared.begin(), shared.end());
    MESHPOOL_ASSIGN_OR_RETURN(
        std::string address,
        cluster->StartCoordinator(std::move(args), deadline));
    addresses.push_back(std::move(address));
  }
  cluster->coordinator_ = absl::StrJoin(addresses, ",");
  for (int i = 0; i < options.nodes; ++i) {
    std::vector<std::string> args = {
        "node", "--coordinator", cluster->coordinator_, "--capacity",
        absl::StrCat(options.capacity_bytes), "--node-id",
        absl::StrCat("node-", i + 1)};
    if (options.slab_bytes != 0) {
      args.push_back("--slab-size");
      args.push_back(absl::StrCat(options.slab_bytes));
    }
    if (!options.tls_dir.empty()) {
      args.insert(args.end(), {"--tls-dir", options.tls_dir});
    }
    args.insert(args.end(), options.node_args.begin(), options.node_args.end());
    MESHPOOL_ASSIGN_OR_RETURN(pid_t node, Spawn(binary, args, -1, options.quiet));
    cluster->nodes_.push_back(node);
    cluster->node_args_.push_back(std::move(args));
  }
  // Wait until every node registered.
  MESHPOOL_ASSIGN_OR_RETURN(
      auto coordinator, placement::CoordinatorClient::Connect(
                            cluster->coordinator_, absl::Seconds(3),
                            auth::TlsConfig::InDir(options.tls_dir, "admin")));
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

absl::Status LocalCluster::StartEtcd(const LocalClusterOptions& options,
                                     absl::Time deadline) {
  if (access(options.etcd_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "several coordinators need etcd, and there is none at ",
        options.etcd_binary,
        ": install etcd-server (tools/setup.sh does), or run one coordinator"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(const int client_port, FreePort());
  MESHPOOL_ASSIGN_OR_RETURN(const int peer_port, FreePort());
  const std::string client = absl::StrCat("http://127.0.0.1:", client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
  // Started again on its data directory, etcd keeps its data and member
  // (the --initial-* flags only matter the first time).
  etcd_args_ = {"--name",
                "meshpool-up",
                "--data-dir",
                absl::StrCat(options.state_dir, "/etcd"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                absl::StrCat("meshpool-up=", peer),
                "--logger",
                "zap",
                "--log-level",
                "error"};
  etcd_binary_ = options.etcd_binary;
  MESHPOOL_ASSIGN_OR_RETURN(etcd_pid_,
                            Spawn(etcd_binary_, etcd_args_, -1, quiet_));
  while (!Accepts(client_port)) {
    int status;
    if (waitpid(etcd_pid_, &status, WNOHANG) == etcd_pid_) {
      etcd_pid_ = -1;
      return absl::UnavailableError(absl::StrCat(
          "etcd ended (", ExitDescription(status), ") before it served; run `",
          etcd_binary_, " ", absl::StrJoin(etcd_args_, " "), "` to see why"));
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat("etcd did not serve on ", client, " in time"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  etcd_ = absl::StrCat("127.0.0.1:", client_port);
  return absl::OkStatus();
}

// A coordinator prints its bound address as the last word of its first
// stdout line: "... listening on ADDR" when it leads (or alone), "...
// standing by on ADDR" when another leads.
absl::StatusOr<std::string> LocalCluster::StartCoordinator(
    std::vector<std::string> args, absl::Time deadline) {
  int fds[2];
  if (PipeCloexec(fds) != 0) return ErrnoToStatus(errno, "pipe");
  // The coordinator is silent when healthy; its errors always show.
  absl::StatusOr<pid_t> pid = Spawn(binary_, args, fds[1], /*quiet=*/false);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  const std::string line = ReadLine(fds[0], deadline);
  close(fds[0]);
  coordinators_.push_back(Coordinator{*pid, args});
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.empty() || words.back().find(':') == std::string::npos) {
    return absl::UnavailableError(
        "the coordinator did not start (its error is above); is the port "
        "in use? pick another with --port");
  }
  coordinators_.back().args[2] = words.back();  // a restart binds this port
  return words.back();
}

std::string LocalCluster::WaitForStop(
    const std::function<void(const std::string&)>& report, bool restart_nodes) {
  // Poll children while waiting for a signal.
  while (true) {
    if (const int sig = TakePendingStopSignal(); sig > 0) {
      return absl::StrCat("stopping on signal ", sig);
    }
    absl::SleepFor(absl::Milliseconds(200));
    int status;
    if (etcd_pid_ > 0 && waitpid(etcd_pid_, &status, WNOHANG) == etcd_pid_) {
      absl::StatusOr<pid_t> again = Spawn(etcd_binary_, etcd_args_, -1, quiet_);
      etcd_pid_ = again.ok() ? *again : -1;
      report(absl::StrCat(
          "etcd ended (", ExitDescription(status), "); ",
          again.ok() ? absl::StrCat("restarted on its data as pid ", *again)
                     : absl::StrCat("restarting it failed: ",
                                    again.status().ToString()),
          " (until it serves, the coordinators change nothing)"));
    }
    for (size_t i = 0; i < coordinators_.size(); ++i) {
      Coordinator& c = coordinators_[i];
      if (c.pid <= 0 || waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.pid = -1;
      if (!restart_coordinator_) {
        return absl::StrCat("the coordinator ended (", ExitDescription(status),
                            "); stopping the cluster");
      }
      if (absl::Now() - c.started < kRestartFlapWindow) {
        return absl::StrCat(
            "the coordinator on ", c.args[2], " ended again (",
            ExitDescription(status),
            ") right after a restart; stopping the cluster (run "
            "`meshpool coordinator` by hand to see why)");
      }
      report(RestartCoordinator(i, status));
      if (c.pid < 0)
        return "a coordinator could not be restarted; stopping the cluster";
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

std::string LocalCluster::RestartCoordinator(size_t i, int status) {
  Coordinator& c = coordinators_[i];
  const std::string ended =
      absl::StrCat("the coordinator on ", c.args[2], " ended (",
                   ExitDescription(status), "); ");
  const char* how =
      etcd_.empty() ? "from its state" : "on etcd (it stands by or leads)";
  // Its port may stay taken for a moment (connections in TIME_WAIT do not
  // block a listener, but the old socket may still be closing).
  for (int attempt = 0; attempt < 50; ++attempt) {
    absl::StatusOr<pid_t> pid = Spawn(binary_, c.args, -1, /*quiet=*/false);
    if (!pid.ok())
      return absl::StrCat(ended,
                          "restarting it failed: ", pid.status().ToString());
    absl::SleepFor(absl::Milliseconds(200));
    int again;
    if (waitpid(*pid, &again, WNOHANG) == 0) {
      c.pid = *pid;
      c.started = absl::Now();
      return absl::StrCat(ended, "restarted ", how, " as pid ", *pid);
    }
  }
  return absl::StrCat(ended, "it would not start again on ", c.args[2]);
}

namespace {

// SIGTERM to `pids`, SIGKILL to those still running after kStopGrace;
// reaps them all.
void StopAll(const std::vector<pid_t>& pids) {
  for (pid_t p : pids)
    if (p > 0) kill(p, SIGTERM);
  absl::Time deadline = absl::Now() + kStopGrace;
  for (pid_t p : pids) {
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
}

}  // namespace

void LocalCluster::Stop() {
  std::vector<pid_t> all = nodes_;
  for (const Coordinator& c : coordinators_) all.push_back(c.pid);
  StopAll(all);
  StopAll({etcd_pid_});  // last: the coordinators write to it until they stop
  nodes_.clear();
  coordinators_.clear();
  etcd_pid_ = -1;
}

}  // namespace meshpool::tools
