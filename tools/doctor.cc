// Diagnose: facts -> findings and a verdict (pure), and the text parsers
// GatherHostFacts uses. Formatting lives in doctor_format.cc, reading the
// host in doctor_host.cc.
#include "tools/doctor.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
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
#include "rdma/devices.h"
#include "rdma/uc.h"

namespace meshpool::tools {
namespace {

// CAP_IPC_LOCK's bit in the capability sets (linux/capability.h).
constexpr int kCapIpcLockBit = 14;

constexpr absl::string_view kSoftRoceFix =
    "load Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "
    "eth0`, or install your NIC's driver and `apt install ibverbs-providers "
    "rdma-core`";

void Add(std::vector<Finding>& findings, Severity severity, std::string what,
         std::string fix) {
  findings.push_back({severity, std::move(what), std::move(fix)});
}

std::string LimitText(uint64_t bytes) {
  return bytes == kUnlimited ? "unlimited" : FormatSize(bytes);
}

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
    Add(findings, Severity::kError,
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
    Add(findings, Severity::kError,
        absl::StrCat(device.name, " allows ", device.max_qp_wr,
                     " work requests per queue pair; a uc link posts ", needed),
        "use a device with deeper queues");
    ok = false;
  }
  if (ok) {
    Add(findings, Severity::kInfo,
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
    Add(findings, severity,
        absl::StrCat(where,
                     ": its Thunderbolt cable is out, or the Mac at "
                     "the other end is off"),
        "check the cable at both ends (`system_profiler "
        "SPThunderboltDataType` shows what each port sees)");
    return;
  }
  if (IsEthernet(port)) {
    std::string netdev = NetdevOf(port);
    Add(findings, severity,
        absl::StrCat(where, " (Ethernet",
                     netdev.empty() ? "" : absl::StrCat(" on ", netdev), ")"),
        netdev.empty()
            ? "bring its network device up: `ip link set <netdev> up` (find "
              "it with `rdma link show`)"
            : absl::StrCat("`ip link set ", netdev, " up`"));
    return;
  }
  Add(findings, severity, absl::StrCat(where, " (InfiniBand)"),
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
    Add(findings, Severity::kError,
        absl::StrCat(device.name,
                     " is an iWARP device: its connections need rdma_cm, "
                     "which meshpool's verbs backend does not use"),
        "use an InfiniBand or RoCE device (or Soft-RoCE: `modprobe rdma_rxe`)");
    return false;
  }
  if (device.ports.empty()) {
    Add(findings, Severity::kError,
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
      Add(findings, Severity::kError,
          absl::StrCat(
              device.name, " port ", port.port, " has no RoCE v2 IPv4 GID (",
              netdev.empty() ? "its netdev" : netdev, " has no IPv4 address)"),
          absl::StrCat("`ip addr add <addr>/<len> dev ",
                       netdev.empty() ? "<netdev>" : netdev, "`"));
    } else {
      Add(findings, Severity::kError,
          absl::StrCat(device.name, " port ", port.port, " has no GID"),
          "start a subnet manager (`opensm`) and check the port with "
          "`ibv_devinfo -v`");
    }
  }
  // Under the thunderbolt profile the node executes atomics itself.
  const bool capable =
      thunderbolt ? DiagnoseUc(device, findings) : device.atomics;
  if (!thunderbolt && !device.atomics) {
    Add(findings, Severity::kError,
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
      Add(findings, Severity::kError,
          absl::StrCat("registering a ", FormatSize(reg.bytes), " pool on ",
                       device.name, " failed: ", reg.error),
          RegistrationFix(reg, facts, options.macos));
    }
  }
  return usable_port && capable && registered;
}

void DiagnoseNoDevices(const HostFacts& facts, std::vector<Finding>& findings) {
  const KernelFacts& kernel = facts.kernel;
  if (kernel.sysfs_devices.empty()) {
    Add(findings, Severity::kError,
        "no RDMA devices: libibverbs lists none and /sys/class/infiniband is "
        "empty",
        kernel.rdma_rxe_loaded
            ? "rdma_rxe is loaded: `rdma link add rxe0 type rxe netdev eth0`, "
              "or install your NIC's driver and `apt install ibverbs-providers "
              "rdma-core`"
            : std::string(kSoftRoceFix));
    return;
  }
  std::string kernel_devices = absl::StrJoin(kernel.sysfs_devices, ", ");
  if (kernel.uverbs.empty()) {
    Add(findings, Severity::kError,
        absl::StrCat(
            "the kernel has RDMA devices (", kernel_devices,
            ") but there is no /dev/infiniband/uverbs*",
            kernel.ib_uverbs_loaded ? "" : ": ib_uverbs is not loaded"),
        "`modprobe ib_uverbs`");
  } else if (kernel.uverbs_denied.size() == kernel.uverbs.size()) {
    Add(findings, Severity::kError,
        absl::StrCat("the kernel has RDMA devices (", kernel_devices,
                     ") but this user cannot open ",
                     absl::StrJoin(kernel.uverbs_denied, ", ")),
        "run as root, or `sudo chmod 666 /dev/infiniband/uverbs*` (lasting: "
        "a udev rule or the `rdma` group)");
  } else {
    Add(findings, Severity::kError,
        absl::StrCat("the kernel has RDMA devices (", kernel_devices,
                     ") but libibverbs lists none: their user-space provider "
                     "is missing"),
        "`apt install ibverbs-providers rdma-core` (/etc/libibverbs.d must "
        "name the driver, e.g. rxe.driver)");
  }
}

void DiagnoseMemlock(const MemlockFacts& memlock, uint64_t pool,
                     std::vector<Finding>& findings) {
  if (!memlock.known) {
    Add(findings, Severity::kWarning, "could not read RLIMIT_MEMLOCK",
        "check it with `ulimit -l`; it must be `unlimited` or above the pool");
    return;
  }
  if (memlock.soft == kUnlimited || memlock.soft >= pool) return;
  std::string what = absl::StrCat("memlock limit is ", LimitText(memlock.soft),
                                  ", below the ", FormatSize(pool), " pool");
  if (memlock.ipc_lock) {
    Add(findings, Severity::kInfo,
        absl::StrCat(what,
                     ", but this process has CAP_IPC_LOCK, which "
                     "overrides it; a node started without it fails"),
        "`ulimit -l unlimited` where nodes start");
    return;
  }
  if (memlock.hard != kUnlimited && memlock.hard < pool) {
    absl::StrAppend(&what, " (hard limit ", LimitText(memlock.hard),
                    ": raising it needs root)");
  }
  Add(findings, Severity::kError,
      absl::StrCat(what, ": registering the pool will fail"),
      "`ulimit -l unlimited` before starting the node (lasting: `* - memlock "
      "unlimited` in /etc/security/limits.d/meshpool.conf; systemd: "
      "LimitMEMLOCK=infinity)");
}

void DiagnoseHugePages(const HugePageFacts& huge, uint64_t pool,
                       std::vector<Finding>& findings) {
  if (!huge.known || huge.page_bytes == 0) return;
  uint64_t needed = (pool + huge.page_bytes - 1) / huge.page_bytes;
  if (huge.free >= needed) return;
  uint64_t in_use = huge.total > huge.free ? huge.total - huge.free : 0;
  std::string reserve =
      absl::StrCat("`sysctl -w vm.nr_hugepages=", in_use + needed, "`");
  // A node's pool is shared memory (a memfd) unless it runs --no-shm, so
  // its transparent huge pages follow shmem_enabled, not enabled.
  const bool shmem_off = huge.shmem == "never" || huge.shmem == "deny";
  if (shmem_off) {
    Add(findings, Severity::kWarning,
        absl::StrCat(
            huge.free, " of ", huge.total, " huge pages (",
            FormatSize(huge.page_bytes), ") are free, the ", FormatSize(pool),
            " pool needs ", needed,
            ", and shared-memory transparent huge pages are off "
            "(/sys/kernel/mm/transparent_hugepage/shmem_enabled: ",
            huge.shmem,
            "): the pool gets 4 KiB pages, and clients on this host write "
            "into it 2-6 x slower than with huge pages (PUTs over shared "
            "memory, measured on a 2-core VM)"),
        absl::StrCat(reserve,
                     ", or `echo advise > "
                     "/sys/kernel/mm/transparent_hugepage/shmem_enabled` "
                     "(lasting: the tmpfiles.d line `w "
                     "/sys/kernel/mm/transparent_hugepage/shmem_enabled - - - "
                     "- advise`)"));
    return;
  }
  std::string fallback = !huge.shmem.empty() || huge.transparent != "never"
                             ? "transparent huge pages"
                             : "normal pages (transparent huge pages are off)";
  Add(findings, Severity::kInfo,
      absl::StrCat(huge.free, " of ", huge.total, " huge pages (",
                   FormatSize(huge.page_bytes), ") are free, the ",
                   FormatSize(pool), " pool needs ", needed,
                   ": it falls back to ", fallback),
      reserve);
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
    Add(findings, Severity::kError,
        absl::StrCat("libibverbs cannot list devices: ", facts.list_error),
        "check `ibv_devices`, and that RDMA is enabled (`rdma_ctl status`)");
  } else if (!facts.list_ok) {
    Add(findings, Severity::kError,
        absl::StrCat("libibverbs cannot list devices: ", facts.list_error),
        facts.kernel.uverbs_denied.empty()
            ? "`apt install libibverbs1 ibverbs-providers rdma-core`"
            : "run as root, or `sudo chmod 666 /dev/infiniband/uverbs*` "
              "(lasting: a udev rule or the `rdma` group)");
  } else if (facts.devices.empty()) {
    if (options.macos) {
      DiagnoseMacNoDevices(facts, findings);
    } else {
      DiagnoseNoDevices(facts, findings);
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
      Add(findings, Severity::kError,
          absl::StrCat("no RDMA device named '", options.device,
                       "' (this host has ", absl::StrJoin(names, ", "), ")"),
          absl::StrCat("`meshpool doctor --device ", names.front(), "`"));
    }
  }
  if (options.macos) {
    DiagnoseMac(facts, options, findings);
  } else {
    DiagnoseMemlock(facts.memlock, options.pool_bytes, findings);
    DiagnoseHugePages(facts.hugepages, options.pool_bytes, findings);
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

HugePageFacts ParseMeminfo(absl::string_view meminfo) {
  HugePageFacts facts;
  int seen = 0;
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(": \t"), absl::SkipEmpty());
    if (parts.size() < 2) continue;
    uint64_t value = 0;
    if (!absl::SimpleAtoi(parts[1], &value)) continue;
    if (parts[0] == "HugePages_Total") {
      facts.total = value;
      ++seen;
    } else if (parts[0] == "HugePages_Free") {
      facts.free = value;
      ++seen;
    } else if (parts[0] == "Hugepagesize") {
      bool kib = parts.size() > 2 && absl::EqualsIgnoreCase(parts[2], "kB");
      facts.page_bytes = kib ? value << 10 : value;
      ++seen;
    }
  }
  facts.known = seen == 3;
  return facts;
}

std::string ParseTransparentHugePages(absl::string_view enabled) {
  size_t open = enabled.find('[');
  size_t close = enabled.find(']', open);
  if (open == absl::string_view::npos || close == absl::string_view::npos) {
    return "";
  }
  return std::string(enabled.substr(open + 1, close - open - 1));
}

bool HasIpcLockCapability(absl::string_view proc_status) {
  for (absl::string_view line : absl::StrSplit(proc_status, '\n')) {
    if (!absl::ConsumePrefix(&line, "CapEff:")) continue;
    uint64_t caps = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &caps)) {
      return false;
    }
    return (caps >> kCapIpcLockBit) & 1;
  }
  return false;
}

bool IsIpv4MappedGid(absl::string_view gid) {
  in6_addr addr{};
  if (inet_pton(AF_INET6, std::string(gid).c_str(), &addr) != 1) return false;
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
  return std::equal(kPrefix, kPrefix + 12, addr.s6_addr);
}

}  // namespace meshpool::tools
