// GatherMacFacts: runs Apple's tools for `meshpool doctor` on macOS (or,
// under --platform macos elsewhere, whatever stands in for them on PATH).
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tools/doctor.h"
#include "tools/run_command.h"

namespace meshpool::tools {
namespace {

// One of Apple's tools, at most (system_profiler is the slow one: about a
// second).
constexpr absl::Duration kMacToolTimeout = absl::Seconds(10);

// The first line of a command's output, for messages.
std::string FirstLine(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return std::string(text.substr(0, text.find('\n')));
}

bool ParseNumber(absl::string_view text, uint64_t* value) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), value);
}

}  // namespace

CommandRunner ProcessCommandRunner() {
  return
      [](const std::vector<std::string>& argv) -> absl::StatusOr<std::string> {
        absl::StatusOr<CommandResult> run =
            RunCommand(argv, kMacToolTimeout, /*merge_stderr=*/false);
        if (!run.ok()) return run.status();
        if (run->exit_code != 0) {
          return absl::UnavailableError(absl::StrCat(
              argv[0], " exited with status ", run->exit_code,
              run->output.empty() ? "" : ": ", FirstLine(run->output)));
        }
        return std::move(run->output);
      };
}

MacFacts GatherMacFacts(const CommandRunner& run) {
  MacFacts mac;
  mac.gathered = true;
  absl::StatusOr<std::string> out = run({"rdma_ctl", "status"});
  mac.rdma_ctl_ran = out.ok();
  if (out.ok()) {
    mac.rdma_ctl_output = FirstLine(*out);
    mac.rdma = ParseRdmaCtlStatus(*out);
  } else {
    mac.rdma_ctl_error = std::string(out.status().message());
  }
  out = run({"system_profiler", "SPThunderboltDataType"});
  mac.profiler_ran = out.ok();
  if (out.ok()) {
    mac.thunderbolt = ParseThunderboltProfile(*out);
  } else {
    mac.profiler_error = std::string(out.status().message());
  }
  out = run({"networksetup", "-listallhardwareports"});
  mac.hardware_ports_ran = out.ok();
  if (out.ok()) mac.hardware_ports = ParseHardwarePorts(*out);
  out = run({"ifconfig"});
  mac.ifconfig_ran = out.ok();
  if (out.ok()) mac.interfaces = ParseIfconfig(*out);
  out = run({"sysctl", "-n", "hw.memsize"});
  if (!out.ok() || !ParseNumber(*out, &mac.memsize)) mac.memsize = 0;
  out = run({"sysctl", "-n", "iogpu.wired_limit_mb"});
  mac.wired_limit_known = out.ok() && ParseNumber(*out, &mac.wired_limit_mb);
  return mac;
}

}  // namespace meshpool::tools
