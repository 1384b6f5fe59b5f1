// The hostfile of `meshpool launch`: the machines of one cluster, how to
// reach each (its ssh target and the address the others dial), where the
// coordinator runs, and, for a Thunderbolt mesh, which RDMA device on each
// host reaches each other host (one cable, one device). Pure and
// thread-safe.
//
//   {
//     "coordinator": {"host": "mac1", "port": 7070},
//     "hosts": [
//       {"name": "mac1", "ssh": "me@mac1.local", "address": "10.0.0.1",
//        "links": {"mac2": "rdma_en2"}},
//       {"name": "mac2", "address": "10.0.0.2",
//        "links": {"mac1": "rdma_en2"}}
//     ]
//   }
//
// "ssh" defaults to the name; "coordinator" to the first host, port 7070;
// "links" may be left out on every host (one device, TCP, or links that
// `meshpool launch --discover-links` finds) but not on some. Unknown keys are
// errors, so a misspelt one does not pass unseen.
#ifndef MESHPOOL_TOOLS_HOSTFILE_H_
#define MESHPOOL_TOOLS_HOSTFILE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json.h"

namespace meshpool::tools {

// Hosts in one hostfile, at most (a full mesh of this many needs
// kMaxLaunchHosts - 1 cables on every host).
inline constexpr size_t kMaxLaunchHosts = 256;
// A hostfile's bytes, at most.
inline constexpr size_t kMaxHostfileBytes = size_t{1} << 20;

struct LaunchHost {
  std::string name;     // its row in the device matrix (--host-name)
  std::string ssh;      // what the exec command's {ssh} becomes
  std::string address;  // where other hosts and clients reach it
  std::map<std::string, std::string> links;  // peer host -> local device
};

struct Hostfile {
  std::vector<LaunchHost> hosts;  // in file order
  size_t coordinator = 0;         // index into hosts
  int coordinator_port = 7070;
};

// Parses and checks a hostfile. InvalidArgument naming the host and field
// (or the JSON byte) for: malformed JSON, a missing or empty name or
// address, a name used twice or holding whitespace, a link to a host not in
// the file or to itself, a link only one end lists (a cable has a device
// at each end), links on some hosts but not others, a coordinator host not
// in the file, a port outside 1..65535, an unknown key, more than
// kMaxLaunchHosts hosts or kMaxHostfileBytes.
absl::StatusOr<Hostfile> ParseHostfile(absl::string_view json);

// ParseHostfile of the file at `path`. NotFound when it cannot be opened;
// InvalidArgument beyond kMaxHostfileBytes or as ParseHostfile.
absl::StatusOr<Hostfile> ReadHostfile(const std::string& path);

// The N x N device matrix the links describe, in rdma::ParseDeviceMatrix's
// format ("-" where two hosts have no cable). Empty when no host has links.
std::string DeviceMatrixText(const Hostfile& hostfile);

// The pairs of hosts with no link between them, each once (first, second in
// file order): the cables a full mesh still lacks. Empty when the hostfile
// has no links at all.
std::vector<std::pair<std::string, std::string>> MissingLinks(
    const Hostfile& hostfile);

// What is wrong with `host`'s links given the RDMA devices it has (device
// -> whether any of its ports is active): one sentence per link whose
// device is missing or has no active port, naming the cable and what to
// check. Empty when every link is ready.
std::vector<std::string> LinkProblems(
    const LaunchHost& host, const std::map<std::string, bool>& devices);

// The JSON object of what `meshpool doctor --json` printed on `host` (text
// around it, such as ssh's banner, is ignored). FailedPrecondition naming
// the host when there is none or it does not parse, or lacks "devices".
absl::StatusOr<JsonValue> ParseDoctorReport(const LaunchHost& host,
                                            absl::string_view doctor_output);

// Checks `host`'s links against the devices it reports: `doctor_json` is
// what `meshpool doctor --json` printed there (ParseDoctorReport). OK when
// every device its links name is present with an active port.
// FailedPrecondition with the first of LinkProblems, or when the report cannot
// be read.
absl::Status CheckReportedDevices(const LaunchHost& host,
                                  absl::string_view doctor_json);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_HOSTFILE_H_
