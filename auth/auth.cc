#include "auth/auth.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/common.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace meshpool::auth {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    absl::Status s = ErrnoToStatus(errno, absl::StrCat("open ", path));
    return absl::Status(
        s.code(),
        absl::StrCat("cannot read the ", what, " ", path, ": ", s.message(),
                     " (meshpool certs init DIR makes them)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " is not a PEM file"));
  }
  return pem;
}

struct Pems {
  std::string ca, cert, key;
};

absl::StatusOr<Pems> ReadAll(const TlsConfig& tls) {
  Pems p;
  MESHPOOL_ASSIGN_OR_RETURN(p.ca, ReadPem(tls.ca_file, "CA certificate"));
  MESHPOOL_ASSIGN_OR_RETURN(p.cert, ReadPem(tls.cert_file, "certificate"));
  MESHPOOL_ASSIGN_OR_RETURN(p.key, ReadPem(tls.key_file, "private key"));
  return p;
}

// The host part of "host:port", "[v6]:port" or "host".
absl::string_view HostOf(absl::string_view listen) {
  if (absl::ConsumePrefix(&listen, "[")) {
    return listen.substr(0, listen.find(']'));
  }
  const size_t colon = listen.rfind(':');
  if (colon != absl::string_view::npos &&
      listen.find(':') == colon) {  // one colon: host:port
    return listen.substr(0, colon);
  }
  return listen;  // a bare IPv6 address or host
}

bool IsLoopback(absl::string_view host) {
  return absl::StartsWith(host, "127.") || host == "::1" || host == "localhost";
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kNode:
      return "node";
    case Role::kClient:
      return "client";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

Role ParseRole(absl::string_view name) {
  for (Role r :
       {Role::kCoordinator, Role::kNode, Role::kClient, Role::kAdmin}) {
    if (name == RoleName(r)) return r;
  }
  return Role::kNone;
}

absl::Status ValidateTenantName(absl::string_view tenant) {
  if (tenant.empty() || tenant.size() > kMaxTenantNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant name '", absl::CHexEscape(tenant), "' is ",
                     tenant.size(), " bytes; use 1 to ", kMaxTenantNameBytes));
  }
  if (!absl::ascii_isalnum(static_cast<unsigned char>(tenant[0]))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant name '", absl::CHexEscape(tenant),
                     "' must start with a letter or digit"));
  }
  for (char c : tenant) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant name '", absl::CHexEscape(tenant), "' has '",
                       absl::CHexEscape(absl::string_view(&c, 1)),
                       "'; use letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

std::string Identity::ToString() const {
  if (role == Role::kNone) return name.empty() ? "anyone (no TLS)" : name;
  if (!tenant.empty())
    return absl::StrCat(RoleName(role), ":", name, "@", tenant);
  return absl::StrCat(RoleName(role), ":", name);
}

TlsConfig TlsConfig::InDir(absl::string_view dir, absl::string_view name) {
  TlsConfig tls;
  if (dir.empty()) return tls;
  tls.ca_file = absl::StrCat(dir, "/ca.pem");
  tls.cert_file = absl::StrCat(dir, "/", name, ".pem");
  tls.key_file = absl::StrCat(dir, "/", name, ".key");
  return tls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  MESHPOOL_ASSIGN_OR_RETURN(Pems p, ReadAll(tls));
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = p.ca;
  options.pem_key_cert_pairs.push_back({p.key, p.cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<ChannelSecurity> MakeChannelSecurity(const TlsConfig& tls) {
  ChannelSecurity security;
  if (!tls.enabled()) {
    security.credentials = grpc::InsecureChannelCredentials();
    return security;
  }
  MESHPOOL_ASSIGN_OR_RETURN(Pems p, ReadAll(tls));
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = p.ca;
  options.pem_private_key = p.key;
  options.pem_cert_chain = p.cert;
  security.credentials = grpc::SslCredentials(options);
  security.tls = true;
  return security;
}

std::shared_ptr<grpc::Channel> ChannelSecurity::Dial(
    const std::string& target, const grpc::ChannelArguments* args) const {
  grpc::ChannelArguments with =
      args != nullptr ? *args : grpc::ChannelArguments();
  if (tls) with.SetSslTargetNameOverride(std::string(kServerName));
  return grpc::CreateCustomChannel(target, credentials, with);
}

Identity PeerIdentity(const grpc::ServerContext& context) {
  Identity id;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return id;
  std::vector<grpc::string_ref> names =
      auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (names.empty()) {
    id.name = "a certificate without a common name";
    return id;
  }
  const absl::string_view cn(names[0].data(), names[0].size());
  const size_t colon = cn.find(':');
  if (colon == absl::string_view::npos) {
    id.name = absl::StrCat("'", cn, "' (not ROLE:NAME)");
    return id;
  }
  id.role = ParseRole(cn.substr(0, colon));
  id.name = std::string(id.role == Role::kNone ? cn : cn.substr(colon + 1));
  const size_t at = id.name.rfind('@');
  if (at == std::string::npos) return id;
  // A tenant: only clients and admins have one, and it must be a valid
  // name; anything else makes the certificate name no role at all.
  const std::string tenant = id.name.substr(at + 1);
  if ((id.role != Role::kClient && id.role != Role::kAdmin) ||
      !ValidateTenantName(tenant).ok()) {
    id.role = Role::kNone;
    id.name = absl::StrCat("'", cn,
                           "' (a tenant only clients and admins "
                           "have, of letters, digits, '.', '_' and '-')");
    return id;
  }
  id.name.resize(at);
  id.tenant = tenant;
  return id;
}

grpc::Status Allow(const grpc::ServerContext& context, absl::string_view what,
                   std::initializer_list<Role> roles) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    return grpc::Status::OK;  // no TLS on this server: it trusts everyone
  }
  const Identity peer = PeerIdentity(context);
  for (Role r : roles) {
    if (peer.role == r) return grpc::Status::OK;
  }
  std::vector<std::string> may;
  for (Role r : roles) may.emplace_back(RoleName(r));
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(peer.ToString(), " may not ", what, "; only ",
                   absl::StrJoin(may, ", "),
                   " certificates may (meshpool certs add DIR ROLE NAME "
                   "issues one)"));
}

absl::Status CheckListen(absl::string_view what, absl::string_view listen,
                         const TlsConfig& tls, bool insecure) {
  if (tls.enabled() || insecure || absl::StartsWith(listen, "unix:")) {
    return absl::OkStatus();
  }
  if (IsLoopback(HostOf(listen))) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " ", listen,
      " is reachable from other hosts, and without TLS anyone who reaches "
      "it may register nodes, read the cluster map and delete regions. Give "
      "--tls-dir DIR (meshpool certs init DIR makes a CA and certificates), "
      "or --insecure to serve it unauthenticated on a network you trust"));
}

}  // namespace meshpool::auth
