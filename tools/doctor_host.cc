// GatherHostFacts: reads this host for `meshpool doctor`. Kept apart from
// Diagnose so tests of the judgement need neither libibverbs nor a device.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"
#include "store/pool.h"
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

// The first active port of `device`, if any.
std::optional<int> ActivePort(const rdma::RdmaDeviceInfo& device) {
  for (const rdma::RdmaPortInfo& port : device.ports) {
    if (port.active) return port.port;
  }
  return std::nullopt;
}

// Opens a verbs transport on `device` alone and times registering `pool`.
RegistrationFacts TryRegister(const rdma::RdmaDeviceInfo& device, int port,
                              const store::Pool& pool) {
  RegistrationFacts facts;
  facts.device = device.name;
  facts.bytes = pool.size();
  facts.page_kind = std::string(store::PageKindName(pool.page_kind()));
  rdma::VerbsOptions options;
  options.devices = {device.name};
  options.port = static_cast<uint8_t>(port);
  auto transport = rdma::CreateVerbsTransport(std::move(options));
  if (!transport.ok()) {
    facts.error =
        absl::StrCat("opening the device: ", transport.status().ToString());
    return facts;
  }
  auto start = std::chrono::steady_clock::now();
  auto region = (*transport)->RegisterMemory(pool.data(), pool.size());
  facts.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  facts.ok = region.ok();
  if (!region.ok()) facts.error = region.status().ToString();
  return facts;  // the region deregisters before the transport closes
}

std::vector<RegistrationFacts> GatherRegistrations(
    const std::vector<rdma::RdmaDeviceInfo>& devices,
    const DoctorOptions& options) {
  std::vector<RegistrationFacts> results;
  std::optional<store::Pool> pool;
  std::string pool_error;
  for (const rdma::RdmaDeviceInfo& device : devices) {
    if (!options.device.empty() && device.name != options.device) continue;
    std::optional<int> port = ActivePort(device);
    if (!port) continue;
    if (!pool && pool_error.empty()) {
      auto created =
          store::Pool::Create(options.pool_bytes, /*huge_pages=*/true);
      if (created.ok()) {
        pool.emplace(*std::move(created));
      } else {
        pool_error =
            absl::StrCat("mapping the pool: ", created.status().ToString());
      }
    }
    if (!pool) {
      RegistrationFacts failed;
      failed.device = device.name;
      failed.bytes = options.pool_bytes;
      failed.error = pool_error;
      results.push_back(std::move(failed));
      continue;
    }
    results.push_back(TryRegister(device, *port, *pool));
  }
  return results;
}

}  // namespace

HostFacts GatherHostFacts(const DoctorOptions& options) {
  HostFacts facts;
  auto devices = rdma::ListRdmaDevices();
  if (devices.ok()) {
    facts.devices = *std::move(devices);
  } else {
    facts.list_ok = false;
    facts.list_error = devices.status().ToString();
  }
  if (options.macos) {
    facts.mac = GatherMacFacts(ProcessCommandRunner());
  } else {
    facts.memlock = GatherMemlock();
    facts.hugepages = GatherHugePages();
    facts.kernel = GatherKernel();
  }
  facts.registrations = GatherRegistrations(facts.devices, options);
  return facts;
}

}  // namespace meshpool::tools
