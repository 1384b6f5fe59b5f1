// TLS for the command line: the flags every server and client command takes
// (--tls-dir, --tls-name, and --insecure for servers), and the certificate
// authority `meshpool certs` makes with OpenSSL's command line tool.
//
// A certificate directory holds ca.pem and ca.key (the CA), and per
// identity NAME.pem and NAME.key, whose common name is "ROLE:NAME" or
// "ROLE:NAME@TENANT" (auth/auth.h): "coordinator", "node-1"..., "client",
// "admin" by default. Thread-compatible: plain functions, run from one
// command's thread.
#ifndef MESHPOOL_TOOLS_TLS_H_
#define MESHPOOL_TOOLS_TLS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "auth/auth.h"

namespace meshpool::tools {

class Flags;

// --tls-dir and --tls-name; with `server`, also --insecure.
void DefineTlsFlags(Flags& flags, bool server);

// The files --tls-dir (else $MESHPOOL_TLS_DIR) and --tls-name (else
// `default_name`) name; not enabled when neither directory is given.
// InvalidArgument when a directory is given with no name to use.
absl::StatusOr<auth::TlsConfig> TlsFromFlags(const Flags& flags,
                                             absl::string_view default_name);

// One identity to issue a certificate for.
struct CertIdentity {
  CertIdentity(auth::Role role, std::string name, std::string tenant = "")
      : role(role), name(std::move(name)), tenant(std::move(tenant)) {}
  auth::Role role;
  std::string name;  // [A-Za-z0-9._-], at most 64 characters; the file stem
  // Clients and admins only: the tenant they act for (common name
  // "ROLE:NAME@TENANT"); empty for none.
  std::string tenant;
};

// Creates `dir` (mode 0700) with a new CA and a certificate per identity.
// AlreadyExists when `dir` already holds a CA (add to it instead);
// InvalidArgument for a bad name or tenant, or a tenant on a node or
// coordinator; FailedPrecondition when the openssl tool
// is missing; Internal (with its output) when it fails.
absl::Status CertsInit(const std::string& dir,
                       const std::vector<CertIdentity>& identities);

// Issues one more certificate from the CA in `dir`. NotFound when `dir`
// holds no CA; AlreadyExists when NAME.pem exists; else as CertsInit.
absl::Status CertsAdd(const std::string& dir, const CertIdentity& identity);

// coordinator, node-1..node-`nodes`, client and admin.
std::vector<CertIdentity> DefaultIdentities(int nodes);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_TLS_H_
