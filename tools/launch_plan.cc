// PlanLaunch and friends: hostfile + options -> the commands to run.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "tools/launch.h"

namespace meshpool::tools {
namespace {

constexpr absl::string_view kPlaceholders[] = {"{ssh}", "{host}", "{command}"};

// Replaces every placeholder in `word` for `host` (in one pass: what
// replaces one is not scanned again).
std::string Expand(absl::string_view word, const LaunchHost& host,
                   const std::string& command) {
  return absl::StrReplaceAll(
      word,
      {{"{ssh}", host.ssh}, {"{host}", host.name}, {"{command}", command}});
}

absl::Status CheckTemplate(const std::vector<std::string>& words) {
  if (words.empty()) {
    return absl::InvalidArgumentError("--exec is empty");
  }
  bool has_command = false;
  for (const std::string& w : words) {
    for (size_t at = w.find('{'); at != std::string::npos;
         at = w.find('{', at + 1)) {
      absl::string_view rest = absl::string_view(w).substr(at);
      bool known = false;
      for (absl::string_view p : kPlaceholders)
        known |= absl::StartsWith(rest, p);
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("--exec '", absl::StrJoin(words, " "),
                         "' has an unknown placeholder at '", rest,
                         "' (known: {ssh}, {host}, {command})"));
      }
      has_command |= absl::StartsWith(rest, "{command}");
    }
  }
  if (!has_command) {
    return absl::InvalidArgumentError(
        absl::StrCat("--exec '", absl::StrJoin(words, " "),
                     "' has no {command}: where does the command line go?"));
  }
  return absl::OkStatus();
}

LaunchCommand Command(const std::vector<std::string>& exec,
                      const LaunchHost& host, std::string role,
                      const std::vector<std::string>& words) {
  std::vector<std::string> quoted;
  for (const std::string& w : words) quoted.push_back(ShellQuote(w));
  const std::string line = absl::StrJoin(quoted, " ");
  LaunchCommand c;
  c.host = host.name;
  c.role = std::move(role);
  for (const std::string& w : exec) c.argv.push_back(Expand(w, host, line));
  return c;
}

}  // namespace

std::string ShellQuote(absl::string_view s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(c) ||
           absl::string_view("@%+=:,./_-").find(c) != absl::string_view::npos;
  });
  if (plain) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

absl::StatusOr<LaunchPlan> PlanLaunch(const Hostfile& hostfile,
                                      const LaunchOptions& options) {
  const std::vector<std::string> exec =
      absl::StrSplit(options.exec, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  MESHPOOL_RETURN_IF_ERROR(CheckTemplate(exec));
  if (options.insecure == !options.tls_dir.empty()) {
    return absl::InvalidArgumentError(
        "the hosts' addresses are reachable from the network: give "
        "--tls-dir DIR (the same directory on every host; `meshpool certs "
        "init DIR` makes it) or --insecure (no TLS: anyone who reaches the "
        "hosts may use the cluster), not both");
  }
  for (const std::string& a : options.node_args) {
    if (a == "--device-matrix" || a == "--host-name") {
      return absl::InvalidArgumentError(absl::StrCat(
          "launch writes ", a, " from the hostfile's links; leave it out"));
    }
  }
  if (options.discover_links && !DeviceMatrixText(hostfile).empty()) {
    return absl::InvalidArgumentError(
        "the hostfile lists \"links\" and --discover-links finds them from "
        "the hosts' reports: remove the links or leave out --discover-links");
  }
  if (options.discover_links && options.skip_link_check) {
    return absl::InvalidArgumentError(
        "--discover-links asks every host for its devices, which "
        "--skip-link-check leaves out: give one or the other");
  }
  std::vector<std::string> security;
  if (options.insecure) {
    security = {"--insecure"};
  } else {
    security = {"--tls-dir", options.tls_dir};
  }
  LaunchPlan plan;
  plan.hostfile = hostfile;
  const LaunchHost& chost = hostfile.hosts[hostfile.coordinator];
  plan.coordinator_address =
      absl::StrCat(chost.address, ":", hostfile.coordinator_port);
  plan.missing_links = MissingLinks(hostfile);
  const std::string matrix = DeviceMatrixText(hostfile);
  const std::string matrix_path = options.work_dir + "/device-matrix";

  std::vector<std::string> coordinator = {
      "exec", options.binary, "coordinator", "--listen",
      absl::StrCat("0.0.0.0:", hostfile.coordinator_port)};
  coordinator.insert(coordinator.end(), security.begin(), security.end());
  plan.coordinator = Command(exec, chost, "coordinator", coordinator);

  for (const LaunchHost& host : hostfile.hosts) {
    std::vector<std::string> node = {"exec",
                                     options.binary,
                                     "node",
                                     "--coordinator",
                                     plan.coordinator_address,
                                     "--node-id",
                                     host.name,
                                     "--capacity",
                                     options.capacity,
                                     "--listen",
                                     "0.0.0.0:0",
                                     "--bind",
                                     "0.0.0.0:0",
                                     "--advertise",
                                     host.address};
    node.insert(node.end(), options.node_args.begin(), options.node_args.end());
    if ((!matrix.empty() && !options.skip_link_check) ||
        options.discover_links) {
      plan.checks.push_back(Command(
          exec, host, "check",
          {options.binary, "doctor", "--json", "--pool-size", "16MiB"}));
    }
    if (!matrix.empty()) {
      LaunchCommand write =
          Command(exec, host, "matrix",
                  {"sh", "-c",
                   absl::StrCat("mkdir -p ", ShellQuote(options.work_dir),
                                " && cat > ", ShellQuote(matrix_path))});
      write.input = matrix;
      plan.setup.push_back(std::move(write));
      node.insert(node.end(),
                  {"--device-matrix", matrix_path, "--host-name", host.name});
    }
    node.insert(node.end(), security.begin(), security.end());
    plan.nodes.push_back(Command(exec, host, "node", node));
  }
  return plan;
}

std::string DescribePlan(const LaunchPlan& plan) {
  std::string out =
      absl::StrCat("# clients: --coordinator ", plan.coordinator_address, "\n");
  for (const auto& [a, b] : plan.missing_links) {
    absl::StrAppend(&out, "# warning: no link between ", a, " and ", b,
                    " (the mesh is not full: their traffic cannot use RDMA)\n");
  }
  auto line = [&](const LaunchCommand& c) {
    std::vector<std::string> quoted;
    for (const std::string& w : c.argv) quoted.push_back(ShellQuote(w));
    absl::StrAppend(&out, "[", c.host, " ", c.role, "] ",
                    absl::StrJoin(quoted, " "));
    if (!c.input.empty()) {
      absl::StrAppend(&out, " <<'EOF'\n", c.input, "EOF");
    }
    out += "\n";
  };
  for (const LaunchCommand& c : plan.checks) line(c);
  for (const LaunchCommand& c : plan.setup) line(c);
  line(plan.coordinator);
  for (const LaunchCommand& c : plan.nodes) line(c);
  return out;
}

}  // namespace meshpool::tools
