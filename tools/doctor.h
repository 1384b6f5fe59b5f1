// `meshpool doctor`: can this host serve its pool over RDMA, and if not,
// what exactly to run to fix it.
//
// Three stages, kept apart so the judgement is testable without a device:
//   GatherHostFacts  - reads the host (libibverbs; the IPv4 addresses from
//                      getifaddrs; on Linux rlimits, /proc, /sys, /dev; on
//                      macOS Apple's tools, GatherMacFacts) and tries to
//                      register a pool on each usable device.
//                      Everything it finds, failures included, becomes a fact.
//   Diagnose         - a pure function from facts to findings (one line each:
//                      what is wrong, the command that fixes it) and a verdict.
//   FormatText/Json  - the facts, findings and verdict for people or scripts.
//
// Thread-safety: plain structs and free functions; GatherHostFacts touches
// process-wide state (it maps and pins memory) and should run alone.
#ifndef MESHPOOL_TOOLS_DOCTOR_H_
#define MESHPOOL_TOOLS_DOCTOR_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"

namespace meshpool::tools {

// The pool the doctor registers when --pool-size is not given.
inline constexpr uint64_t kDefaultDoctorPoolBytes = 256ull << 20;
// A memlock limit of "unlimited".
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

struct Hostfile;  // tools/hostfile.h

struct DoctorOptions {
  std::string device;  // --device: judge only this one; empty: any
  // --platform macos: judge a Mac (Apple's tools below, no Linux kernel
  // checks); the default on macOS. Elsewhere it runs the same checks on
  // whatever `rdma_ctl`, `system_profiler`, ... are on PATH, which is how
  // they are tested with recorded outputs.
  bool macos = false;
  // --hostfile: the cluster's hosts and cables, and which of them this host
  // is (--host-name); the links of this host are checked against the
  // devices found, and the mesh for pairs without a cable. Null: no mesh
  // check. Not owned; outlives Diagnose.
  const Hostfile* hostfile = nullptr;
  std::string host_name;
  // --profile thunderbolt: judge for the uc backend on UC queue pairs under
  // Apple's limits (rdma/uc.h) instead of for verbs RC.
  bool thunderbolt = false;
  uint64_t pool_bytes = kDefaultDoctorPoolBytes;
  bool json = false;
};

// RLIMIT_MEMLOCK, and whether the process may lock memory regardless.
struct MemlockFacts {
  bool known = false;
  uint64_t soft = 0;      // bytes, or kUnlimited
  uint64_t hard = 0;      // bytes, or kUnlimited
  bool ipc_lock = false;  // CAP_IPC_LOCK in the effective set: limit ignored
};

// /proc/meminfo and /sys/kernel/mm/transparent_hugepage/{enabled,
// shmem_enabled}.
struct HugePageFacts {
  bool known = false;       // /proc/meminfo was readable
  uint64_t total = 0;       // HugePages_Total (pages)
  uint64_t free = 0;        // HugePages_Free (pages)
  uint64_t page_bytes = 0;  // Hugepagesize
  std::string transparent;  // selected THP mode: "always", "madvise",
                            // "never"; empty when unknown
  // Selected THP mode for shared memory (what a node's pool is when it
  // serves clients on its host, the default): "always", "within_size",
  // "advise", "never", "deny", "force"; empty when unknown.
  std::string shmem;
};

// What the kernel exposes, independent of libibverbs.
struct KernelFacts {
  std::vector<std::string> sysfs_devices;  // /sys/class/infiniband/*
  std::vector<std::string> uverbs;         // /dev/infiniband/uverbs*
  std::vector<std::string> uverbs_denied;  // of those, not openable rw
  bool rdma_rxe_loaded = false;            // /sys/module/rdma_rxe
  bool ib_uverbs_loaded = false;           // /sys/module/ib_uverbs
};

// One attempt at registering the pool on one device.
struct RegistrationFacts {
  std::string device;
  bool ok = false;
  std::string error;  // the status when !ok
  uint64_t bytes = 0;
  double seconds = 0;     // time RegisterMemory took
  std::string page_kind;  // how the buffer was backed
};

// ---- macOS -----------------------------------------------------------------
// `rdma_ctl status`: RDMA over Thunderbolt is switched on only from
// Recovery.
enum class RdmaCtlState { kUnknown, kEnabled, kDisabled };

// One port of `system_profiler SPThunderboltDataType`.
struct ThunderboltPort {
  std::string bus;           // "Thunderbolt/USB4 Bus 2"
  std::string receptacle;    // the port's number on the case, "" if none
  bool connected = false;    // "Status: Device connected"
  double speed_gbps = 0;     // "Speed: 80 Gb/s"; 0 when not given
  bool speed_up_to = false;  // "Speed: Up to 40 Gb/s": a bound, not a link
  std::string peer;          // the device on the cable ("Mac Studio"), if any
  std::string peer_model;    // its "Device Name" ("Mac16,9"), if given
  bool peer_rdma = false;    // it offers a service keyed "rdma"
};

// One interface of `ifconfig`.
struct MacInterface {
  std::string name;     // "en2"
  bool up = false;      // flags hold UP
  bool active = false;  // "status: active"
  std::vector<std::string> ipv4;
  bool ipv6_link_local = false;
  std::vector<std::string> members;  // a bridge's member interfaces
};

struct MacFacts {
  bool gathered = false;  // the macOS checks ran
  // Each source: whether its command ran, and why not.
  bool rdma_ctl_ran = false;
  std::string rdma_ctl_error;
  std::string rdma_ctl_output;  // trimmed
  RdmaCtlState rdma = RdmaCtlState::kUnknown;
  bool profiler_ran = false;
  std::string profiler_error;
  std::vector<ThunderboltPort> thunderbolt;
  // `networksetup -listallhardwareports`: interface -> hardware port
  // ("en2" -> "Thunderbolt 1", "bridge0" -> "Thunderbolt Bridge").
  bool hardware_ports_ran = false;
  std::vector<std::pair<std::string, std::string>> hardware_ports;
  bool ifconfig_ran = false;
  std::vector<MacInterface> interfaces;
  // `sysctl -n hw.memsize` and `sysctl -n iogpu.wired_limit_mb` (0: the
  // macOS default for how much memory the GPU may wire).
  uint64_t memsize = 0;  // 0 when unknown
  bool wired_limit_known = false;
  uint64_t wired_limit_mb = 0;
};

// One IPv4 address of a network interface (getifaddrs), with its prefix:
// what ties an RDMA device (through its IPv4-mapped GID) to the subnet of
// its cable, so `meshpool launch --discover-links` can tell which cable
// joins which hosts.
struct InterfaceAddress {
  std::string interface;  // "en2"
  std::string address;    // "10.0.12.1"
  int prefix = 0;         // 30 for netmask 255.255.255.252
};

struct HostFacts {
  // ListRdmaDevices: OK with possibly no devices, or why libibverbs failed.
  bool list_ok = true;
  std::string list_error;
  std::vector<rdma::RdmaDeviceInfo> devices;
  MemlockFacts memlock;
  HugePageFacts hugepages;
  KernelFacts kernel;
  std::vector<RegistrationFacts> registrations;  // usable devices only
  MacFacts mac;                                  // under --platform macos
  // This host's IPv4 addresses; addresses_error says why they are unknown.
  std::string addresses_error;
  std::vector<InterfaceAddress> addresses;
};

enum class Severity { kInfo, kWarning, kError };
absl::string_view SeverityName(
    Severity severity);  // "info", "warning", "error"

struct Finding {
  Severity severity = Severity::kInfo;
  std::string what;  // what is wrong, one sentence
  std::string fix;   // the command(s) that fix it; may be empty for info
};

struct DoctorReport {
  std::vector<Finding> findings;
  std::vector<std::string> serving_devices;  // devices that can serve RDMA
  bool can_serve = false;
  std::string verdict;  // "doctor: this host can serve RDMA on rxe0", ...
  int exit_code() const { return can_serve ? 0 : 1; }
};

// Reads this host. Never fails: what cannot be read is recorded as unknown
// or as an error in the facts. Registers options.pool_bytes on every device
// with an active port (only options.device when set).
HostFacts GatherHostFacts(const DoctorOptions& options);

// Runs one command (argv[0] looked up on PATH) and returns its standard
// output; NotFound when it is not installed, Unavailable when it exits
// non-zero (with its standard error).
using CommandRunner = std::function<absl::StatusOr<std::string>(
    const std::vector<std::string>& argv)>;
// Runs commands as processes, with a 10 s limit each.
CommandRunner ProcessCommandRunner();
// The macOS facts from Apple's tools, run through `run`. Never fails: a
// command that cannot run is recorded in the facts.
MacFacts GatherMacFacts(const CommandRunner& run);

// Judges the facts. Pure: same facts, same report. A device can serve when
// it has an active port with a usable GID (RoCE v2 IPv4 on Ethernet, any on
// InfiniBand), supports atomics, and the pool registered on it. Under the
// thunderbolt profile it needs UC queue pairs and enough work requests per
// QP instead of atomics (the node executes them), and a link-local RoCE v2
// GID will do.
DoctorReport Diagnose(const HostFacts& facts, const DoctorOptions& options);

// For the parts of Diagnose below: appends one finding; a memlock limit as
// text ("unlimited" or a size).
void AddFinding(std::vector<Finding>& findings, Severity severity,
                std::string what, std::string fix);
std::string LimitText(uint64_t bytes);

// The Linux kernel's part of Diagnose (doctor_linux.cc): the memlock limit
// and huge pages against the pool, and why a Linux host lists no device
// (modules, /sys, /dev, providers).
void DiagnoseLinux(const HostFacts& facts, const DoctorOptions& options,
                   std::vector<Finding>& findings);
void DiagnoseLinuxNoDevices(const HostFacts& facts,
                            std::vector<Finding>& findings);
// The Linux kernel's facts (doctor_host_linux.cc, Linux only): memlock,
// huge pages, RDMA devices in /sys and /dev.
void GatherLinuxFacts(HostFacts& facts);

// The parts of Diagnose by concern (doctor_mac.cc), exposed for it:
// the macOS findings (rdma_ctl, Thunderbolt links and their speed, the
// Thunderbolt Bridge, each RDMA interface's addresses, memory), and why a
// Mac lists no RDMA device.
void DiagnoseMac(const HostFacts& facts, const DoctorOptions& options,
                 std::vector<Finding>& findings);
void DiagnoseMacNoDevices(const HostFacts& facts,
                          std::vector<Finding>& findings);
// The mesh of options.hostfile: this host's links against its devices (one
// error per link whose device is missing or down), the pairs of hosts no
// cable joins, and on a Mac the Thunderbolt ports against the links.
void DiagnoseMesh(const HostFacts& facts, const DoctorOptions& options,
                  std::vector<Finding>& findings);

// A compact listing of the facts, then the findings, then the verdict.
std::string FormatText(const HostFacts& facts, const DoctorReport& report,
                       const DoctorOptions& options);
// The same as one JSON object (facts, findings, verdict, can_serve).
std::string FormatJson(const HostFacts& facts, const DoctorReport& report,
                       const DoctorOptions& options);

// ---- Pure parsers, exposed for tests --------------------------------------
// Fills total/free/page_bytes from /proc/meminfo text; known = all found.
HugePageFacts ParseMeminfo(absl::string_view meminfo);
// The bracketed mode of transparent_hugepage/enabled ("always [madvise]
// never" -> "madvise"); empty when none is bracketed.
std::string ParseTransparentHugePages(absl::string_view enabled);
// Whether /proc/self/status text shows CAP_IPC_LOCK in CapEff.
bool HasIpcLockCapability(absl::string_view proc_status);
// Whether `gid` (as ListRdmaDevices formats it) is an IPv4-mapped address.
bool IsIpv4MappedGid(absl::string_view gid);
// The IPv4 address an IPv4-mapped GID holds ("::ffff:10.0.12.1" ->
// "10.0.12.1"); empty when `gid` is not one.
std::string Ipv4OfGid(absl::string_view gid);
// The prefix length of an IPv4 netmask in network byte order (255.255.255.252
// -> 30); -1 when its ones are not contiguous.
int Ipv4PrefixLength(uint32_t netmask_network_order);
// `rdma_ctl status` output: "enabled" or "disabled" (any case, whitespace
// around); kUnknown for anything else.
RdmaCtlState ParseRdmaCtlStatus(absl::string_view output);
// Every port of every bus in `system_profiler SPThunderboltDataType`'s text.
std::vector<ThunderboltPort> ParseThunderboltProfile(absl::string_view text);
// (interface, hardware port) pairs of `networksetup -listallhardwareports`.
std::vector<std::pair<std::string, std::string>> ParseHardwarePorts(
    absl::string_view text);
// The interfaces of BSD `ifconfig` output (macOS's format).
std::vector<MacInterface> ParseIfconfig(absl::string_view text);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_DOCTOR_H_
