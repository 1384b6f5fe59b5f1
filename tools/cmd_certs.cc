// meshpool certs: a certificate authority and certificates for a cluster's
// control plane (tools/tls.h).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auth/auth.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/tls.h"

namespace meshpool::tools {

int RunCerts(int argc, char** argv) {
  Flags flags(
      "meshpool certs init DIR [--nodes N] | meshpool certs add DIR ROLE NAME "
      "[--tenant TENANT]",
      "Makes the TLS certificates a cluster's control plane runs on. `init` "
      "creates DIR with a new CA (ca.pem, ca.key: keep ca.key private) and "
      "certificates for the coordinator, node-1..node-N, client and admin; "
      "`add` issues one more from DIR's CA (ROLE: coordinator, node, client "
      "or admin; --tenant makes a client or admin act for that tenant: its "
      "regions are the tenant's own, under the tenant's quotas). Then give "
      "every process --tls-dir DIR (nodes use the "
      "certificate named as their --node-id) or set MESHPOOL_TLS_DIR.");
  flags.Define("nodes", "8", "init: node certificates to issue (node-1..)");
  flags.Define("tenant", "",
               "add: the tenant a client or admin certificate acts for");
  if (int rc = ParseFlags(flags, argc, argv, "certs"); rc >= 0) return rc;
  const auto& args = flags.positional();
  if (args.size() == 2 && args[0] == "init") {
    if (!flags.Get("tenant").empty()) {
      return Fail("certs", absl::InvalidArgumentError(absl::StrCat(
                               "--tenant applies to `certs add`: init makes "
                               "the cluster's own identities, which act for "
                               "no tenant. Run init without it, then `meshpool "
                               "certs add ",
                               args[1], " client NAME --tenant ",
                               flags.Get("tenant"), "`")));
    }
    auto nodes = flags.GetInt("nodes");
    if (!nodes.ok()) return Fail("certs", nodes.status());
    if (*nodes < 0 || *nodes > 4096) {
      return Fail("certs", absl::InvalidArgumentError(
                               "--nodes must be between 0 and 4096"));
    }
    absl::Status s =
        CertsInit(args[1], DefaultIdentities(static_cast<int>(*nodes)));
    if (!s.ok()) return Fail("certs", s);
    std::printf(
        "made a CA and certificates in %s (coordinator, node-1..node-%d, "
        "client, admin); start servers and clients with --tls-dir %s\n",
        args[1].c_str(), static_cast<int>(*nodes), args[1].c_str());
    return 0;
  }
  if (args.size() == 4 && args[0] == "add") {
    const auth::Role role = auth::ParseRole(args[2]);
    const std::string tenant = flags.Get("tenant");
    absl::Status s = CertsAdd(args[1], {role, args[3], tenant});
    if (!s.ok()) return Fail("certs", s);
    std::printf("issued %s/%s.pem for %s:%s%s%s\n", args[1].c_str(),
                args[3].c_str(), args[2].c_str(), args[3].c_str(),
                tenant.empty() ? "" : "@", tenant.c_str());
    return 0;
  }
  return Fail("certs", absl::InvalidArgumentError(
                           absl::StrCat("wrong arguments\n\n", flags.Help())));
}

}  // namespace meshpool::tools
