// LocalCluster: a coordinator (or several, on a local etcd) and N memory
// nodes as child processes of this one (`meshpool coordinator` / `meshpool
// node` / `etcd`), all on 127.0.0.1, for `meshpool up`, `meshpool demo` and
// tests. Children get SIGKILL if this process dies. Not thread-safe.
#ifndef MESHPOOL_TOOLS_LOCAL_CLUSTER_H_
#define MESHPOOL_TOOLS_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshpool::tools {

struct LocalClusterOptions {
  std::string binary;  // the meshpool executable; empty = /proc/self/exe
  int nodes = 3;
  uint64_t capacity_bytes = 256ull << 20;  // per node
  uint64_t slab_bytes = 0;                 // 0 = the node's default
  int coordinator_port = 0;  // 0 = any free port; coordinator i: port + i
  absl::Duration start_timeout = absl::Seconds(20);
  bool quiet = true;  // nodes' stderr to /dev/null (the coordinator's shows)
  std::vector<std::string> node_args;        // extra `meshpool node` flags
  std::vector<std::string> coordinator_args;  // extra `meshpool coordinator` flags
  // The coordinator keeps its state here (--state-dir); WaitForStop then
  // starts a coordinator that dies again, on the same port, from that
  // state. Empty: memory only, and a dead coordinator stops the cluster.
  std::string state_dir;
  // Above 1: a one-member etcd (`etcd_binary`, its data in
  // state_dir/etcd) and this many coordinators sharing it: one leads, the
  // others stand by, and WaitForStop starts one that dies again (it
  // stands by). REQUIRES: state_dir when above 1.
  int coordinators = 1;
  std::string etcd_binary = "/usr/bin/etcd";
  // TLS certificates (`meshpool certs init`): the coordinators and nodes
  // serve TLS with DIR's coordinator and node-I certificates, and the
  // cluster watches its nodes with DIR's admin certificate. Empty: no TLS.
  std::string tls_dir;
};

class LocalCluster {
 public:
  // Starts everything and waits until every node is registered alive.
  // Unavailable when a child fails to come up (its exit status is named);
  // InvalidArgument for options that do not fit together.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      const LocalClusterOptions& options);
  ~LocalCluster();  // Stop()

  // "127.0.0.1:port", or with several coordinators all of them, comma
  // separated (what nodes and clients are given).
  const std::string& coordinator_address() const { return coordinator_; }
  // "127.0.0.1:port" of the local etcd; empty with one coordinator.
  const std::string& etcd_address() const { return etcd_; }
  const std::vector<pid_t>& node_pids() const { return nodes_; }
  // Blocks until SIGINT/SIGTERM or until the coordinator exits on its own
  // (without options.state_dir; with it, or with several coordinators, a
  // coordinator that exits is started again and `report`ed); returns a
  // description of why. A memory node that exits is reported through
  // `report` and the cluster serves on without it (its keys read as misses,
  // its region stripes from other copies), or, with `restart_nodes`, is
  // started again under the same id (a new incarnation).
  std::string WaitForStop(const std::function<void(const std::string&)>& report,
                          bool restart_nodes);
  // SIGTERM to every child (etcd last), then SIGKILL after a grace period;
  // reaps them.
  void Stop();

 private:
  struct Coordinator {
    pid_t pid = -1;
    std::vector<std::string> args;  // to restart it (on its bound port)
    absl::Time started = absl::InfinitePast();  // by a restart
  };
  LocalCluster() = default;
  absl::Status StartEtcd(const LocalClusterOptions& options,
                         absl::Time deadline);
  // Starts coordinator `args` and reads the address it prints.
  absl::StatusOr<std::string> StartCoordinator(std::vector<std::string> args,
                                               absl::Time deadline);
  // Starts coordinator i again after it died; returns what to report.
  std::string RestartCoordinator(size_t i, int status);

  std::string binary_;
  bool quiet_ = true;
  std::string coordinator_;
  std::string etcd_;
  std::string etcd_binary_;
  std::vector<std::string> etcd_args_;  // to restart it
  pid_t etcd_pid_ = -1;
  std::vector<Coordinator> coordinators_;
  bool restart_coordinator_ = false;
  std::vector<pid_t> nodes_;
  std::vector<std::vector<std::string>> node_args_;  // to restart node i
};

// Blocks SIGINT and SIGTERM in the calling thread (call before starting any
// thread, so all threads inherit it) and returns once one arrives.
void BlockStopSignals();
int WaitForStopSignal();
// The stop signal (SIGINT or SIGTERM) pending on this process, taken; 0
// when none is. Never blocks: the portable way to poll for one (macOS has
// no timed signal wait). REQUIRES: BlockStopSignals() was called.
int TakePendingStopSignal();

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_LOCAL_CLUSTER_H_
