// `meshpool doctor`: can this host serve its pool over RDMA, and if not,
// what exactly to run to fix it.
//
// Three stages, kept apart so the judgement is testable without a device:
//   GatherHostFacts  - reads the host (libibverbs, rlimits, /proc, /sys, /dev)
//                      and tries to register a pool on each usable device.
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
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"

namespace meshpool::tools {

// The pool the doctor registers when --pool-size is not given.
inline constexpr uint64_t kDefaultDoctorPoolBytes = 256ull << 20;
// A memlock limit of "unlimited".
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

struct DoctorOptions {
  std::string device;  // --device: judge only this one; empty: any
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

struct HostFacts {
  // ListRdmaDevices: OK with possibly no devices, or why libibverbs failed.
  bool list_ok = true;
  std::string list_error;
  std::vector<rdma::RdmaDeviceInfo> devices;
  MemlockFacts memlock;
  HugePageFacts hugepages;
  KernelFacts kernel;
  std::vector<RegistrationFacts> registrations;  // usable devices only
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

// Judges the facts. Pure: same facts, same report. A device can serve when
// it has an active port with a usable GID (RoCE v2 IPv4 on Ethernet, any on
// InfiniBand), supports atomics, and the pool registered on it. Under the
// thunderbolt profile it needs UC queue pairs and enough work requests per
// QP instead of atomics (the node executes them), and a link-local RoCE v2
// GID will do.
DoctorReport Diagnose(const HostFacts& facts, const DoctorOptions& options);

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

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_DOCTOR_H_
