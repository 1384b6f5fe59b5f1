#include "tools/hostfile.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "common/json.h"

namespace meshpool::tools {
namespace {

absl::Status Bad(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("hostfile: ", where, ": ", what));
}

// Every member of `object` must be one of `known`.
absl::Status OnlyKnownKeys(const JsonValue& object, absl::string_view where,
                           std::initializer_list<absl::string_view> known) {
  for (const JsonValue::Member& m : object.members()) {
    if (std::find(known.begin(), known.end(), m.first) == known.end()) {
      return Bad(where, absl::StrCat("unknown key \"", m.first, "\" (known: ",
                                     absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// A word a command line and the device matrix can carry: non-empty, no
// whitespace or control characters.
bool IsWord(absl::string_view s) {
  return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isspace(c) || absl::ascii_iscntrl(c);
  });
}

// The string member `key` of `object`; `*fallback` when absent (a null
// `fallback`: the key is required).
absl::StatusOr<std::string> StringField(const JsonValue& object,
                                        absl::string_view key,
                                        absl::string_view where,
                                        const std::string* fallback) {
  const JsonValue* v = object.Find(key);
  if (v == nullptr) {
    if (fallback != nullptr) return *fallback;
    return Bad(where, absl::StrCat("\"", key, "\" is missing"));
  }
  if (!v->is_string() || !IsWord(v->string_value())) {
    return Bad(where, absl::StrCat("\"", key,
                                   "\" must be a non-empty string without "
                                   "spaces, got ",
                                   v->is_string() ? JsonQuote(v->string_value())
                                                  : v->type_name()));
  }
  return v->string_value();
}

absl::StatusOr<LaunchHost> ParseHost(const JsonValue& v, size_t i) {
  std::string where = absl::StrCat("hosts[", i, "]");
  if (!v.is_object()) return Bad(where, "must be an object");
  MESHPOOL_RETURN_IF_ERROR(
      OnlyKnownKeys(v, where, {"name", "ssh", "address", "links"}));
  LaunchHost host;
  MESHPOOL_ASSIGN_OR_RETURN(host.name, StringField(v, "name", where, nullptr));
  where = absl::StrCat("host ", host.name);
  MESHPOOL_ASSIGN_OR_RETURN(host.ssh, StringField(v, "ssh", where, &host.name));
  MESHPOOL_ASSIGN_OR_RETURN(host.address,
                            StringField(v, "address", where, nullptr));
  if (const JsonValue* links = v.Find("links")) {
    if (!links->is_object()) {
      return Bad(where, "\"links\" must map host names to device names");
    }
    for (const auto& [peer, device] : links->members()) {
      if (!device.is_string() || !IsWord(device.string_value())) {
        return Bad(where, absl::StrCat("the link to ", peer,
                                       " must name a device (\"rdma_en2\")"));
      }
      host.links[peer] = device.string_value();
    }
  }
  return host;
}

absl::Status CheckLinks(const Hostfile& hf) {
  const size_t with_links =
      std::count_if(hf.hosts.begin(), hf.hosts.end(),
                    [](const LaunchHost& h) { return !h.links.empty(); });
  if (with_links == 0) return absl::OkStatus();
  std::map<std::string, const LaunchHost*> by_name;
  for (const LaunchHost& h : hf.hosts) by_name[h.name] = &h;
  for (const LaunchHost& h : hf.hosts) {
    if (h.links.empty()) {
      return Bad(absl::StrCat("host ", h.name),
                 "has no \"links\" while other hosts do: list the device "
                 "that reaches each host it is cabled to");
    }
  }
  for (const LaunchHost& h : hf.hosts) {
    for (const auto& [peer, device] : h.links) {
      auto it = by_name.find(peer);
      if (it == by_name.end()) {
        return Bad(absl::StrCat("host ", h.name),
                   absl::StrCat("links to ", peer,
                                ", which is not a host in this file"));
      }
      if (peer == h.name) {
        return Bad(absl::StrCat("host ", h.name), "links to itself");
      }
      if (!it->second->links.contains(h.name)) {
        return Bad(absl::StrCat("host ", h.name),
                   absl::StrCat(
                       "links to ", peer, " through ", device, ", but ", peer,
                       " lists no link back (a cable "
                       "has a device at each end: add \"",
                       h.name, "\": \"<its device>\" to ", peer, "'s links)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Hostfile> ParseHostfile(absl::string_view json) {
  if (json.size() > kMaxHostfileBytes) {
    return Bad("file", absl::StrCat("over ", kMaxHostfileBytes, " bytes"));
  }
  absl::StatusOr<JsonValue> doc = ParseJson(json, kMaxHostfileBytes);
  if (!doc.ok()) return Bad("JSON", doc.status().message());
  if (!doc->is_object()) return Bad("file", "must be a JSON object");
  MESHPOOL_RETURN_IF_ERROR(
      OnlyKnownKeys(*doc, "file", {"hosts", "coordinator"}));
  const JsonValue* hosts = doc->Find("hosts");
  if (hosts == nullptr || !hosts->is_array() || hosts->elements().empty()) {
    return Bad("file", "\"hosts\" must be a non-empty array of hosts");
  }
  if (hosts->elements().size() > kMaxLaunchHosts) {
    return Bad("file", absl::StrCat(hosts->elements().size(),
                                    " hosts are more than ", kMaxLaunchHosts));
  }
  Hostfile hf;
  std::set<std::string> names;
  for (size_t i = 0; i < hosts->elements().size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(LaunchHost host,
                              ParseHost(hosts->elements()[i], i));
    if (!names.insert(host.name).second) {
      return Bad(absl::StrCat("hosts[", i, "]"),
                 absl::StrCat("the name ", host.name, " is used twice"));
    }
    hf.hosts.push_back(std::move(host));
  }
  MESHPOOL_RETURN_IF_ERROR(CheckLinks(hf));
  if (const JsonValue* c = doc->Find("coordinator")) {
    if (!c->is_object()) return Bad("coordinator", "must be an object");
    MESHPOOL_RETURN_IF_ERROR(
        OnlyKnownKeys(*c, "coordinator", {"host", "port"}));
    const std::string first = hf.hosts[0].name;
    MESHPOOL_ASSIGN_OR_RETURN(std::string host,
                              StringField(*c, "host", "coordinator", &first));
    auto it = std::find_if(hf.hosts.begin(), hf.hosts.end(),
                           [&](const LaunchHost& h) { return h.name == host; });
    if (it == hf.hosts.end()) {
      return Bad("coordinator",
                 absl::StrCat("host ", host, " is not a host in this file"));
    }
    hf.coordinator = it - hf.hosts.begin();
    if (const JsonValue* port = c->Find("port")) {
      std::optional<uint64_t> p = port->AsUint64();
      if (!p.has_value() || *p < 1 || *p > 65535) {
        return Bad("coordinator", "\"port\" must be an integer in 1..65535");
      }
      hf.coordinator_port = static_cast<int>(*p);
    }
  }
  return hf;
}

std::string DeviceMatrixText(const Hostfile& hf) {
  if (std::all_of(hf.hosts.begin(), hf.hosts.end(),
                  [](const LaunchHost& h) { return h.links.empty(); })) {
    return "";
  }
  std::string out = "# written by meshpool launch from its hostfile\nhosts";
  for (const LaunchHost& h : hf.hosts) absl::StrAppend(&out, " ", h.name);
  out += "\n";
  for (const LaunchHost& row : hf.hosts) {
    out += row.name;
    for (const LaunchHost& column : hf.hosts) {
      auto it = row.links.find(column.name);
      absl::StrAppend(&out, " ", it == row.links.end() ? "-" : it->second);
    }
    out += "\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> MissingLinks(
    const Hostfile& hf) {
  std::vector<std::pair<std::string, std::string>> missing;
  if (DeviceMatrixText(hf).empty()) return missing;
  for (size_t i = 0; i < hf.hosts.size(); ++i) {
    for (size_t j = i + 1; j < hf.hosts.size(); ++j) {
      if (!hf.hosts[i].links.contains(hf.hosts[j].name)) {
        missing.emplace_back(hf.hosts[i].name, hf.hosts[j].name);
      }
    }
  }
  return missing;
}

absl::StatusOr<JsonValue> ParseDoctorReport(const LaunchHost& host,
                                            absl::string_view doctor_output) {
  auto unreadable = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("host ", host.name,
                     ": `meshpool doctor --json` there printed no "
                     "usable report (",
                     why, "); run it on ", host.name, " to see why"));
  };
  const size_t open = doctor_output.find('{');
  const size_t close = doctor_output.rfind('}');
  if (open == absl::string_view::npos || close == absl::string_view::npos ||
      close < open) {
    return unreadable("no JSON object");
  }
  absl::StatusOr<JsonValue> doc =
      ParseJson(doctor_output.substr(open, close - open + 1));
  if (!doc.ok()) return unreadable(doc.status().message());
  const JsonValue* devices = doc->Find("devices");
  if (devices == nullptr || !devices->is_array()) {
    return unreadable("no \"devices\" list");
  }
  return doc;
}

absl::Status CheckReportedDevices(const LaunchHost& host,
                                  absl::string_view doctor_json) {
  absl::StatusOr<JsonValue> doc = ParseDoctorReport(host, doctor_json);
  if (!doc.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(doc.status().message(), ", or pass --skip-link-check"));
  }
  const JsonValue* devices = doc->Find("devices");
  std::map<std::string, bool> active;  // device -> any port active
  for (const JsonValue& d : devices->elements()) {
    const JsonValue* name = d.Find("name");
    const JsonValue* ports = d.Find("ports");
    if (name == nullptr || !name->is_string()) continue;
    bool up = false;
    if (ports != nullptr) {
      for (const JsonValue& p : ports->elements()) {
        const JsonValue* a = p.Find("active");
        up |= a != nullptr && a->bool_value();
      }
    }
    active[name->string_value()] = up;
  }
  std::vector<std::string> problems = LinkProblems(host, active);
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(problems.front());
}

absl::StatusOr<Hostfile> ReadHostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open the hostfile ", path));
  }
  std::string text(kMaxHostfileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseHostfile(text);  // refuses more than kMaxHostfileBytes
}

std::vector<std::string> LinkProblems(
    const LaunchHost& host, const std::map<std::string, bool>& devices) {
  std::vector<std::string> have;
  for (const auto& [name, up] : devices) have.push_back(name);
  const std::string listed = have.empty() ? "none" : absl::StrJoin(have, ", ");
  std::vector<std::string> problems;
  for (const auto& [peer, device] : host.links) {
    auto it = devices.find(device);
    if (it == devices.end()) {
      problems.push_back(absl::StrCat(
          "host ", host.name, " has no RDMA device ", device, " (its link to ",
          peer, "; it has: ", listed, "): check the cable between ", host.name,
          " and ", peer,
          ", that it is Thunderbolt 5, and that RDMA is enabled there "
          "(`meshpool doctor`)"));
    } else if (!it->second) {
      problems.push_back(
          absl::StrCat("host ", host.name, ": ", device, " (its link to ", peer,
                       ") has no active port: the cable to ", peer,
                       " is unplugged or ", peer, " is off"));
    }
  }
  return problems;
}

}  // namespace meshpool::tools
