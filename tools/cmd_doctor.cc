// `meshpool doctor`: can this host serve RDMA, and what to run if not.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/commands.h"
#include "tools/doctor.h"
#include "tools/flags.h"
#include "tools/hostfile.h"

namespace meshpool::tools {
namespace {

// `wanted`, or this host's name up to its first dot; InvalidArgument when
// the hostfile has no such host, listing the ones it has.
absl::StatusOr<std::string> HostNameIn(const Hostfile& hostfile,
                                       std::string wanted) {
  if (wanted.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0) wanted = name;
    wanted = wanted.substr(0, wanted.find('.'));
  }
  std::vector<std::string> names;
  for (const LaunchHost& host : hostfile.hosts) {
    if (host.name == wanted) return wanted;
    names.push_back(host.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the hostfile has no host '", wanted, "' (it has ",
      absl::StrJoin(names, ", "), "); say which one this is with --host-name"));
}

}  // namespace

int RunDoctor(int argc, char** argv) {
  Flags flags(
      "meshpool doctor [--device NAME] [--pool-size SIZE] [--profile P] "
      "[--platform linux|macos] [--hostfile FILE [--host-name NAME]] "
      "[--json]",
      "Checks whether this host can serve a memory pool over RDMA: "
      "lists the RDMA devices, ports and GIDs, the memlock limit, huge "
      "pages and the kernel modules, and registers a pool of "
      "--pool-size on each device with an active port. Prints one "
      "line per problem with the command that fixes it, then a "
      "verdict. On macOS it checks RDMA over Thunderbolt instead of the "
      "Linux kernel: `rdma_ctl status`, the Thunderbolt ports and the "
      "speed of each link, the Thunderbolt Bridge, an address on each "
      "RDMA interface, and memory against the GPU's wired limit. With "
      "--hostfile it also checks this host's cables against the "
      "hostfile's links and whether the mesh is full. Exit status 0: "
      "some device (or --device) can serve; 1: none can.");
  flags.Define("device", "", "judge only this RDMA device (e.g. rxe0)");
  flags.Define("pool-size", "256MiB", "pool to map and register, e.g. 8GiB");
  flags.Define("profile", "",
               "thunderbolt: judge for the uc backend under Apple's limits "
               "(UC queue pairs, 10 per device, link-local GIDs); none: for "
               "verbs RC (default: thunderbolt on macOS, none elsewhere)");
#ifdef __APPLE__
  flags.Define("platform", "macos",
#else
  flags.Define("platform", "linux",
#endif
               "which host's checks to run: macos (Apple's tools: rdma_ctl, "
               "system_profiler, networksetup, ifconfig, sysctl; the "
               "default on macOS) or linux; macos elsewhere runs them on "
               "whatever those commands are on PATH (tests feed recorded "
               "outputs this way)");
  flags.Define("hostfile", "",
               "a `meshpool launch` hostfile: check this host's links and "
               "the mesh against it");
  flags.Define("host-name", "",
               "this host's name in --hostfile (default: the first label of "
               "its hostname)");
  flags.DefineBool("json", "print the facts and findings as JSON");
  if (int rc = ParseFlags(flags, argc, argv, "doctor"); rc >= 0) return rc;
  if (!flags.positional().empty()) {
    return Fail("doctor", absl::InvalidArgumentError(
                              "takes no arguments; see `meshpool doctor "
                              "--help`"));
  }
  auto pool = flags.GetSize("pool-size");
  if (!pool.ok()) return Fail("doctor", pool.status());
  if (*pool == 0) {
    return Fail("doctor",
                absl::InvalidArgumentError("--pool-size must be above 0"));
  }
  DoctorOptions options;
  const std::string platform = flags.Get("platform");
  if (platform != "macos" && platform != "linux") {
    return Fail("doctor", absl::InvalidArgumentError(
                              absl::StrCat("--platform ", platform,
                                           " is unknown; use linux or macos")));
  }
  options.macos = platform == "macos";
  std::string profile = flags.Get("profile");
  if (profile.empty()) profile = options.macos ? "thunderbolt" : "none";
  if (profile != "thunderbolt" && profile != "none") {
    return Fail("doctor", absl::InvalidArgumentError(absl::StrCat(
                              "--profile ", profile,
                              " is unknown; use thunderbolt or none")));
  }
  options.thunderbolt = profile == "thunderbolt";
  std::optional<Hostfile> hostfile;
  if (const std::string path = flags.Get("hostfile"); !path.empty()) {
    absl::StatusOr<Hostfile> read = ReadHostfile(path);
    if (!read.ok()) return Fail("doctor", read.status());
    hostfile = *std::move(read);
    absl::StatusOr<std::string> name =
        HostNameIn(*hostfile, flags.Get("host-name"));
    if (!name.ok()) return Fail("doctor", name.status());
    options.hostfile = &*hostfile;
    options.host_name = *std::move(name);
  } else if (!flags.Get("host-name").empty()) {
    return Fail("doctor", absl::InvalidArgumentError(
                              "--host-name names this host in --hostfile; "
                              "give --hostfile too"));
  }
  options.device = flags.Get("device");
  options.pool_bytes = *pool;
  options.json = flags.GetBool("json");
  HostFacts facts = GatherHostFacts(options);
  DoctorReport report = Diagnose(facts, options);
  std::string out = options.json ? FormatJson(facts, report, options)
                                 : FormatText(facts, report, options);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return report.exit_code();
}

}  // namespace meshpool::tools
