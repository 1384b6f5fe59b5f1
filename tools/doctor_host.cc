// GatherHostFacts: reads this host for `meshpool doctor` (libibverbs and a
// pool registered on each device here; the kernel's facts in
// doctor_host_linux.cc, a Mac's in doctor_mac_host.cc). Kept apart from
// Diagnose so tests of the judgement need neither libibverbs nor a device.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"
#include "store/pool.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

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

// This host's IPv4 interface addresses, in getifaddrs' order.
absl::StatusOr<std::vector<InterfaceAddress>> InterfaceAddresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return ErrnoToStatus(errno, "getifaddrs");
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_netmask == nullptr ||
        a->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    const auto* address = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    const auto* mask = reinterpret_cast<const sockaddr_in*>(a->ifa_netmask);
    char text[INET_ADDRSTRLEN] = {};
    if (inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text)) == nullptr) {
      continue;
    }
    const int prefix = Ipv4PrefixLength(mask->sin_addr.s_addr);
    if (prefix < 0) continue;  // not a subnet: no cable can be told from it
    out.push_back({a->ifa_name, text, prefix});
  }
  ::freeifaddrs(list);
  return out;
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
#ifdef __linux__
    GatherLinuxFacts(facts);
#else
    // Only Linux and macOS are planned; elsewhere the kernel's facts stay
    // unknown and the findings say so.
#endif
  }
  facts.registrations = GatherRegistrations(facts.devices, options);
  absl::StatusOr<std::vector<InterfaceAddress>> addresses =
      InterfaceAddresses();
  if (addresses.ok()) {
    facts.addresses = *std::move(addresses);
  } else {
    facts.addresses_error = addresses.status().ToString();
  }
  return facts;
}

}  // namespace meshpool::tools
