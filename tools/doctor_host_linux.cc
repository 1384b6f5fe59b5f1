// GatherLinuxFacts: what the Linux kernel shows `meshpool doctor` (the
// memlock limit and CAP_IPC_LOCK, huge pages, RDMA devices in /sys and
// /dev, the rxe and uverbs modules). Linux only; macOS's facts come from
// doctor_mac_host.cc.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

namespace fs = std::filesystem;

// Where the kernel shows RDMA devices and their character devices.
constexpr const char* kSysfsClass = "/sys/class/infiniband";
constexpr const char* kDevDir = "/dev/infiniband";

std::optional<std::string> ReadSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Sorted names of `dir`'s entries starting with `prefix`; empty if absent.
std::vector<std::string> ListDir(const char* dir, absl::string_view prefix) {
  std::vector<std::string> names;
  std::error_code error;
  fs::directory_iterator it(dir, error), end;
  for (; !error && it != end; it.increment(error)) {
    std::string name = it->path().filename().string();
    if (absl::StartsWith(name, prefix)) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool Exists(const std::string& path) {
  std::error_code error;
  return fs::exists(path, error);
}

MemlockFacts GatherMemlock() {
  MemlockFacts facts;
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return facts;
  facts.known = true;
  facts.soft = limit.rlim_cur == RLIM_INFINITY ? kUnlimited : limit.rlim_cur;
  facts.hard = limit.rlim_max == RLIM_INFINITY ? kUnlimited : limit.rlim_max;
  std::optional<std::string> status = ReadSmallFile("/proc/self/status");
  facts.ipc_lock = status.has_value() && HasIpcLockCapability(*status);
  return facts;
}

HugePageFacts GatherHugePages() {
  std::optional<std::string> meminfo = ReadSmallFile("/proc/meminfo");
  HugePageFacts facts = meminfo ? ParseMeminfo(*meminfo) : HugePageFacts{};
  std::optional<std::string> thp =
      ReadSmallFile("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp) facts.transparent = ParseTransparentHugePages(*thp);
  std::optional<std::string> shmem =
      ReadSmallFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  if (shmem) facts.shmem = ParseTransparentHugePages(*shmem);
  return facts;
}

KernelFacts GatherKernel() {
  KernelFacts facts;
  facts.sysfs_devices = ListDir(kSysfsClass, "");
  facts.uverbs = ListDir(kDevDir, "uverbs");
  for (const std::string& name : facts.uverbs) {
    std::string path = absl::StrCat(kDevDir, "/", name);
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
      facts.uverbs_denied.push_back(path);
    }
  }
  facts.rdma_rxe_loaded = Exists("/sys/module/rdma_rxe");
  facts.ib_uverbs_loaded = Exists("/sys/module/ib_uverbs");
  return facts;
}

}  // namespace

void GatherLinuxFacts(HostFacts& facts) {
  facts.memlock = GatherMemlock();
  facts.hugepages = GatherHugePages();
  facts.kernel = GatherKernel();
}

}  // namespace meshpool::tools
