// FormatText / FormatJson for `meshpool doctor`.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "common/json.h"
#include "rdma/devices.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

// Bytes in a GiB, for the registration rate.
constexpr double kGiB = static_cast<double>(1ull << 30);

std::string ListOrNone(const std::vector<std::string>& items) {
  return items.empty() ? "none" : absl::StrJoin(items, ", ");
}

double MsPerGiB(const RegistrationFacts& reg) {
  return reg.bytes == 0 ? 0 : reg.seconds * 1e3 * kGiB / reg.bytes;
}

void AppendDevice(std::string& out, const rdma::RdmaDeviceInfo& device) {
  // Soft-RoCE reports a max_mr_size of 2^64 - 1: no limit.
  absl::StrAppendFormat(
      &out,
      "  %-10s %s  max_mr_size=%s max_qp_rd_atom=%d max_qp_wr=%d "
      "max_inline_data=%d atomics=%s uc=%s\n",
      device.name, device.transport,
      device.max_mr_size == ~0ull ? "unlimited"
                                  : FormatSize(device.max_mr_size),
      device.max_qp_rd_atom, device.max_qp_wr, device.max_inline_data,
      device.atomics ? "yes" : "no", device.uc_queue_pairs ? "yes" : "no");
  for (const rdma::RdmaPortInfo& port : device.ports) {
    absl::StrAppendFormat(&out, "    port %d  %-8s %-10s mtu %d\n", port.port,
                          port.state, port.link_layer, port.active_mtu);
    for (const rdma::RdmaGidInfo& gid : port.gids) {
      absl::StrAppendFormat(&out, "      gid %-3d %-40s %-11s %s\n", gid.index,
                            gid.gid, gid.type, gid.netdev);
    }
  }
}

// ---- JSON -----------------------------------------------------------------
const char* Bool(bool value) { return value ? "true" : "false"; }

// A byte count, or the string "unlimited".
std::string Limit(uint64_t bytes) {
  return bytes == kUnlimited ? JsonQuote("unlimited") : absl::StrCat(bytes);
}

std::string Strings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back(JsonQuote(item));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string DeviceJson(const rdma::RdmaDeviceInfo& device) {
  std::vector<std::string> ports;
  for (const rdma::RdmaPortInfo& port : device.ports) {
    std::vector<std::string> gids;
    for (const rdma::RdmaGidInfo& gid : port.gids) {
      gids.push_back(absl::StrCat("{\"index\": ", gid.index,
                                  ", \"gid\": ", JsonQuote(gid.gid),
                                  ", \"type\": ", JsonQuote(gid.type),
                                  ", \"netdev\": ", JsonQuote(gid.netdev), "}"));
    }
    ports.push_back(absl::StrCat(
        "{\"port\": ", port.port, ", \"state\": ", JsonQuote(port.state),
        ", \"active\": ", Bool(port.active), ", \"link_layer\": ",
        JsonQuote(port.link_layer), ", \"active_mtu\": ", port.active_mtu,
        ", \"gids\": [", absl::StrJoin(gids, ", "), "]}"));
  }
  return absl::StrCat("{\"name\": ", JsonQuote(device.name),
                      ", \"transport\": ", JsonQuote(device.transport),
                      ", \"max_mr_size\": ", device.max_mr_size,
                      ", \"max_qp_rd_atom\": ", device.max_qp_rd_atom,
                      ", \"max_qp_wr\": ", device.max_qp_wr,
                      ", \"max_inline_data\": ", device.max_inline_data,
                      ", \"atomics\": ", Bool(device.atomics),
                      ", \"uc_queue_pairs\": ", Bool(device.uc_queue_pairs),
                      ", \"ports\": [", absl::StrJoin(ports, ", "), "]}");
}

void AppendRegistrations(std::string& out, const HostFacts& facts,
                         const DoctorOptions& options) {
  if (facts.registrations.empty()) return;
  absl::StrAppend(&out, "pool registration (", FormatSize(options.pool_bytes),
                  ", ", facts.registrations.front().page_kind, "):\n");
  for (const RegistrationFacts& reg : facts.registrations) {
    if (reg.ok) {
      absl::StrAppendFormat(&out, "  %-10s ok in %.0f ms (%.0f ms/GiB)\n",
                            reg.device, reg.seconds * 1e3, MsPerGiB(reg));
    } else {
      absl::StrAppendFormat(&out, "  %-10s FAILED: %s\n", reg.device,
                            reg.error);
    }
  }
}

// This host's IPv4 addresses, one line: which subnet each cable is on.
void AppendAddresses(std::string& out, const HostFacts& facts) {
  std::vector<std::string> items;
  for (const InterfaceAddress& a : facts.addresses) {
    items.push_back(absl::StrCat(a.interface, " ", a.address, "/", a.prefix));
  }
  absl::StrAppend(&out, "IPv4 addresses: ",
                  !facts.addresses_error.empty()
                      ? absl::StrCat("unknown (", facts.addresses_error, ")")
                  : items.empty() ? "none"
                                  : absl::StrJoin(items, ", "),
                  "\n");
}

// The findings, then the verdict last.
void AppendFindings(std::string& out, const DoctorReport& report) {
  absl::StrAppend(&out, "findings:", report.findings.empty() ? " none" : "",
                  "\n");
  for (const Finding& f : report.findings) {
    absl::StrAppend(&out, "  ", SeverityName(f.severity), ": ", f.what,
                    f.fix.empty() ? "" : absl::StrCat("; fix: ", f.fix), "\n");
  }
  absl::StrAppend(&out, report.verdict, "\n");
}

const char* RdmaCtlName(const MacFacts& mac) {
  if (!mac.rdma_ctl_ran) return "unknown";
  switch (mac.rdma) {
    case RdmaCtlState::kEnabled:
      return "enabled";
    case RdmaCtlState::kDisabled:
      return "disabled";
    case RdmaCtlState::kUnknown:
      break;
  }
  return "unreadable";
}

// The macOS facts, in place of the Linux kernel, memlock and huge pages.
void AppendMac(std::string& out, const MacFacts& mac) {
  absl::StrAppend(&out, "macOS: rdma_ctl ", RdmaCtlName(mac));
  if (mac.memsize != 0) {
    absl::StrAppend(&out, "; memory ", FormatSize(mac.memsize));
  }
  if (mac.wired_limit_known) {
    absl::StrAppend(&out, "; iogpu.wired_limit_mb ", mac.wired_limit_mb,
                    mac.wired_limit_mb == 0 ? " (default)" : "");
  }
  absl::StrAppend(&out, "\n");
  if (!mac.profiler_ran) {
    absl::StrAppend(&out, "thunderbolt: unknown (", mac.profiler_error, ")\n");
  } else {
    absl::StrAppend(&out, "thunderbolt: ", mac.thunderbolt.size(), " ports\n");
  }
  for (const ThunderboltPort& port : mac.thunderbolt) {
    absl::StrAppend(&out, "  ", port.bus,
                    port.receptacle.empty()
                        ? ""
                        : absl::StrCat(" receptacle ", port.receptacle),
                    ": ", port.connected ? "connected" : "nothing connected");
    if (port.speed_gbps > 0) {
      absl::StrAppend(&out, ", ", port.speed_up_to ? "up to " : "",
                      port.speed_gbps, " Gb/s");
    }
    if (!port.peer.empty()) {
      absl::StrAppend(
          &out, ", ", port.peer,
          port.peer_model.empty() ? "" : " (" + port.peer_model + ")",
          port.peer_rdma ? ", rdma" : "");
    }
    absl::StrAppend(&out, "\n");
  }
  for (const MacInterface& i : mac.interfaces) {
    if (i.members.empty() && !absl::StartsWith(i.name, "en")) continue;
    std::string port;
    for (const auto& [device, name] : mac.hardware_ports) {
      if (device == i.name) port = name;
    }
    if (i.members.empty() && !absl::StartsWith(port, "Thunderbolt")) continue;
    absl::StrAppend(
        &out, "  ", i.name, port.empty() ? "" : " (" + port + ")", ": ",
        i.up ? (i.active ? "up" : "up, no link") : "down",
        i.ipv4.empty() ? "" : ", " + absl::StrJoin(i.ipv4, " "),
        i.ipv6_link_local ? ", fe80::" : "",
        i.members.empty() ? "" : ", members " + absl::StrJoin(i.members, " "),
        "\n");
  }
}

std::string MacJson(const MacFacts& mac) {
  std::vector<std::string> ports, interfaces;
  for (const ThunderboltPort& p : mac.thunderbolt) {
    ports.push_back(absl::StrCat(
        "{\"bus\": ", JsonQuote(p.bus), ", \"receptacle\": ",
        JsonQuote(p.receptacle), ", \"connected\": ", Bool(p.connected),
        ", \"speed_gbps\": ", absl::StrFormat("%.0f", p.speed_gbps),
        ", \"speed_up_to\": ", Bool(p.speed_up_to), ", \"peer\": ",
        JsonQuote(p.peer), ", \"peer_model\": ", JsonQuote(p.peer_model),
        ", \"peer_rdma\": ", Bool(p.peer_rdma), "}"));
  }
  for (const MacInterface& i : mac.interfaces) {
    interfaces.push_back(absl::StrCat(
        "{\"name\": ", JsonQuote(i.name), ", \"up\": ", Bool(i.up),
        ", \"ipv4\": ", Strings(i.ipv4), ", \"ipv6_link_local\": ",
        Bool(i.ipv6_link_local), ", \"members\": ", Strings(i.members), "}"));
  }
  return absl::StrCat(
      "{\"rdma_ctl\": ", JsonQuote(RdmaCtlName(mac)),
      ", \"thunderbolt_ports\": [", absl::StrJoin(ports, ", "), "]",
      ", \"interfaces\": [", absl::StrJoin(interfaces, ", "), "]",
      ", \"memsize\": ", mac.memsize, ", \"wired_limit_mb\": ",
      mac.wired_limit_known ? absl::StrCat(mac.wired_limit_mb) : "null", "}");
}

}  // namespace

std::string FormatText(const HostFacts& facts, const DoctorReport& report,
                       const DoctorOptions& options) {
  std::string out;
  if (!facts.list_ok) {
    absl::StrAppend(
        &out, "RDMA devices (libibverbs): error: ", facts.list_error, "\n");
  } else if (facts.devices.empty()) {
    absl::StrAppend(&out, "RDMA devices (libibverbs): none\n");
  } else {
    absl::StrAppend(&out, "RDMA devices (libibverbs): ", facts.devices.size(),
                    "\n");
    for (const rdma::RdmaDeviceInfo& device : facts.devices) {
      AppendDevice(out, device);
    }
  }
  AppendAddresses(out, facts);
  if (facts.mac.gathered) {
    AppendMac(out, facts.mac);
    AppendRegistrations(out, facts, options);
    AppendFindings(out, report);
    return out;
  }
  const KernelFacts& kernel = facts.kernel;
  absl::StrAppend(
      &out, "kernel: /sys/class/infiniband: ", ListOrNone(kernel.sysfs_devices),
      "; /dev/infiniband: ", ListOrNone(kernel.uverbs),
      kernel.uverbs_denied.empty()
          ? ""
          : absl::StrCat(" (no access: ", ListOrNone(kernel.uverbs_denied),
                         ")"),
      "; modules: rdma_rxe ", kernel.rdma_rxe_loaded ? "loaded" : "not loaded",
      ", ib_uverbs ", kernel.ib_uverbs_loaded ? "loaded" : "not loaded", "\n");
  const MemlockFacts& memlock = facts.memlock;
  if (memlock.known) {
    absl::StrAppend(&out, "memlock: soft ", LimitText(memlock.soft), ", hard ",
                    LimitText(memlock.hard),
                    memlock.ipc_lock && memlock.soft != kUnlimited
                        ? " (not enforced: CAP_IPC_LOCK)"
                        : "",
                    "; pool ", FormatSize(options.pool_bytes), "\n");
  } else {
    absl::StrAppend(&out, "memlock: unknown\n");
  }
  const HugePageFacts& huge = facts.hugepages;
  if (huge.known) {
    absl::StrAppend(&out, "huge pages: ", huge.free, " of ", huge.total,
                    " free, ", FormatSize(huge.page_bytes), " each");
  } else {
    absl::StrAppend(&out, "huge pages: unknown");
  }
  absl::StrAppend(&out, "; transparent: ",
                  huge.transparent.empty() ? "unknown" : huge.transparent,
                  "; shmem: ", huge.shmem.empty() ? "unknown" : huge.shmem,
                  "\n");
  AppendRegistrations(out, facts, options);
  AppendFindings(out, report);
  return out;
}

std::string FormatJson(const HostFacts& facts, const DoctorReport& report,
                       const DoctorOptions& options) {
  std::vector<std::string> devices, registrations, findings, addresses;
  for (const rdma::RdmaDeviceInfo& device : facts.devices) {
    devices.push_back(DeviceJson(device));
  }
  for (const InterfaceAddress& a : facts.addresses) {
    addresses.push_back(absl::StrCat("{\"interface\": ", JsonQuote(a.interface),
                                     ", \"address\": ", JsonQuote(a.address),
                                     ", \"prefix\": ", a.prefix, "}"));
  }
  for (const RegistrationFacts& reg : facts.registrations) {
    registrations.push_back(absl::StrCat(
        "{\"device\": ", JsonQuote(reg.device), ", \"ok\": ", Bool(reg.ok),
        ", \"error\": ", JsonQuote(reg.error), ", \"bytes\": ", reg.bytes,
        ", \"seconds\": ", absl::StrFormat("%.6f", reg.seconds),
        ", \"ms_per_gib\": ", absl::StrFormat("%.1f", MsPerGiB(reg)),
        ", \"page_kind\": ", JsonQuote(reg.page_kind), "}"));
  }
  for (const Finding& f : report.findings) {
    findings.push_back(absl::StrCat(
        "{\"severity\": ", JsonQuote(SeverityName(f.severity)),
        ", \"what\": ", JsonQuote(f.what), ", \"fix\": ", JsonQuote(f.fix), "}"));
  }
  const MemlockFacts& memlock = facts.memlock;
  const HugePageFacts& huge = facts.hugepages;
  const KernelFacts& kernel = facts.kernel;
  return absl::StrCat(
      "{\n  \"pool_bytes\": ", options.pool_bytes,
      ",\n  \"device\": ", JsonQuote(options.device),
      ",\n  \"list_ok\": ", Bool(facts.list_ok),
      ",\n  \"list_error\": ", JsonQuote(facts.list_error),
      ",\n  \"devices\": [", absl::StrJoin(devices, ",\n    "), "]",
      ",\n  \"addresses\": [", absl::StrJoin(addresses, ", "), "]",
      ",\n  \"addresses_error\": ", JsonQuote(facts.addresses_error),
      ",\n  \"memlock\": {\"known\": ", Bool(memlock.known),
      ", \"soft\": ", Limit(memlock.soft), ", \"hard\": ", Limit(memlock.hard),
      ", \"ipc_lock\": ", Bool(memlock.ipc_lock), "}",
      ",\n  \"hugepages\": {\"known\": ", Bool(huge.known),
      ", \"total\": ", huge.total, ", \"free\": ", huge.free,
      ", \"page_bytes\": ", huge.page_bytes,
      ", \"transparent\": ", JsonQuote(huge.transparent),
      ", \"shmem\": ", JsonQuote(huge.shmem), "}",
      ",\n  \"kernel\": {\"sysfs_devices\": ", Strings(kernel.sysfs_devices),
      ", \"uverbs\": ", Strings(kernel.uverbs),
      ", \"uverbs_denied\": ", Strings(kernel.uverbs_denied),
      ", \"rdma_rxe_loaded\": ", Bool(kernel.rdma_rxe_loaded),
      ", \"ib_uverbs_loaded\": ", Bool(kernel.ib_uverbs_loaded), "}",
      facts.mac.gathered ? ",\n  \"mac\": " + MacJson(facts.mac) : "",
      ",\n  \"registrations\": [", absl::StrJoin(registrations, ",\n    "), "]",
      ",\n  \"findings\": [\n    ", absl::StrJoin(findings, ",\n    "), "]",
      ",\n  \"serving_devices\": ", Strings(report.serving_devices),
      ",\n  \"can_serve\": ", Bool(report.can_serve),
      ",\n  \"verdict\": ", JsonQuote(report.verdict), "\n}\n");
}

}  // namespace meshpool::tools
