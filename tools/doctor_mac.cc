// `meshpool doctor` on macOS: the parsers of Apple's tools' output, the
// macOS findings, and the mesh check of a hostfile (any platform).
//
// The formats parsed here come from public reports of real Macs (issue
// trackers of MLX, exo and others, 2025-2026): `rdma_ctl status` prints one
// word, `system_profiler SPThunderboltDataType` an indented tree with one
// "Port:" block per bus and the connected device's name as a heading below
// it, `networksetup -listallhardwareports` blocks of "Hardware Port:" and
// "Device:", `ifconfig` BSD's format. What no report showed is read
// leniently and, where it decides a finding, said to be a guess.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/common.h"
#include "tools/doctor.h"
#include "tools/hostfile.h"

namespace meshpool::tools {
namespace {

// Thunderbolt 4 (and USB4 v1) links run at 40 Gb/s; Thunderbolt 5 at 80
// (120 one way), and RDMA over Thunderbolt needs 5.
constexpr double kThunderbolt4Gbps = 40;
// A speed beyond this is not a Thunderbolt link's: read as unknown.
constexpr double kMaxPlausibleGbps = 10000;
static_assert(kMaxPlausibleGbps > kThunderbolt4Gbps);

constexpr absl::string_view kRecoveryFix =
    "enable it from macOS Recovery: shut the Mac down, hold the power button "
    "until the startup options appear, choose Options, open Utilities > "
    "Terminal, run `rdma_ctl enable`, and restart; `rdma_ctl status` then "
    "prints enabled";

// "80 Gb/s", "Up to 40 Gb/s x1": the first number, and whether it is a bound.
void ParseSpeed(absl::string_view value, ThunderboltPort& port) {
  value = absl::StripAsciiWhitespace(value);
  if (absl::StartsWithIgnoreCase(value, "up to")) {
    port.speed_up_to = true;
    value.remove_prefix(5);
    value = absl::StripLeadingAsciiWhitespace(value);
  }
  size_t end = 0;
  while (end < value.size() &&
         (absl::ascii_isdigit(static_cast<unsigned char>(value[end])) ||
          value[end] == '.')) {
    ++end;
  }
  double gbps = 0;
  if (end > 0 && absl::SimpleAtod(value.substr(0, end), &gbps) &&
      gbps <= kMaxPlausibleGbps) {
    port.speed_gbps = gbps;
  }
}

size_t Indent(absl::string_view line) {
  size_t n = 0;
  while (n < line.size() && (line[n] == ' ' || line[n] == '\t')) ++n;
  return n;
}

// "Key: value" -> (Key, value); a heading ("Name:") has an empty value.
std::pair<absl::string_view, absl::string_view> KeyValue(
    absl::string_view trimmed) {
  const size_t colon = trimmed.find(": ");
  if (colon == absl::string_view::npos) {
    return {absl::StripSuffix(trimmed, ":"), ""};
  }
  return {trimmed.substr(0, colon),
          absl::StripAsciiWhitespace(trimmed.substr(colon + 2))};
}

bool IsHeading(absl::string_view trimmed) {
  return absl::EndsWith(trimmed, ":") &&
         trimmed.find(": ") == absl::string_view::npos;
}

std::string PortName(const ThunderboltPort& port) {
  return port.receptacle.empty() ? port.bus
                                 : absl::StrCat("receptacle ", port.receptacle,
                                                " (", port.bus, ")");
}

std::string GbpsText(double gbps) { return absl::StrCat(gbps, " Gb/s"); }

const MacInterface* FindInterface(const MacFacts& mac, absl::string_view name) {
  for (const MacInterface& i : mac.interfaces) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

// The interface names the hardware ports call "Thunderbolt Bridge"; bridge0
// when networksetup could not say.
std::vector<std::string> BridgeNames(const MacFacts& mac) {
  std::vector<std::string> names;
  for (const auto& [device, port] : mac.hardware_ports) {
    if (absl::EqualsIgnoreCase(port, "Thunderbolt Bridge")) {
      names.push_back(device);
    }
  }
  if (names.empty() && !mac.hardware_ports_ran) names.push_back("bridge0");
  return names;
}

void DiagnoseRdmaCtl(const MacFacts& mac, std::vector<Finding>& findings) {
  if (!mac.rdma_ctl_ran) {
    if (absl::StrContains(mac.rdma_ctl_error, "no such command")) {
      AddFinding(
          findings, Severity::kError,
          "rdma_ctl is not on this Mac: RDMA over Thunderbolt needs macOS "
          "26.2 or later",
          "update macOS (System Settings > General > Software Update), then "
          "enable RDMA from Recovery (`rdma_ctl enable`)");
    } else {
      AddFinding(findings, Severity::kWarning,
                 absl::StrCat("`rdma_ctl status` failed: ", mac.rdma_ctl_error),
                 "run `rdma_ctl status` yourself; it should print enabled");
    }
    return;
  }
  switch (mac.rdma) {
    case RdmaCtlState::kEnabled:
      return;
    case RdmaCtlState::kDisabled:
      AddFinding(
          findings, Severity::kError,
          "RDMA over Thunderbolt is disabled (`rdma_ctl status`: disabled)",
          std::string(kRecoveryFix));
      return;
    case RdmaCtlState::kUnknown:
      AddFinding(
          findings, Severity::kWarning,
          absl::StrCat("`rdma_ctl status` printed '", mac.rdma_ctl_output,
                       "', which doctor does not know how to read"),
          absl::StrCat("it should print enabled; if RDMA is off, ",
                       kRecoveryFix));
      return;
  }
}

void DiagnoseThunderbolt(const MacFacts& mac, std::vector<Finding>& findings) {
  if (!mac.profiler_ran) {
    AddFinding(
        findings, Severity::kWarning,
        absl::StrCat("could not list the Thunderbolt ports "
                     "(`system_profiler SPThunderboltDataType`): ",
                     mac.profiler_error),
        "run `system_profiler SPThunderboltDataType` to see the ports and "
        "what is connected to each");
    return;
  }
  std::vector<std::string> listing;
  for (const ThunderboltPort& port : mac.thunderbolt) {
    if (!port.connected) continue;
    std::string line = absl::StrCat(
        port.receptacle.empty() ? port.bus
                                : absl::StrCat("receptacle ", port.receptacle),
        " -> ", port.peer.empty() ? "a device" : port.peer);
    if (port.speed_gbps > 0) {
      absl::StrAppend(&line, " at ", port.speed_up_to ? "up to " : "",
                      GbpsText(port.speed_gbps));
    }
    if (port.peer_rdma) absl::StrAppend(&line, ", rdma");
    listing.push_back(std::move(line));
    if (port.speed_gbps > 0 && port.speed_gbps <= kThunderbolt4Gbps) {
      AddFinding(
          findings, Severity::kWarning,
          absl::StrCat(
              "Thunderbolt ", PortName(port), " links to ",
              port.peer.empty() ? "a device" : port.peer, " at ",
              port.speed_up_to ? "up to " : "", GbpsText(port.speed_gbps),
              ": a Thunderbolt 4 (or slower) link, and RDMA over Thunderbolt "
              "needs Thunderbolt 5"),
          "use Thunderbolt 5 ports at both ends and a cable rated for 80 Gb/s "
          "(Thunderbolt 5); over a Thunderbolt 4 link run meshpool's tcp "
          "transport instead (`--transport tcp`)");
    }
    if (!port.peer.empty() && !port.peer_rdma) {
      AddFinding(
          findings, Severity::kInfo,
          absl::StrCat("the device on Thunderbolt ", PortName(port), " (",
                       port.peer,
                       ") lists no rdma service; Macs with RDMA enabled "
                       "have been seen to list one, so RDMA may be off there"),
          "run `meshpool doctor` (or `rdma_ctl status`) on that Mac");
    }
  }
  AddFinding(
      findings, Severity::kInfo,
      absl::StrCat("Thunderbolt: ", listing.size(), " of ",
                   mac.thunderbolt.size(), " ports connected",
                   listing.empty() ? "" : ": ", absl::StrJoin(listing, "; ")),
      "");
}

void DiagnoseBridge(const MacFacts& mac, std::vector<Finding>& findings) {
  if (!mac.ifconfig_ran) return;
  for (const std::string& name : BridgeNames(mac)) {
    const MacInterface* bridge = FindInterface(mac, name);
    if (bridge == nullptr || !bridge->up || bridge->members.empty()) continue;
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("the Thunderbolt Bridge (", name, ") is up with ",
                     absl::StrJoin(bridge->members, ", "),
                     " in it: between Macs cabled as a mesh it forwards "
                     "broadcasts in a loop that eats the CPU"),
        absl::StrCat("`sudo ifconfig ", name,
                     " down` now, and for good: System Settings > Network > "
                     "Thunderbolt Bridge > Make Service Inactive (or `sudo "
                     "networksetup -setnetworkserviceenabled \"Thunderbolt "
                     "Bridge\" off`)"));
  }
}

// Apple names a cable's RDMA device after its interface: rdma_en2 on en2.
void DiagnoseAddresses(const HostFacts& facts, std::vector<Finding>& findings) {
  const MacFacts& mac = facts.mac;
  if (!mac.ifconfig_ran) return;
  for (const rdma::RdmaDeviceInfo& device : facts.devices) {
    absl::string_view netdev = device.name;
    if (!absl::ConsumePrefix(&netdev, "rdma_")) continue;
    const MacInterface* iface = FindInterface(mac, netdev);
    if (iface == nullptr || !iface->ipv4.empty()) continue;
    const std::string fix = absl::StrCat(
        "give ", netdev,
        " an IPv4 address, a different small subnet per cable: System "
        "Settings > Network > the Thunderbolt port > Details > TCP/IP > "
        "Configure IPv4 Manually (e.g. 10.0.1.1 and 10.0.1.2, mask "
        "255.255.255.252, at the two ends), or `sudo ifconfig ",
        netdev, " inet 10.0.1.1/30` until the next restart");
    if (iface->ipv6_link_local) {
      AddFinding(
          findings, Severity::kWarning,
          absl::StrCat(netdev, " (under ", device.name,
                       ") has no IPv4 address, so its IPv4-mapped GID (index "
                       "1) does not exist; meshpool falls back to the "
                       "link-local IPv6 GID, which other software has failed "
                       "on (mlx #3467)"),
          fix);
    } else {
      AddFinding(findings, Severity::kError,
                 absl::StrCat(netdev, " (under ", device.name,
                              ") has no address at all, so ", device.name,
                              " has no usable GID"),
                 fix);
    }
  }
}

void DiagnoseMemory(const MacFacts& mac, uint64_t pool,
                    std::vector<Finding>& findings) {
  if (mac.memsize == 0) return;
  if (pool >= mac.memsize) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("the ", FormatSize(pool), " pool is not below this Mac's ",
                     FormatSize(mac.memsize), " of memory"),
        "give the node a smaller `--capacity` (and doctor `--pool-size`), "
        "leaving room for macOS and for models the GPU holds");
    return;
  }
  if (!mac.wired_limit_known) return;
  const uint64_t limit_bytes = mac.wired_limit_mb > (~uint64_t{0} >> 20)
                                   ? ~uint64_t{0}
                                   : mac.wired_limit_mb << 20;
  const std::string limit =
      mac.wired_limit_mb == 0
          ? std::string("macOS's default (iogpu.wired_limit_mb = 0)")
          : absl::StrCat(FormatSize(limit_bytes),
                         " (iogpu.wired_limit_mb = ", mac.wired_limit_mb, ")");
  // Without a set limit macOS lets the GPU wire most of memory (reported as
  // about three quarters on large Macs); judge only a limit that was set.
  // pool < memsize here.
  if (mac.wired_limit_mb != 0 && limit_bytes > mac.memsize - pool) {
    AddFinding(
        findings, Severity::kWarning,
        absl::StrCat("the ", FormatSize(pool),
                     " pool and the GPU's wired-memory limit of ", limit,
                     " add up to more than this Mac's ",
                     FormatSize(mac.memsize),
                     ": a model that fills the GPU's share (MLX) and the "
                     "node's pinned pool cannot both fit"),
        absl::StrCat("lower one: a smaller pool, or `sudo sysctl "
                     "iogpu.wired_limit_mb=",
                     (mac.memsize - pool) >> 20, "` (until the next restart)"));
    return;
  }
  AddFinding(findings, Severity::kInfo,
             absl::StrCat("memory: ", FormatSize(mac.memsize), ", the pool ",
                          FormatSize(pool), "; the GPU may wire up to ", limit,
                          " for models (MLX) beside it"),
             "");
}

}  // namespace

void DiagnoseMac(const HostFacts& facts, const DoctorOptions& options,
                 std::vector<Finding>& findings) {
  const MacFacts& mac = facts.mac;
  DiagnoseRdmaCtl(mac, findings);
  DiagnoseThunderbolt(mac, findings);
  DiagnoseBridge(mac, findings);
  DiagnoseAddresses(facts, findings);
  DiagnoseMemory(mac, options.pool_bytes, findings);
}

void DiagnoseMacNoDevices(const HostFacts& facts,
                          std::vector<Finding>& findings) {
  const MacFacts& mac = facts.mac;
  if (mac.rdma == RdmaCtlState::kDisabled) {
    AddFinding(
        findings, Severity::kError,
        "no RDMA devices: RDMA over Thunderbolt is not enabled on this Mac",
        std::string(kRecoveryFix));
    return;
  }
  if (!mac.rdma_ctl_ran) {
    AddFinding(
        findings, Severity::kError,
        "no RDMA devices, and `rdma_ctl status` could not say whether RDMA "
        "over Thunderbolt is enabled",
        absl::StrCat("on macOS 26.2 or later, ", kRecoveryFix));
    return;
  }
  std::vector<const ThunderboltPort*> connected;
  bool fast = false;
  for (const ThunderboltPort& port : mac.thunderbolt) {
    if (!port.connected) continue;
    connected.push_back(&port);
    fast |= port.speed_gbps == 0 || port.speed_gbps > kThunderbolt4Gbps;
  }
  if (mac.profiler_ran && connected.empty()) {
    AddFinding(
        findings, Severity::kError,
        "no RDMA devices: no Thunderbolt cable is connected to another Mac",
        "connect a Thunderbolt 5 cable to each other Mac of the cluster; "
        "each cable appears as its own device (rdma_en2, rdma_en3, ...)");
    return;
  }
  if (mac.profiler_ran && !fast) {
    AddFinding(
        findings, Severity::kError,
        "no RDMA devices, and every connected Thunderbolt link runs at 40 "
        "Gb/s or less: RDMA over Thunderbolt needs Thunderbolt 5, so with "
        "these ports RDMA is enabled but no device will appear",
        "use Macs with Thunderbolt 5 ports and Thunderbolt 5 cables, or run "
        "meshpool's tcp transport over these links (`--transport tcp`)");
    return;
  }
  AddFinding(
      findings, Severity::kError,
      "no RDMA devices although RDMA is enabled and a Thunderbolt cable is "
      "connected",
      "check `ibv_devices`; restart this Mac (devices and protection domains "
      "have failed until a restart: exo #2186, mlx #3207)");
}

void DiagnoseMesh(const HostFacts& facts, const DoctorOptions& options,
                  std::vector<Finding>& findings) {
  if (options.hostfile == nullptr) return;
  const Hostfile& hostfile = *options.hostfile;
  const LaunchHost* self = nullptr;
  for (const LaunchHost& h : hostfile.hosts) {
    if (h.name == options.host_name) self = &h;
  }
  if (self == nullptr) return;  // the command line checks the name
  std::map<std::string, bool> devices;
  for (const rdma::RdmaDeviceInfo& d : facts.devices) {
    bool up = false;
    for (const rdma::RdmaPortInfo& p : d.ports) up |= p.active;
    devices[d.name] = up;
  }
  for (std::string& problem : LinkProblems(*self, devices)) {
    AddFinding(
        findings, Severity::kError, std::move(problem),
        "fix the cable or the hostfile's \"links\"; `meshpool doctor` on "
        "both hosts names their devices");
  }
  const auto missing = MissingLinks(hostfile);
  if (!missing.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [a, b] : missing) pairs.push_back(absl::StrCat(a, "-", b));
    const size_t n = hostfile.hosts.size();
    AddFinding(
        findings, Severity::kWarning,
        absl::StrCat("the mesh is not full: no cable joins ",
                     absl::StrJoin(pairs, ", "),
                     "; those pairs reach each other only over TCP"),
        absl::StrCat("a full mesh of ", n, " hosts needs ", n - 1,
                     " cables on each, ", n * (n - 1) / 2,
                     " in all; connect the missing ones and list each under "
                     "\"links\" at both ends"));
  }
  if (facts.mac.gathered && facts.mac.profiler_ran && !self->links.empty()) {
    size_t connected = 0;
    for (const ThunderboltPort& port : facts.mac.thunderbolt) {
      connected += port.connected;
    }
    if (connected < self->links.size()) {
      AddFinding(
          findings, Severity::kError,
          absl::StrCat("the hostfile lists ", self->links.size(), " cables on ",
                       self->name, " but only ", connected,
                       " of its Thunderbolt ports have a device connected"),
          "plug in the missing cables (`system_profiler "
          "SPThunderboltDataType` shows each port)");
    }
  }
}

RdmaCtlState ParseRdmaCtlStatus(absl::string_view output) {
  const std::string text =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(output));
  if (text == "enabled") return RdmaCtlState::kEnabled;
  if (text == "disabled") return RdmaCtlState::kDisabled;
  return RdmaCtlState::kUnknown;
}

std::vector<ThunderboltPort> ParseThunderboltProfile(absl::string_view text) {
  enum class At { kNone, kBus, kPort, kAfterPort, kPeer };
  std::vector<ThunderboltPort> ports;
  At at = At::kNone;
  size_t bus_indent = 0, port_indent = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty()) continue;
    const size_t indent = Indent(line);
    if (IsHeading(trimmed) && absl::StrContains(trimmed, " Bus ") &&
        absl::StartsWith(trimmed, "Thunderbolt")) {
      ports.emplace_back();
      ports.back().bus = std::string(absl::StripSuffix(trimmed, ":"));
      at = At::kBus;
      bus_indent = indent;
      continue;
    }
    if (at == At::kNone) continue;
    ThunderboltPort& port = ports.back();
    if (indent <= bus_indent) {  // left the bus
      at = At::kNone;
      continue;
    }
    if (at == At::kBus && trimmed == "Port:") {
      at = At::kPort;
      port_indent = indent;
      continue;
    }
    const auto [key, value] = KeyValue(trimmed);
    if (at == At::kPort) {
      if (indent > port_indent && !value.empty()) {
        if (key == "Status") {
          port.connected = absl::EqualsIgnoreCase(value, "Device connected");
        } else if (key == "Speed") {
          ParseSpeed(value, port);
        } else if (key == "Receptacle") {
          port.receptacle = std::string(value);
        }
        continue;
      }
      at = At::kAfterPort;
    }
    if (at == At::kAfterPort) {
      if (IsHeading(trimmed)) {
        port.peer = std::string(key);
        at = At::kPeer;
      }
      continue;
    }
    if (at == At::kPeer) {
      if (key == "Device Name" && port.peer_model.empty()) {
        port.peer_model = std::string(value);
      } else if (key == "Service Key" &&
                 absl::EqualsIgnoreCase(value, "rdma")) {
        port.peer_rdma = true;
      }
    }
  }
  return ports;
}

std::vector<std::pair<std::string, std::string>> ParseHardwarePorts(
    absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> ports;
  std::string port;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const auto [key, value] = KeyValue(absl::StripAsciiWhitespace(line));
    if (key == "Hardware Port") {
      port = std::string(value);
    } else if (key == "Device" && !port.empty() && !value.empty()) {
      ports.emplace_back(std::string(value), port);
      port.clear();
    }
  }
  return ports;
}

std::vector<MacInterface> ParseIfconfig(absl::string_view text) {
  std::vector<MacInterface> interfaces;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty()) continue;
    if (line[0] != ' ' && line[0] != '\t') {
      // "en2: flags=8863<UP,BROADCAST,...> mtu 1500"
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos || colon == 0) continue;
      MacInterface iface;
      iface.name = std::string(line.substr(0, colon));
      const size_t open = line.find('<'), close = line.find('>');
      if (open != absl::string_view::npos && close != absl::string_view::npos &&
          open < close) {
        for (absl::string_view flag :
             absl::StrSplit(line.substr(open + 1, close - open - 1), ',')) {
          iface.up |= flag == "UP";
        }
      }
      interfaces.push_back(std::move(iface));
      continue;
    }
    if (interfaces.empty()) continue;
    MacInterface& iface = interfaces.back();
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "inet") {
      iface.ipv4.emplace_back(words[1]);
    } else if (words[0] == "inet6" &&
               absl::StartsWithIgnoreCase(words[1], "fe80:")) {
      iface.ipv6_link_local = true;
    } else if (words[0] == "status:") {
      iface.active = words[1] == "active";
    } else if (words[0] == "member:") {
      iface.members.emplace_back(words[1]);
    }
  }
  return interfaces;
}

}  // namespace meshpool::tools
