// DiscoverLinks: which cable joins which hosts, from the hosts' doctor
// reports. A Thunderbolt cable is a point-to-point link with a device at
// each end; docs/macos.md gives each one a small subnet of its own, so the
// two devices on a subnet are the cable's two ends.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "tools/doctor.h"
#include "tools/launch.h"

namespace meshpool::tools {
namespace {

// Self-assigned (link-local) IPv4 addresses: what macOS gives an interface
// that has no address set.
constexpr uint32_t kLinkLocalNetwork = 0xa9fe0000;  // 169.254.0.0
constexpr int kLinkLocalPrefix = 16;

uint32_t Mask(int prefix) {
  return prefix <= 0 ? 0 : ~uint32_t{0} << (32 - std::min(prefix, 32));
}

std::optional<uint32_t> ParseIpv4(const std::string& text) {
  in_addr addr{};
  if (inet_pton(AF_INET, text.c_str(), &addr) != 1) return std::nullopt;
  return ntohl(addr.s_addr);
}

std::string SubnetText(uint32_t network, int prefix) {
  return absl::StrCat(network >> 24, ".", (network >> 16) & 0xff, ".",
                      (network >> 8) & 0xff, ".", network & 0xff, "/", prefix);
}

// One device of one host on one subnet.
struct End {
  size_t host = 0;  // index into the hostfile
  DeviceSubnet device;
};

absl::Status SharedSubnet(const Hostfile& hf, const std::vector<End>& ends,
                          uint32_t network, int prefix) {
  std::vector<std::string> who;
  for (const End& e : ends) {
    who.push_back(absl::StrCat(hf.hosts[e.host].name, " ", e.device.device));
  }
  const bool link_local =
      prefix >= kLinkLocalPrefix &&
      (network & Mask(kLinkLocalPrefix)) == kLinkLocalNetwork;
  return absl::FailedPreconditionError(absl::StrCat(
      "RDMA devices ", absl::StrJoin(who, ", "), " share the subnet ",
      SubnetText(network, prefix),
      ", so launch cannot tell which cable joins which hosts",
      link_local ? " (169.254 addresses are self-assigned: the interfaces "
                   "have no address set)"
                 : "",
      ": give each cable a subnet of its own, the same at both ends (for "
      "example 10.0.12.1/30 and 10.0.12.2/30; docs/macos.md), or list "
      "\"links\" in the hostfile instead of --discover-links"));
}

}  // namespace

absl::StatusOr<std::vector<DeviceSubnet>> ReportedDeviceSubnets(
    const LaunchHost& host, absl::string_view doctor_output) {
  MESHPOOL_ASSIGN_OR_RETURN(JsonValue doc,
                            ParseDoctorReport(host, doctor_output));
  const JsonValue* addresses = doc.Find("addresses");
  if (addresses == nullptr || !addresses->is_array()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host ", host.name,
        ": its `meshpool doctor --json` reports no \"addresses\" (an older "
        "meshpool there?): install this version there, or list \"links\" "
        "in the hostfile"));
  }
  std::map<std::string, std::pair<std::string, int>> by_address;
  for (const JsonValue& a : addresses->elements()) {
    const JsonValue* name = a.Find("interface");
    const JsonValue* address = a.Find("address");
    const JsonValue* prefix = a.Find("prefix");
    if (name == nullptr || address == nullptr || prefix == nullptr) continue;
    std::optional<uint64_t> p = prefix->AsUint64();
    if (!p.has_value() || *p > 32) continue;
    by_address.emplace(address->string_value(),
                       std::make_pair(name->string_value(), int(*p)));
  }
  std::vector<DeviceSubnet> out;
  std::set<std::pair<std::string, std::string>> seen;  // device, address
  for (const JsonValue& d : doc.Find("devices")->elements()) {
    const JsonValue* name = d.Find("name");
    const JsonValue* ports = d.Find("ports");
    if (name == nullptr || !name->is_string() || ports == nullptr) continue;
    for (const JsonValue& port : ports->elements()) {
      const JsonValue* active = port.Find("active");
      const JsonValue* gids = port.Find("gids");
      if (active == nullptr || !active->bool_value() || gids == nullptr) {
        continue;
      }
      for (const JsonValue& gid : gids->elements()) {
        const JsonValue* text = gid.Find("gid");
        if (text == nullptr) continue;
        const std::string address = Ipv4OfGid(text->string_value());
        auto it = by_address.find(address);
        if (address.empty() || it == by_address.end()) continue;
        if (!seen.emplace(name->string_value(), address).second) continue;
        out.push_back({name->string_value(), it->second.first, address,
                       it->second.second});
      }
    }
  }
  return out;
}

absl::StatusOr<DiscoveredLinks> DiscoverLinks(
    const Hostfile& hostfile,
    const std::map<std::string, std::string>& reports) {
  DiscoveredLinks result;
  result.hostfile = hostfile;
  // (network, prefix) -> the devices on it, in host order.
  std::map<std::pair<uint32_t, int>, std::vector<End>> subnets;
  for (size_t i = 0; i < hostfile.hosts.size(); ++i) {
    const LaunchHost& host = hostfile.hosts[i];
    auto report = reports.find(host.name);
    if (report == reports.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("host ", host.name, " was not asked for its devices"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(std::vector<DeviceSubnet> devices,
                              ReportedDeviceSubnets(host, report->second));
    if (devices.empty()) {
      result.notes.push_back(absl::StrCat(
          host.name,
          " reported no RDMA device with an active port and an IPv4 "
          "address (`meshpool doctor` there says why)"));
    }
    for (DeviceSubnet& d : devices) {
      std::optional<uint32_t> address = ParseIpv4(d.address);
      if (!address.has_value()) continue;
      const int prefix = d.prefix;
      subnets[{*address & Mask(prefix), prefix}].push_back({i, std::move(d)});
    }
  }
  // (host index, device) -> the peer it was given, to refuse a device
  // reaching two hosts.
  std::map<std::pair<size_t, std::string>, size_t> used;
  for (const auto& [key, ends] : subnets) {
    const auto [network, prefix] = key;
    std::set<size_t> hosts;
    for (const End& e : ends) hosts.insert(e.host);
    if (hosts.size() != ends.size() || hosts.size() > 2) {
      return SharedSubnet(hostfile, ends, network, prefix);
    }
    if (hosts.size() == 1) {
      const End& e = ends.front();
      result.notes.push_back(absl::StrCat(
          hostfile.hosts[e.host].name, " ", e.device.device, " (",
          e.device.address, "/", prefix,
          ") reaches no other host of the hostfile: no host has a device "
          "on ",
          SubnetText(network, prefix)));
      continue;
    }
    const End& a = ends[0];
    const End& b = ends[1];
    LaunchHost& ha = result.hostfile.hosts[a.host];
    LaunchHost& hb = result.hostfile.hosts[b.host];
    const std::string cable =
        absl::StrCat(ha.name, " ", a.device.device, " <-> ", hb.name, " ",
                     b.device.device, " (", SubnetText(network, prefix), ")");
    if (ha.links.contains(hb.name)) {
      result.notes.push_back(absl::StrCat(
          "a second cable joins ", ha.name, " and ", hb.name, ": ", cable,
          "; launch uses the first, ", ha.name, " ", ha.links[hb.name]));
      continue;
    }
    for (const End* e : {&a, &b}) {
      const size_t peer = e == &a ? b.host : a.host;
      auto [it, fresh] =
          used.emplace(std::make_pair(e->host, e->device.device), peer);
      if (!fresh && it->second != peer) {
        return absl::FailedPreconditionError(absl::StrCat(
            "RDMA device ", e->device.device, " on ",
            hostfile.hosts[e->host].name, " has addresses on the subnets of ",
            hostfile.hosts[it->second].name, " and of ",
            hostfile.hosts[peer].name,
            ", but one cable joins two hosts: remove the address that is "
            "not its cable's, or list \"links\" in the hostfile"));
      }
    }
    ha.links[hb.name] = a.device.device;
    hb.links[ha.name] = b.device.device;
    result.found.push_back(cable);
  }
  if (result.found.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no cable found: no two hosts reported RDMA devices on a subnet of "
        "their own",
        result.notes.empty() ? "" : " (", absl::StrJoin(result.notes, "; "),
        result.notes.empty() ? "" : ")",
        ". Give each Thunderbolt interface an IPv4 address on a subnet it "
        "shares only with the other end of its cable (docs/macos.md), or "
        "list \"links\" in the hostfile"));
  }
  return result;
}

}  // namespace meshpool::tools
