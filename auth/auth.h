// meshpool/auth: who is calling, on the control plane (gRPC over TLS).
//
//  * TlsConfig: the PEM files of the cluster's certificate authority and of
//    this process's own certificate and key (`meshpool certs init` makes
//    them). An empty TlsConfig means no TLS: every call is allowed, so a
//    server without TLS listens on loopback only unless told --insecure
//    (CheckListen, like Redis's protected mode).
//  * Identity: a peer's role, name and tenant, read from the common name
//    "ROLE:NAME" or "ROLE:NAME@TENANT" of the certificate it presented
//    (servers require one and verify it against the CA). Only clients and
//    admins have tenants; a tenant's regions are its own namespace, under
//    its own quotas (coordinator/tenants.h).
//  * ServerCredentials and ChannelSecurity: servers' and channels'
//    credentials. Channels check that the server's
//    certificate names kServerName, whatever address they dial, so one
//    certificate per node serves every address it has.
//  * Allow: the per-call role check the services run first.
//
// Thread-safe: free functions over values.
#ifndef MESHPOOL_AUTH_AUTH_H_
#define MESHPOOL_AUTH_AUTH_H_

#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// gRPC's types appear here by name only; the services and stubs that use
// them include gRPC.
namespace grpc {
class Channel;
class ChannelArguments;
class ChannelCredentials;
class ServerContext;
class ServerCredentials;
class Status;
}  // namespace grpc

namespace meshpool::auth {

// The DNS name in every coordinator's and node's certificate.
inline constexpr absl::string_view kServerName = "meshpool.cluster";

enum class Role {
  kNone,         // no certificate: a server without TLS
  kCoordinator,  // calls nodes (regions) and, as a client, copies stripes
  kNode,         // registers and heartbeats under its own name
  kClient,       // reads and writes; deletes and renames its own regions
  kAdmin,        // a client that may also delete or rename any region
};
// "coordinator", "node", ...; ParseRole is its inverse (nullopt-like
// kNone for anything else).
absl::string_view RoleName(Role role);
Role ParseRole(absl::string_view name);

// The role sets the services allow: any certificate; the data plane's
// users (clients, admins, and the coordinator, which copies region stripes
// as a client).
inline constexpr std::initializer_list<Role> kAnyRole = {
    Role::kCoordinator, Role::kNode, Role::kClient, Role::kAdmin};
inline constexpr std::initializer_list<Role> kDataUsers = {
    Role::kClient, Role::kAdmin, Role::kCoordinator};

// Tenant names: 1 to kMaxTenantNameBytes of [A-Za-z0-9._-], starting with
// a letter or digit.
inline constexpr size_t kMaxTenantNameBytes = 64;
// InvalidArgument saying which character or length is wrong.
absl::Status ValidateTenantName(absl::string_view tenant);

struct Identity {
  Role role = Role::kNone;
  std::string name;    // without the tenant
  std::string tenant;  // "" for none (and for every node or coordinator)
  // "node:node-1", "client:alice@team-a", or "anyone (no TLS)" for kNone.
  std::string ToString() const;
};

struct TlsConfig {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !ca_file.empty(); }
  // DIR/ca.pem, DIR/NAME.pem, DIR/NAME.key; empty `dir`: no TLS.
  static TlsConfig InDir(absl::string_view dir, absl::string_view name);
};

// Server credentials: TLS that requires and verifies a client certificate
// when `tls` is enabled, else insecure. Errors: NotFound /
// PermissionDenied (a file cannot be read), InvalidArgument (not PEM).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsConfig& tls);

// What a process's channels present and check, made once from a TlsConfig:
// its certificate, and the CA and kServerName it checks servers against.
// Copyable; shares the credentials.
struct ChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // never null
  bool tls = false;
  // A channel to `target` (`args` passed on; may be null).
  std::shared_ptr<grpc::Channel> Dial(
      const std::string& target,
      const grpc::ChannelArguments* args = nullptr) const;
};
// Insecure when `tls` is not enabled. Errors as ServerCredentials.
absl::StatusOr<ChannelSecurity> MakeChannelSecurity(const TlsConfig& tls);

// The caller of the call under `context`: kNone on a server without TLS.
Identity PeerIdentity(const grpc::ServerContext& context);

// OK when the caller's role is one of `roles`, or the server runs without
// TLS (it then trusts everyone who reaches it). Otherwise
// PERMISSION_DENIED naming the caller, `what` it asked, and who may.
grpc::Status Allow(const grpc::ServerContext& context, absl::string_view what,
                   std::initializer_list<Role> roles);

// Protected mode: FailedPrecondition, saying what to do, when `listen`
// ("host:port") is not a loopback address and `tls` is not enabled, unless
// `insecure`. `what` names the flag ("--listen").
absl::Status CheckListen(absl::string_view what, absl::string_view listen,
                         const TlsConfig& tls, bool insecure);

}  // namespace meshpool::auth

#endif  // MESHPOOL_AUTH_AUTH_H_
