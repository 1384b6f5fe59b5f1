// Fuzzes `meshpool doctor`'s readers of Apple's tools (tools/doctor.h:
// rdma_ctl status, system_profiler SPThunderboltDataType, networksetup
// -listallhardwareports, ifconfig), whose output doctor trusts no more than
// any text from outside. Input: the text every one of those commands
// prints. Checks: no parser fails on it; every port has its bus and a
// finite, non-negative speed; every interface has a name; the whole report
// (Diagnose, then FormatJson) is valid JSON, and the text report holds
// the verdict.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/json.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/doctor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshpool::tools;
  const std::string input(reinterpret_cast<const char*>(data), size);
  (void)ParseRdmaCtlStatus(input);
  const std::vector<ThunderboltPort> ports = ParseThunderboltProfile(input);
  for (const ThunderboltPort& port : ports) {
    MESHPOOL_FUZZ_CHECK(!port.bus.empty(), "a port without its bus");
    MESHPOOL_FUZZ_CHECK(std::isfinite(port.speed_gbps) && port.speed_gbps >= 0,
                        port.bus);
  }
  for (const MacInterface& i : ParseIfconfig(input)) {
    MESHPOOL_FUZZ_CHECK(!i.name.empty(), "an interface without a name");
  }
  const auto hardware = ParseHardwarePorts(input);
  if (!ports.empty() || !hardware.empty()) meshpool::testing::FuzzAccepted();

  HostFacts facts;
  facts.mac = GatherMacFacts(
      [&input](const std::vector<std::string>&) -> absl::StatusOr<std::string> {
        return input;
      });
  DoctorOptions options;
  options.macos = true;
  options.thunderbolt = true;
  const DoctorReport report = Diagnose(facts, options);
  const std::string json = FormatJson(facts, report, options);
  const auto parsed = meshpool::ParseJson(json);
  MESHPOOL_FUZZ_CHECK(parsed.ok(), parsed.status().ToString() + "\n" + json);
  const std::string text = FormatText(facts, report, options);
  MESHPOOL_FUZZ_CHECK(absl::StrContains(text, report.verdict), text);
  return 0;
}
