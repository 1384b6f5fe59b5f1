// Test helpers that look at and change the RDMA devices' network from
// inside the Soft-RoCE VM (tools/vm/run.sh): a device's packet counters, the
// network device behind its GID, and taking that network device down.
//
// Thread-safety: none of this is; call it from the test's thread.
#ifndef MESHPOOL_TESTS_VERBS_VM_UTIL_LINUX_H_
#define MESHPOOL_TESTS_VERBS_VM_UTIL_LINUX_H_

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "tests/shell_util.h"

namespace meshpool::testing {

// How long a port may take to come back after its link is up again.
constexpr absl::Duration kPortActiveTimeout = absl::Seconds(15);

// True inside the VM (tools/vm/guest.sh sets it), where tests may change
// the network.
inline bool InsideVerbsVm() {
  return std::getenv("MESHPOOL_VM_RXE0_ADDR") != nullptr;
}

// The first device other than `device` with an active port 1, or "" (also
// when the devices cannot be listed).
inline std::string OtherActiveVerbsDevice(const std::string& device) {
  absl::StatusOr<std::vector<rdma::RdmaDeviceInfo>> devices =
      rdma::ListRdmaDevices();
  if (!devices.ok()) return "";
  for (const rdma::RdmaDeviceInfo& d : *devices) {
    if (d.name != device && !d.ports.empty() && d.ports[0].port == 1 &&
        d.ports[0].active) {
      return d.name;
    }
  }
  return "";
}

// Packets `device`'s port 1 sent and received (its hw_counters). NotFound
// when the device has no such counters (only some drivers do; rxe does).
struct PacketCounts {
  uint64_t sent = 0;
  uint64_t received = 0;
};
inline absl::StatusOr<uint64_t> ReadPortCounter(const std::string& device,
                                                const std::string& name) {
  const std::string path = absl::StrCat("/sys/class/infiniband/", device,
                                        "/ports/1/hw_counters/", name);
  std::ifstream in(path);
  std::string text;
  uint64_t value = 0;
  if (!(in >> text) || !absl::SimpleAtoi(text, &value)) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the packet counter ", path));
  }
  return value;
}
inline absl::StatusOr<PacketCounts> ReadPacketCounts(
    const std::string& device) {
  absl::StatusOr<uint64_t> sent = ReadPortCounter(device, "sent_pkts");
  if (!sent.ok()) return sent.status();
  absl::StatusOr<uint64_t> received = ReadPortCounter(device, "rcvd_pkts");
  if (!received.ok()) return received.status();
  return PacketCounts{*sent, *received};
}

// The network device behind `device`'s port-1 RoCE v2 IPv4 GID (the one the
// verbs backend uses), e.g. "ve1". NotFound when it has none.
inline absl::StatusOr<std::string> NetdevOfVerbsDevice(
    const std::string& device) {
  absl::StatusOr<std::vector<rdma::RdmaDeviceInfo>> devices =
      rdma::ListRdmaDevices();
  if (!devices.ok()) return devices.status();
  for (const rdma::RdmaDeviceInfo& d : *devices) {
    if (d.name != device || d.ports.empty()) continue;
    for (const rdma::RdmaGidInfo& gid : d.ports[0].gids) {
      if (gid.type == "RoCE v2" && absl::StartsWith(gid.gid, "::ffff:") &&
          !gid.netdev.empty()) {
        return gid.netdev;
      }
    }
  }
  return absl::NotFoundError(absl::StrCat(
      device, " has no RoCE v2 IPv4 GID with a network device on port 1"));
}

// Runs `command` with /bin/sh and returns what it printed; Internal when it
// exits non-zero.
inline absl::StatusOr<std::string> RunShell(const std::string& command) {
  ShellResult run = Shell(command);
  if (run.exit_code != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` failed (exit ",
                                            run.exit_code, "): ", run.output));
  }
  return run.output;
}

// Waits until every RDMA device's port 1 is ACTIVE; DeadlineExceeded naming
// the ones that are not after `timeout`.
inline absl::Status WaitForActivePorts(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string inactive;
  while (true) {
    absl::StatusOr<std::vector<rdma::RdmaDeviceInfo>> devices =
        rdma::ListRdmaDevices();
    if (!devices.ok()) return devices.status();
    inactive.clear();
    for (const rdma::RdmaDeviceInfo& d : *devices) {
      if (d.ports.empty() || !d.ports[0].active) {
        absl::StrAppend(&inactive, " ", d.name, "(",
                        d.ports.empty() ? "no port" : d.ports[0].state, ")");
      }
    }
    if (inactive.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("RDMA ports still not ACTIVE after ",
                   absl::FormatDuration(timeout), ":", inactive));
}

// A network device taken down ("the cable pulled"). Restore() -- or the
// destructor, so that a failing test still leaves the VM's network as it
// found it for the tests after it -- brings it back up, re-adds the routes
// and permanent neighbour entries that going down deleted (tools/vm/guest.sh
// --rxe 2 policy routes and static ARP), and waits for every RDMA port to be
// ACTIVE again. Only for the throwaway VM: needs root and changes links.
class DownedLink {
 public:
  // Snapshots what going down deletes, then runs `ip link set NETDEV down`.
  static absl::StatusOr<std::unique_ptr<DownedLink>> TakeDown(
      const std::string& netdev) {
    std::unique_ptr<DownedLink> link(new DownedLink(netdev));
    absl::StatusOr<std::string> routes =
        RunShell(absl::StrCat("ip -o route show table all dev ", netdev));
    if (!routes.ok()) return routes.status();
    for (absl::string_view line : absl::StrSplit(*routes, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || absl::StrContains(line, "proto kernel")) continue;
      link->restore_.push_back(
          absl::StrCat("ip route replace ", line, " dev ", netdev));
    }
    absl::StatusOr<std::string> neighbours =
        RunShell(absl::StrCat("ip neigh show dev ", netdev, " nud permanent"));
    if (!neighbours.ok()) return neighbours.status();
    for (absl::string_view line : absl::StrSplit(*neighbours, '\n')) {
      // "10.77.0.1 lladdr 5a:91:38:a9:3e:22 PERMANENT"
      std::vector<absl::string_view> f =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 3 || f[1] != "lladdr") continue;
      link->restore_.push_back(absl::StrCat("ip neigh replace ", f[0], " dev ",
                                            netdev, " lladdr ", f[2],
                                            " nud permanent"));
    }
    absl::StatusOr<std::string> down =
        RunShell(absl::StrCat("ip link set ", netdev, " down"));
    if (!down.ok()) return down.status();
    link->down_ = true;
    return link;
  }

  DownedLink(const DownedLink&) = delete;
  DownedLink& operator=(const DownedLink&) = delete;
  ~DownedLink() {
    absl::Status status = Restore();
    if (!status.ok()) {
      std::cerr << "*** could not restore " << netdev_ << ": " << status
                << "; later verbs tests in this VM may fail" << std::endl;
    }
  }

  // Brings the link back; OK at once when it is already back.
  absl::Status Restore() {
    if (!down_) return absl::OkStatus();
    absl::StatusOr<std::string> up =
        RunShell(absl::StrCat("ip link set ", netdev_, " up"));
    if (!up.ok()) return up.status();
    down_ = false;
    for (const std::string& command : restore_) {
      absl::StatusOr<std::string> done = RunShell(command);
      if (!done.ok()) return done.status();
    }
    return WaitForActivePorts(kPortActiveTimeout);
  }

 private:
  explicit DownedLink(std::string netdev) : netdev_(std::move(netdev)) {}

  std::string netdev_;
  std::vector<std::string> restore_;  // shell commands, run after "up"
  bool down_ = false;
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_VERBS_VM_UTIL_LINUX_H_
