// `meshpool launch --hostfile FILE`: a cluster across hosts (tools/launch.h).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/hostfile.h"
#include "tools/launch.h"
#include "tools/local_cluster.h"
#include "tools/transport_flags.h"

namespace meshpool::tools {
namespace {

// Asks every host of `plan` (its checks) and finds the links.
absl::StatusOr<DiscoveredLinks> DiscoverHostLinks(const LaunchPlan& plan) {
  std::fprintf(stderr, "meshpool launch: asking %zu hosts for their devices\n",
               plan.checks.size());
  absl::StatusOr<std::map<std::string, std::string>> reports =
      AskHosts(plan.checks);
  if (!reports.ok()) return reports.status();
  return DiscoverLinks(plan.hostfile, *reports);
}

}  // namespace

int RunLaunch(int argc, char** argv) {
  Flags flags(
      "meshpool launch --hostfile hosts.json [--dry-run] "
      "[--insecure | --tls-dir DIR] [flags]",
      "Starts the coordinator and a memory node on every host of the "
      "hostfile through --exec (ssh by default), streams their "
      "output here, and stops them all on Ctrl-C. The hostfile "
      "names each host, its ssh target, the address others dial and "
      "(Thunderbolt) which device reaches which host; launch writes "
      "the device matrix on every host. docs/operations.md has an "
      "example.");
  const LaunchOptions defaults;
  flags.Define("hostfile", "", "the hosts (JSON; see above)");
  flags.DefineBool("dry-run", "print the commands launch would run, and exit");
  flags.Define("exec", defaults.exec,
               "how to run a command line on a host: {ssh}, {host} and "
               "{command} (one word) are replaced");
  flags.Define("binary", defaults.binary, "meshpool's path on the hosts");
  flags.Define("work-dir", defaults.work_dir,
               "where the device matrix is written on each host");
  flags.Define("capacity", defaults.capacity, "every node's pool size");
  flags.Define("tls-dir", "",
               "TLS certificates (`meshpool certs init`), at this path on "
               "every host");
  flags.DefineBool("insecure", "serve without TLS on the hosts' addresses");
  flags.DefineBool("skip-link-check",
                   "do not ask each host (`meshpool doctor --json`) whether "
                   "the devices its links name are there and up");
  flags.DefineBool("discover-links",
                   "find which device reaches which host from every host's "
                   "`meshpool doctor --json` (each cable on a subnet of its "
                   "own) instead of the hostfile's \"links\"; with "
                   "--dry-run it asks the hosts too");
  flags.Define("start-timeout", "30s",
               "how long the coordinator may take to start");
  DefineTransportFlags(flags, /*with_transport=*/true);
  if (int rc = ParseFlags(flags, argc, argv, "launch"); rc >= 0) return rc;

  const std::string path = flags.Get("hostfile");
  if (path.empty()) {
    return Fail("launch", absl::InvalidArgumentError(
                              "give --hostfile FILE (the hosts to start)"));
  }
  absl::StatusOr<Hostfile> hostfile = ReadHostfile(path);
  if (!hostfile.ok()) return Fail("launch", hostfile.status());
  absl::StatusOr<absl::Duration> start_timeout =
      flags.GetDuration("start-timeout");
  if (!start_timeout.ok()) return Fail("launch", start_timeout.status());
  // Checked here, before any host is reached; the nodes get it as given.
  if (absl::StatusOr<uint64_t> size = flags.GetSize("capacity"); !size.ok()) {
    return Fail("launch", size.status());
  }

  LaunchOptions options;
  options.exec = flags.Get("exec");
  options.binary = flags.Get("binary");
  options.work_dir = flags.Get("work-dir");
  options.capacity = flags.Get("capacity");
  options.tls_dir = flags.Get("tls-dir");
  options.insecure = flags.GetBool("insecure");
  options.skip_link_check = flags.GetBool("skip-link-check");
  options.discover_links = flags.GetBool("discover-links");
  options.node_args = TransportArgs(flags);
  absl::StatusOr<LaunchPlan> plan = PlanLaunch(*hostfile, options);
  if (!plan.ok()) return Fail("launch", plan.status());
  const bool dry_run = flags.GetBool("dry-run");
  if (options.discover_links) {
    // Doctor only reads each host (and registers a small pool briefly), so
    // a dry run asks too: it shows the links a launch would use.
    absl::StatusOr<DiscoveredLinks> links = DiscoverHostLinks(*plan);
    if (!links.ok()) return Fail("launch", links.status());
    std::FILE* log = dry_run ? stdout : stderr;
    for (const std::string& note : links->notes) {
      std::fprintf(log, "%smeshpool launch: note: %s\n", dry_run ? "# " : "",
                   note.c_str());
    }
    for (const std::string& cable : links->found) {
      std::fprintf(log, "%smeshpool launch: link %s\n", dry_run ? "# " : "",
                   cable.c_str());
    }
    options.discover_links = false;
    options.skip_link_check = true;  // found on devices that are up
    plan = PlanLaunch(links->hostfile, options);
    if (!plan.ok()) return Fail("launch", plan.status());
  }
  if (dry_run) {
    std::fputs(DescribePlan(*plan).c_str(), stdout);
    return 0;
  }
  for (const auto& [a, b] : plan->missing_links) {
    std::fprintf(stderr,
                 "meshpool launch: warning: no link between %s and %s in the "
                 "hostfile (the mesh is not full)\n",
                 a.c_str(), b.c_str());
  }
  BlockStopSignals();
  absl::StatusOr<std::string> why = RunLaunchPlan(*plan, *start_timeout);
  if (!why.ok()) return Fail("launch", why.status());
  std::printf("meshpool launch: %s\n", why->c_str());
  return 0;
}

}  // namespace meshpool::tools
