// Diagnose: facts -> findings and a verdict (pure): the devices, ports,
// GIDs and registrations on every platform. The Linux kernel's part and its
// parsers live in doctor_linux.cc, the macOS part in doctor_mac.cc,
// formatting in doctor_format.cc, reading the host in doctor_host*.cc.
#include "tools/doctor.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/common.h"
#include "rdma/devices.h"
#include "rdma/uc.h"

namespace meshpool::tools {
namespace {

// The network device a port's GIDs belong to ("" for InfiniBand / unknown).
std::string NetdevOf(const rdma::RdmaPortInfo& port) {
  for (const rdma::RdmaGidInfo& gid : port.gids) {
    if (!gid.netdev.empty()) return gid.netdev;
  }
  return "";
}

bool IsEthernet(const rdma::RdmaPortInfo& port) {
  return absl::EqualsIgnoreCase(port.link_layer, "Ethernet");
}

bool IsRoceV2Ipv4(const rdma::RdmaGidInfo& gid) {
  return absl::StrContains(absl::AsciiStrToLower(gid.type), "v2") &&
         IsIpv4MappedGid(gid.gid);
}

// The verbs backend's GID choice (rdma.h): a RoCE v2 IPv4 GID on Ethernet,
// any GID (index 0) on InfiniBand; under the thunderbolt profile any RoCE
// v2 GID (a link-local IPv6 one where the link has no IPv4 address).
bool HasUsableGid(const rdma::RdmaPortInfo& port, bool thunderbolt) {
  if (!IsEthernet(port)) return !port.gids.empty();
  if (std::any_of(port.gids.begin(), port.gids.end(), IsRoceV2Ipv4)) {
    return true;
  }
  return thunderbolt &&
         std::any_of(port.gids.begin(), port.gids.end(), [](const auto& g) {
           return absl::StrContains(absl::AsciiStrToLower(g.type), "v2");
         });
}

// What the uc backend on UC queue pairs needs of a device beyond a port:
// UC QPs and enough work requests per QP for the default window. Adds an
// info finding on the profile's QP budget. False when it cannot serve.
bool DiagnoseUc(const rdma::RdmaDeviceInfo& device,
                std::vector<Finding>& findings) {
  bool ok = true;
  if (!device.uc_queue_pairs) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat(device.name,
                     " cannot create a UC queue pair, which the uc backend "
                     "(Thunderbolt's only RDMA) runs on"),
        "on macOS: enable RDMA from Recovery (`rdma_ctl enable`), check "
        "`ibv_devices`, and reboot if it still fails; on Linux: use a "
        "device that supports UC (Soft-RoCE does)");
    ok = false;
  }
  const rdma::UcOptions defaults;
  const uint32_t needed = rdma::UcReceiveDepth(defaults.window_frames) +
                          rdma::UcSendDepth(defaults.window_frames);
  if (device.max_qp_wr > 0 &&
      static_cast<uint32_t>(device.max_qp_wr) <
          rdma::UcReceiveDepth(defaults.window_frames)) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat(device.name, " allows ", device.max_qp_wr,
                     " work requests per queue pair; a uc link posts ", needed),
        "use a device with deeper queues");
    ok = false;
  }
  if (ok) {
    AddFinding(
        findings, Severity::kInfo,
        absl::StrCat("thunderbolt profile: ", device.name, " serves at most ",
                     rdma::kThunderboltMaxQpsPerDevice,
                     " UC queue pairs: that many client processes (or "
                     "peers) over its cable at once, each on one QP shared "
                     "by its lanes and posting up to ",
                     rdma::kUcLanesPerLink * needed,
                     " work requests of 4 KiB frames"),
        "");
  }
  return ok;
}

// Reports a port that is not ACTIVE. `only_port`: no other port of the
// device is active, so this blocks the device.
void DiagnoseInactivePort(const rdma::RdmaDeviceInfo& device,
                          const rdma::RdmaPortInfo& port, bool only_port,
                          bool macos, std::vector<Finding>& findings) {
  Severity severity = only_port ? Severity::kError : Severity::kInfo;
  std::string where =
      absl::StrCat(device.name, " port ", port.port, " is ",
                   port.state.empty() ? "not ACTIVE" : port.state);
  if (macos) {
    // One device per cable (rdma_en2 on en2): a port down is a cable out.
    AddFinding(findings, severity,
               absl::StrCat(where,
                            ": its Thunderbolt cable is out, or the Mac at "
                            "the other end is off"),
               "check the cable at both ends (`system_profiler "
               "SPThunderboltDataType` shows what each port sees)");
    return;
  }
  if (IsEthernet(port)) {
    std::string netdev = NetdevOf(port);
    AddFinding(
        findings, severity,
        absl::StrCat(where, " (Ethernet",
                     netdev.empty() ? "" : absl::StrCat(" on ", netdev), ")"),
        netdev.empty()
            ? "bring its network device up: `ip link set <netdev> up` (find "
              "it with `rdma link show`)"
            : absl::StrCat("`ip link set ", netdev, " up`"));
    return;
  }
  AddFinding(
      findings, severity, absl::StrCat(where, " (InfiniBand)"),
      absl::EqualsIgnoreCase(port.state, "INIT")
          ? "no subnet manager configured the port: start one, `opensm` (or "
            "`systemctl start opensm`) or the switch's subnet manager"
          : "check the cable and the switch, and that a subnet manager runs "
            "(`opensm`)");
}

// Why registering failed, and what to do, given the host's other facts.
std::string RegistrationFix(const RegistrationFacts& reg,
                            const HostFacts& facts, bool macos) {
  if (macos) {
    return "restart this Mac (registering memory and allocating protection "
           "domains have failed until a restart: exo #2186, mlx #3207), "
           "then try a smaller `--pool-size 64MiB`";
  }
  const MemlockFacts& memlock = facts.memlock;
  if (memlock.known && !memlock.ipc_lock && memlock.soft < reg.bytes) {
    return absl::StrCat(
        "the memlock limit (", LimitText(memlock.soft),
        ") is below the pool: `ulimit -l unlimited`, then rerun");
  }
  std::string error = absl::AsciiStrToLower(reg.error);
  if (absl::StrContains(error, "permission") ||
      absl::StrContains(error, "denied")) {
    return "no access to /dev/infiniband/uverbs*: run as root or `sudo chmod "
           "666 /dev/infiniband/uverbs*`";
  }
  if (absl::StrContains(error, "memory") ||
      absl::StrContains(error, "exhausted")) {
    return "not enough memory can be pinned: free memory or try a smaller "
           "`--pool-size`";
  }
  return "look for the driver's message in `dmesg | tail`, and check a "
         "smaller `--pool-size 64MiB`";
}

// Judges one device; true when it can serve RDMA.
bool DiagnoseDevice(const rdma::RdmaDeviceInfo& device, const HostFacts& facts,
                    const DoctorOptions& options,
                    std::vector<Finding>& findings) {
  const bool thunderbolt = options.thunderbolt;
  if (absl::EqualsIgnoreCase(device.transport, "iWARP")) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat(device.name,
                     " is an iWARP device: its connections need rdma_cm, "
                     "which meshpool's verbs backend does not use"),
        "use an InfiniBand or RoCE device (or Soft-RoCE: `modprobe rdma_rxe`)");
    return false;
  }
  if (device.ports.empty()) {
    AddFinding(findings, Severity::kError,
               absl::StrCat(device.name, " reports no ports"),
               "check the driver's messages: `dmesg | grep -i rdma`");
    return false;
  }
  bool any_active = std::any_of(device.ports.begin(), device.ports.end(),
                                [](const auto& p) { return p.active; });
  bool usable_port = false;
  for (const rdma::RdmaPortInfo& port : device.ports) {
    if (!port.active) {
      DiagnoseInactivePort(device, port, !any_active, options.macos, findings);
      continue;
    }
    if (HasUsableGid(port, thunderbolt)) {
      usable_port = true;
      continue;
    }
    std::string netdev = NetdevOf(port);
    if (IsEthernet(port)) {
      AddFinding(findings, Severity::kError,
                 absl::StrCat(device.name, " port ", port.port,
                              " has no RoCE v2 IPv4 GID (",
                              netdev.empty() ? "its netdev" : netdev,
                              " has no IPv4 address)"),
                 absl::StrCat("`ip addr add <addr>/<len> dev ",
                              netdev.empty() ? "<netdev>" : netdev, "`"));
    } else {
      AddFinding(findings, Severity::kError,
                 absl::StrCat(device.name, " port ", port.port, " has no GID"),
                 "start a subnet manager (`opensm`) and check the port with "
                 "`ibv_devinfo -v`");
    }
  }
  // Under the thunderbolt profile the node executes atomics itself.
  const bool capable =
      thunderbolt ? DiagnoseUc(device, findings) : device.atomics;
  if (!thunderbolt && !device.atomics) {
    AddFinding(findings, Severity::kError,
               absl::StrCat(device.name,
                            " does not support RDMA atomics (CAS/FAA), which "
                            "meshpool's index updates need"),
               "use a device with atomics (ConnectX, or Soft-RoCE: `modprobe "
               "rdma_rxe`)");
  }
  // A registration that failed because of a problem reported above (the
  // transport refuses a port without a usable GID) adds nothing.
  bool blocked = !usable_port || !capable;
  bool registered = false;
  for (const RegistrationFacts& reg : facts.registrations) {
    if (reg.device != device.name) continue;
    if (reg.ok) {
      registered = true;
    } else if (!blocked) {
      AddFinding(findings, Severity::kError,
                 absl::StrCat("registering a ", FormatSize(reg.bytes),
                              " pool on ", device.name, " failed: ", reg.error),
                 RegistrationFix(reg, facts, options.macos));
    }
  }
  return usable_port && capable && registered;
}

std::string Verdict(const DoctorReport& report, const DoctorOptions& options) {
  const absl::string_view what =
      options.thunderbolt ? "uc (thunderbolt profile)" : "RDMA";
  if (report.can_serve) {
    return absl::StrCat("doctor: this host can serve ", what, " on ",
                        absl::StrJoin(report.serving_devices, ", "));
  }
  std::string why = "no device qualifies";
  for (const Finding& f : report.findings) {
    if (f.severity == Severity::kError) {
      why = f.what;
      break;
    }
  }
  return absl::StrCat("doctor: this host cannot serve ", what,
                      options.device.empty() ? "" : " on " + options.device,
                      ": ", why);
}

}  // namespace

void AddFinding(std::vector<Finding>& findings, Severity severity,
                std::string what, std::string fix) {
  findings.push_back({severity, std::move(what), std::move(fix)});
}

std::string LimitText(uint64_t bytes) {
  return bytes == kUnlimited ? "unlimited" : FormatSize(bytes);
}

absl::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "unknown";
}

DoctorReport Diagnose(const HostFacts& facts, const DoctorOptions& options) {
  DoctorReport report;
  std::vector<Finding>& findings = report.findings;
  if (!facts.list_ok && options.macos) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("libibverbs cannot list devices: ", facts.list_error),
        "check `ibv_devices`, and that RDMA is enabled (`rdma_ctl status`)");
  } else if (!facts.list_ok) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("libibverbs cannot list devices: ", facts.list_error),
        facts.kernel.uverbs_denied.empty()
            ? "`apt install libibverbs1 ibverbs-providers rdma-core`"
            : "run as root, or `sudo chmod 666 /dev/infiniband/uverbs*` "
              "(lasting: a udev rule or the `rdma` group)");
  } else if (facts.devices.empty()) {
    if (options.macos) {
      DiagnoseMacNoDevices(facts, findings);
    } else {
      DiagnoseLinuxNoDevices(facts, findings);
    }
  } else {
    bool found = options.device.empty();
    std::vector<std::string> names;
    for (const rdma::RdmaDeviceInfo& device : facts.devices) {
      names.push_back(device.name);
      if (!options.device.empty() && device.name != options.device) continue;
      found = true;
      if (DiagnoseDevice(device, facts, options, findings)) {
        report.serving_devices.push_back(device.name);
      }
    }
    if (!found) {
      AddFinding(
          findings, Severity::kError,
          absl::StrCat("no RDMA device named '", options.device,
                       "' (this host has ", absl::StrJoin(names, ", "), ")"),
          absl::StrCat("`meshpool doctor --device ", names.front(), "`"));
    }
  }
  if (options.macos) {
    DiagnoseMac(facts, options, findings);
  } else {
    DiagnoseLinux(facts, options, findings);
  }
  DiagnoseMesh(facts, options, findings);
  std::stable_sort(
      findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
        return static_cast<int>(a.severity) > static_cast<int>(b.severity);
      });
  report.can_serve = !report.serving_devices.empty();
  report.verdict = Verdict(report, options);
  return report;
}

std::string Ipv4OfGid(absl::string_view gid) {
  in6_addr addr{};
  if (inet_pton(AF_INET6, std::string(gid).c_str(), &addr) != 1) return "";
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
  if (!std::equal(kPrefix, kPrefix + 12, addr.s6_addr)) return "";
  char text[INET_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET, addr.s6_addr + 12, text, sizeof(text)) == nullptr) {
    return "";
  }
  return text;
}

bool IsIpv4MappedGid(absl::string_view gid) { return !Ipv4OfGid(gid).empty(); }

int Ipv4PrefixLength(uint32_t netmask_network_order) {
  const uint32_t mask = ntohl(netmask_network_order);
  int ones = 0;
  while (ones < 32 && (mask & (uint32_t{1} << (31 - ones))) != 0) ++ones;
  const uint32_t contiguous = ones == 0 ? 0 : ~uint32_t{0} << (32 - ones);
  return mask == contiguous ? ones : -1;
}

}  // namespace meshpool::tools
