// `meshpool launch`: a coordinator and a memory node on every host of a
// hostfile (tools/hostfile.h), started through a remote-exec command (ssh
// by default, `ip netns exec` in tests), their output streamed here with
// each line marked by host, and all of them stopped on Ctrl-C.
//
// PlanLaunch is pure: it turns the hostfile and options into the commands
// to run (what --dry-run prints). RunLaunchPlan runs a plan: it asks every
// host with links for its devices (`meshpool doctor --json`) and stops if
// a link's device is missing or down, writes the device matrix on every
// host that needs one, starts the coordinator,
// waits until it listens, starts the nodes, and then blocks until SIGINT
// or SIGTERM (or until the coordinator exits), when it stops every child.
// With --discover-links the hostfile lists no links: AskHosts gathers every
// host's doctor report and the pure DiscoverLinks finds the cables
// (launch_links.cc) before the plan is made again with them.
// Not thread-safe (used from main only).
#ifndef MESHPOOL_TOOLS_LAUNCH_H_
#define MESHPOOL_TOOLS_LAUNCH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/hostfile.h"

namespace meshpool::tools {

struct LaunchOptions {
  // The words of the command that runs a shell command line on a host:
  // {ssh} becomes the host's ssh target, {host} its name, and {command}
  // the command line (one word, for the host's shell). -tt gives the
  // remote process a terminal, so it is hung up when ssh is stopped.
  std::string exec = "ssh -tt -o BatchMode=yes {ssh} {command}";
  std::string binary = "meshpool";  // meshpool's path on the hosts
  // Where the device matrix is written on each host.
  std::string work_dir = "/tmp/meshpool-launch";
  std::string capacity = "1GiB";  // every node's pool (--capacity)
  // Data transport flags for every node ("--transport", "uc", ...).
  std::vector<std::string> node_args;
  // Beyond loopback the servers need one of these (TLS from a directory
  // present at the same path on every host, or explicitly none).
  std::string tls_dir;
  bool insecure = false;
  // Do not ask the hosts which devices they have before starting.
  bool skip_link_check = false;
  // The hostfile lists no links: ask every host (`meshpool doctor --json`)
  // and find them (DiscoverLinks) before planning the rest.
  bool discover_links = false;
  // How long the coordinator may take to say it listens.
  absl::Duration start_timeout = absl::Seconds(30);
};

// One command to run here: `argv` (the exec template applied), for
// `host`'s `role` ("matrix", "coordinator" or "node"); `input` is fed to
// its standard input.
struct LaunchCommand {
  std::string host;
  std::string role;
  std::vector<std::string> argv;
  std::string input;
};

struct LaunchPlan {
  Hostfile hostfile;                // what it was planned from
  std::string coordinator_address;  // HOST:PORT clients use
  // `meshpool doctor --json` on every host with links, run first; their
  // reports go through CheckReportedDevices. Empty with skip_link_check.
  // With discover_links, on every host, for DiscoverLinks (AskHosts); then
  // setup and nodes carry no device matrix: plan again with the links found.
  std::vector<LaunchCommand> checks;
  std::vector<LaunchCommand> setup;  // then these, to completion
  LaunchCommand coordinator;         // then this, until it listens
  std::vector<LaunchCommand> nodes;  // then these
  // Pairs of hosts no cable joins (a mesh that is not full), for a warning.
  std::vector<std::pair<std::string, std::string>> missing_links;
};

// InvalidArgument when the exec template lacks {command} or has another
// {placeholder}, when neither (or both of) tls_dir and insecure is set,
// when node_args carry --device-matrix or --host-name (launch derives them
// from the hostfile), or when discover_links is set with a hostfile that
// lists links or with skip_link_check.
absl::StatusOr<LaunchPlan> PlanLaunch(const Hostfile& hostfile,
                                      const LaunchOptions& options);

// `s` as one word for a POSIX shell ('...' quoting where needed).
std::string ShellQuote(absl::string_view s);

// The plan as --dry-run prints it: one shell-quoted line per command.
std::string DescribePlan(const LaunchPlan& plan);

// One RDMA device a host reported with an active port and an IPv4 address:
// its IPv4-mapped GID matched to the interface holding that address. Two
// hosts whose devices share a subnet that no third host's device is on are
// joined by that cable.
struct DeviceSubnet {
  std::string device;     // "rdma_en2"
  std::string interface;  // "en2"
  std::string address;    // "10.0.12.1"
  int prefix = 0;         // 30
};

// The DeviceSubnets in `host`'s doctor report (ParseDoctorReport), in the
// report's order. FailedPrecondition when the report is unreadable or has
// no "addresses" (a meshpool there older than --discover-links).
absl::StatusOr<std::vector<DeviceSubnet>> ReportedDeviceSubnets(
    const LaunchHost& host, absl::string_view doctor_output);

struct DiscoveredLinks {
  Hostfile hostfile;               // the input with every host's links set
  std::vector<std::string> found;  // "a rdma_en2 <-> b rdma_en3 (10.0.12.0/30)"
  std::vector<std::string> notes;  // devices that joined no pair, and why
};

// The links of `hostfile` (which lists none) from what each host's
// `meshpool doctor --json` printed (`reports`: host name -> output): a
// subnet holding RDMA devices of exactly two hosts, one each, is a cable
// between them. Two cables between one pair: the first subnet's (in
// address order) is used and a note says so. Pure. FailedPrecondition,
// saying what to change, when a host's report is missing or unreadable,
// when three or more hosts (or two devices of one host) share a subnet so
// that no cable can be told apart (self-assigned 169.254/16 addresses are
// the usual cause), when one device would reach two hosts, and when no
// cable is found at all.
absl::StatusOr<DiscoveredLinks> DiscoverLinks(
    const Hostfile& hostfile,
    const std::map<std::string, std::string>& reports);

// Runs `checks` (a plan's doctor commands) all at once and waits for them;
// returns what each printed, by host. An error only when one cannot be
// started; a host whose command failed has output saying why.
absl::StatusOr<std::map<std::string, std::string>> AskHosts(
    const std::vector<LaunchCommand>& checks);

// Runs `plan` until a stop signal or the coordinator's exit; returns why
// it stopped. FailedPrecondition from CheckReportedDevices (nothing was
// started); Unavailable when a setup command fails or the coordinator
// does not say it listens in time; Cancelled on a stop signal before it
// listens (whatever was started is stopped).
// REQUIRES: BlockStopSignals() was called before any thread started.
absl::StatusOr<std::string> RunLaunchPlan(const LaunchPlan& plan,
                                          absl::Duration start_timeout);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_LAUNCH_H_
