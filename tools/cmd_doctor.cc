// `meshpool doctor`: can this host serve RDMA, and what to run if not.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/commands.h"
#include "tools/doctor.h"
#include "tools/flags.h"

namespace meshpool::tools {

int RunDoctor(int argc, char** argv) {
  Flags flags(
      "meshpool doctor [--device NAME] [--pool-size SIZE] [--profile P] "
      "[--json]",
      "Checks whether this host can serve a memory pool over RDMA: "
      "lists the RDMA devices, ports and GIDs, the memlock limit, huge "
      "pages and the kernel modules, and registers a pool of "
      "--pool-size on each device with an active port. Prints one "
      "line per problem with the command that fixes it, then a "
      "verdict. Exit status 0: some device (or --device) can serve; "
      "1: none can.");
  flags.Define("device", "", "judge only this RDMA device (e.g. rxe0)");
  flags.Define("pool-size", "256MiB", "pool to map and register, e.g. 8GiB");
#ifdef __APPLE__
  flags.Define("profile", "thunderbolt",
#else
  flags.Define("profile", "none",
#endif
               "thunderbolt: judge for the uc backend under Apple's limits "
               "(UC queue pairs, 10 per device, link-local GIDs; the default "
               "on macOS); none: for verbs RC");
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
  const std::string profile = flags.Get("profile");
  if (profile != "thunderbolt" && profile != "none") {
    return Fail("doctor", absl::InvalidArgumentError(absl::StrCat(
                              "--profile ", profile,
                              " is unknown; use thunderbolt or none")));
  }
  options.thunderbolt = profile == "thunderbolt";
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
