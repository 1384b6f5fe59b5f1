#include "tools/transport_flags.h"

#include <unistd.h>

#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "rdma/device_matrix.h"
#include "rdma/devices.h"
#include "rdma/tcp.h"
#include "rdma/uc.h"
#include "rdma/verbs.h"

namespace meshpool::tools {
namespace {

constexpr const char* kRdmaFlags[] = {"device", "gid-index", "device-matrix",
                                      "host-name", "busy-poll"};
// The uc flags (defined with --transport) and their defaults.
#ifdef __APPLE__
constexpr const char* kDefaultProfile = "thunderbolt";
#else
constexpr const char* kDefaultProfile = "none";
#endif
constexpr std::pair<const char*, const char*> kUcFlags[] = {
    {"uc-link", "auto"}, {"profile", kDefaultProfile}};

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the device matrix '", path, "'"));
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool HasActiveDevice() {
  absl::StatusOr<std::vector<rdma::RdmaDeviceInfo>> devices =
      rdma::ListRdmaDevices();
  if (!devices.ok()) return false;
  for (const rdma::RdmaDeviceInfo& d : *devices) {
    for (const rdma::RdmaPortInfo& p : d.ports) {
      if (p.active) return true;
    }
  }
  return false;
}

}  // namespace

void DefineTransportFlags(Flags& flags, bool with_transport) {
  if (with_transport) {
    flags.Define("transport", "auto",
                 "data transport: tcp, verbs, uc (messages over UDP with "
                 "software reliability: the protocol of Thunderbolt's UC "
                 "RDMA), or auto (verbs when an RDMA device is active, else "
                 "tcp)");
    flags.Define("uc-link", "auto",
                 "with --transport uc: udp (the node's UDP socket), verbs "
                 "(UC queue pairs on the RDMA devices: Thunderbolt 5, "
                 "Soft-RoCE), or auto (verbs under --profile thunderbolt, "
                 "else udp)");
    flags.Define("profile", kDefaultProfile,
                 "with --transport uc: thunderbolt (Apple's limits: 10 queue "
                 "pairs per device, 4 KiB frames, link-local GIDs; the "
                 "default on macOS) or none");
  }
  flags.Define("device", "",
               "RDMA devices to use, comma-separated (default: every active "
               "one; `meshpool doctor` lists them)");
  flags.Define("gid-index", "-1",
               "RDMA GID index (default: the first RoCE v2 IPv4 GID)");
  flags.Define("device-matrix", "",
               "file: N x N matrix naming the device that reaches each host");
  flags.Define("host-name", "",
               "this host's name in the device matrix (default: host name)");
  flags.Define("busy-poll", "",
               absl::StrCat("verbs and uc: how long a thread waiting for "
                            "completions (a uc node: for frames) polls "
                            "before it sleeps, 0..",
                            absl::FormatDuration(kMaxBusyPoll), " (default ",
                            absl::FormatDuration(kDefaultBusyPoll),
                            "; longer answers sooner where a round trip is "
                            "shorter than a wake-up, and costs a core while "
                            "it lasts)"));
}

absl::StatusOr<absl::Duration> BusyPollFromFlags(const Flags& flags) {
  if (flags.Get("busy-poll").empty()) return kDefaultBusyPoll;
  MESHPOOL_ASSIGN_OR_RETURN(absl::Duration d, flags.GetDuration("busy-poll"));
  if (d > kMaxBusyPoll) {
    return absl::InvalidArgumentError(
        absl::StrCat("--busy-poll ", flags.Get("busy-poll"), " is over ",
                     absl::FormatDuration(kMaxBusyPoll),
                     " (polling longer than that only burns a core)"));
  }
  return d;
}

absl::StatusOr<std::string> ResolveTransport(const Flags& flags) {
  std::string kind = flags.Get("transport");
  if (kind == "tcp" || kind == "verbs" || kind == "uc") return kind;
  if (kind == "auto") return HasActiveDevice() ? "verbs" : "tcp";
  return absl::InvalidArgumentError(absl::StrCat(
      "--transport ", kind, " is unknown; use tcp, verbs, uc or auto"));
}

absl::StatusOr<rdma::VerbsOptions> VerbsOptionsFromFlags(const Flags& flags) {
  rdma::VerbsOptions options;
  for (absl::string_view d :
       absl::StrSplit(flags.Get("device"), ',', absl::SkipWhitespace())) {
    options.devices.emplace_back(d);
  }
  int gid = -1;
  if (!absl::SimpleAtoi(flags.Get("gid-index"), &gid) || gid < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gid-index ", flags.Get("gid-index"),
        " is not a GID table index (0, 1, ...; `meshpool doctor` lists them)"));
  }
  options.gid_index = gid;
  options.self_name = flags.Get("host-name");
  if (options.self_name.empty()) options.self_name = HostName();
  if (std::string path = flags.Get("device-matrix"); !path.empty()) {
    MESHPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    MESHPOOL_ASSIGN_OR_RETURN(
        options.peer_devices,
        rdma::ParseDeviceMatrix(text, options.self_name));
  }
  return options;
}

absl::StatusOr<ClientOptions::Rdma> ClientRdmaFromFlags(const Flags& flags) {
  MESHPOOL_ASSIGN_OR_RETURN(rdma::VerbsOptions v, VerbsOptionsFromFlags(flags));
  ClientOptions::Rdma rdma;
  rdma.devices = std::move(v.devices);
  rdma.gid_index = v.gid_index;
  rdma.self_name = std::move(v.self_name);
  rdma.peer_devices = std::move(v.peer_devices);
  MESHPOOL_ASSIGN_OR_RETURN(rdma.busy_poll, BusyPollFromFlags(flags));
  return rdma;
}

absl::StatusOr<rdma::UcOptions> UcOptionsFromFlags(const Flags& flags) {
  rdma::UcOptions options;
  MESHPOOL_ASSIGN_OR_RETURN(options.busy_poll, BusyPollFromFlags(flags));
  const std::string profile = flags.Get("profile");
  if (profile == "thunderbolt") {
    options.profile = rdma::UcProfile::kThunderbolt;
  } else if (profile != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--profile ", profile, " is unknown; use thunderbolt or none"));
  }
  const std::string link = flags.Get("uc-link");
  if (link == "verbs" ||
      (link == "auto" && options.profile == rdma::UcProfile::kThunderbolt)) {
    options.link = rdma::UcLinkKind::kVerbs;
    MESHPOOL_ASSIGN_OR_RETURN(options.verbs, VerbsOptionsFromFlags(flags));
  } else if (link != "udp" && link != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--uc-link ", link, " is unknown; use udp, verbs or auto"));
  }
  return options;
}

absl::StatusOr<std::unique_ptr<rdma::Transport>> NodeTransportFromFlags(
    const Flags& flags, bool authenticated) {
  MESHPOOL_ASSIGN_OR_RETURN(std::string kind, ResolveTransport(flags));
  if (kind == "tcp") {
    rdma::TcpOptions options;
    options.require_token = authenticated;
    return rdma::CreateTcpTransport(options);
  }
  if (kind == "uc") {
    MESHPOOL_ASSIGN_OR_RETURN(rdma::UcOptions options,
                              UcOptionsFromFlags(flags));
    options.require_token = authenticated;
    return rdma::CreateUcTransport(options);
  }
  MESHPOOL_ASSIGN_OR_RETURN(rdma::VerbsOptions options,
                            VerbsOptionsFromFlags(flags));
  return rdma::CreateVerbsTransport(std::move(options));
}

std::vector<std::string> RdmaArgs(const Flags& flags) {
  std::vector<std::string> args;
  for (const char* name : kRdmaFlags) {
    std::string value = flags.Get(name);
    if (value.empty() || (std::string(name) == "gid-index" && value == "-1")) {
      continue;
    }
    args.push_back(absl::StrCat("--", name));
    args.push_back(value);
  }
  return args;
}

std::vector<std::string> TransportArgs(const Flags& flags) {
  std::vector<std::string> args = {"--transport", flags.Get("transport")};
  for (const auto& [name, default_value] : kUcFlags) {
    std::string value = flags.Get(name);
    if (value == default_value) continue;
    args.push_back(absl::StrCat("--", name));
    args.push_back(value);
  }
  for (std::string& arg : RdmaArgs(flags)) args.push_back(std::move(arg));
  return args;
}

}  // namespace meshpool::tools
