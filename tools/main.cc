// meshpool: one binary, many subcommands. See `meshpool --help`.
#include <cstdio>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"up", meshpool::tools::RunUp,
     "run a local cluster (coordinator + N nodes) in the foreground"},
    {"launch", meshpool::tools::RunLaunch,
     "start a cluster across the hosts of a hostfile (ssh), stop on Ctrl-C"},
    {"demo", meshpool::tools::RunDemo,
     "start a local cluster, run a short put/get workload, stop"},
    {"coordinator", meshpool::tools::RunCoordinator,
     "run the coordinator (membership, cluster map)"},
    {"node", meshpool::tools::RunNode, "run a memory node"},
    {"put", meshpool::tools::RunPut, "store a value from a file or stdin"},
    {"get", meshpool::tools::RunGet, "fetch a value to stdout or a file"},
    {"del", meshpool::tools::RunDel, "delete a key"},
    {"stat", meshpool::tools::RunStat, "show nodes, capacity, use, objects"},
    {"top", meshpool::tools::RunTop,
     "show the cluster live: nodes, rates, region health"},
    {"pin", meshpool::tools::RunPin,
     "pin keys against eviction (--ttl, --hard, --hold)"},
    {"prefix", meshpool::tools::RunPrefix,
     "how many leading keys are present (KV-cache prefix)"},
    {"bench", meshpool::tools::RunBench,
     "measure ops/s, GB/s and latency percentiles"},
    {"weights", meshpool::tools::RunWeights,
     "load, list, fetch and remove model weights (safetensors)"},
    {"certs", meshpool::tools::RunCerts,
     "make TLS certificates for a cluster (a CA, then one per process)"},
    {"doctor", meshpool::tools::RunDoctor,
     "check this host's RDMA setup and say how to fix it"},
};

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: meshpool COMMAND [flags]   (meshpool COMMAND --help)\n\n"
               "meshpool pools the memory of many machines into one store.\n\n"
               "commands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  }
  std::fprintf(out,
               "\nClient commands read the coordinator from --coordinator "
               "or MESHPOOL_COORDINATOR.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil is built to check every Mutex acquisition for
  // lock-order cycles (about 1,500 instructions of a client's 4 KiB GET,
  // bench/kv_instructions.sh). The tests keep the check; the binary that
  // serves and benchmarks does not pay it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "help") == 0) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "meshpool: unknown command '%s'\n\n", argv[1]);
  Usage(stderr);
  return 2;
}
