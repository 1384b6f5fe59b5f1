// The Linux kernel's part of `meshpool doctor`: why a Linux host lists no
// RDMA device (modules, /sys, /dev), the memlock limit and huge pages, and
// the parsers of /proc and /sys text. Its macOS counterpart is
// doctor_mac.cc.
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
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

// CAP_IPC_LOCK's bit in the capability sets (linux/capability.h).
constexpr int kCapIpcLockBit = 14;

constexpr absl::string_view kSoftRoceFix =
    "load Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "
    "eth0`, or install your NIC's driver and `apt install ibverbs-providers "
    "rdma-core`";

void DiagnoseMemlock(const MemlockFacts& memlock, uint64_t pool,
                     std::vector<Finding>& findings) {
  if (!memlock.known) {
    AddFinding(
        findings, Severity::kWarning, "could not read RLIMIT_MEMLOCK",
        "check it with `ulimit -l`; it must be `unlimited` or above the pool");
    return;
  }
  if (memlock.soft == kUnlimited || memlock.soft >= pool) return;
  std::string what = absl::StrCat("memlock limit is ", LimitText(memlock.soft),
                                  ", below the ", FormatSize(pool), " pool");
  if (memlock.ipc_lock) {
    AddFinding(findings, Severity::kInfo,
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
  AddFinding(
      findings, Severity::kError,
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
    AddFinding(
        findings, Severity::kWarning,
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
  AddFinding(findings, Severity::kInfo,
             absl::StrCat(huge.free, " of ", huge.total, " huge pages (",
                          FormatSize(huge.page_bytes), ") are free, the ",
                          FormatSize(pool), " pool needs ", needed,
                          ": it falls back to ", fallback),
             reserve);
}

}  // namespace

void DiagnoseLinuxNoDevices(const HostFacts& facts,
                            std::vector<Finding>& findings) {
  const KernelFacts& kernel = facts.kernel;
  if (kernel.sysfs_devices.empty()) {
    AddFinding(
        findings, Severity::kError,
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
    AddFinding(findings, Severity::kError,
               absl::StrCat(
                   "the kernel has RDMA devices (", kernel_devices,
                   ") but there is no /dev/infiniband/uverbs*",
                   kernel.ib_uverbs_loaded ? "" : ": ib_uverbs is not loaded"),
               "`modprobe ib_uverbs`");
  } else if (kernel.uverbs_denied.size() == kernel.uverbs.size()) {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("the kernel has RDMA devices (", kernel_devices,
                     ") but this user cannot open ",
                     absl::StrJoin(kernel.uverbs_denied, ", ")),
        "run as root, or `sudo chmod 666 /dev/infiniband/uverbs*` (lasting: "
        "a udev rule or the `rdma` group)");
  } else {
    AddFinding(
        findings, Severity::kError,
        absl::StrCat("the kernel has RDMA devices (", kernel_devices,
                     ") but libibverbs lists none: their user-space provider "
                     "is missing"),
        "`apt install ibverbs-providers rdma-core` (/etc/libibverbs.d must "
        "name the driver, e.g. rxe.driver)");
  }
}

void DiagnoseLinux(const HostFacts& facts, const DoctorOptions& options,
                   std::vector<Finding>& findings) {
  DiagnoseMemlock(facts.memlock, options.pool_bytes, findings);
  DiagnoseHugePages(facts.hugepages, options.pool_bytes, findings);
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

}  // namespace meshpool::tools
