// The flags that choose and configure the data transport, shared by the
// node, the local-cluster commands and the client commands:
//   --transport auto|tcp|verbs|uc  (node, up, demo)
//   --uc-link auto|udp|verbs     uc over UDP or UC queue pairs
//   --profile none|thunderbolt   uc under Apple's limits (macOS default)
//   --device NAME[,NAME...]      RDMA devices to use (default: all active)
//   --gid-index N                GID table index (default: first RoCE v2 IPv4)
//   --device-matrix FILE         N x N matrix: which device reaches which host
//   --host-name NAME             this host's name in the matrix
//   --busy-poll DURATION         verbs, uc: poll this long before sleeping
// Not thread-safe (used from main only).
#ifndef MESHPOOL_TOOLS_TRANSPORT_FLAGS_H_
#define MESHPOOL_TOOLS_TRANSPORT_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "meshpool/client.h"
#include "rdma/rdma.h"
#include "rdma/uc.h"
#include "rdma/verbs.h"
#include "tools/flags.h"

namespace meshpool::tools {

// Declares the RDMA flags; with `with_transport`, --transport too.
void DefineTransportFlags(Flags& flags, bool with_transport);

// "tcp" or "verbs": --transport, with "auto" resolved to verbs when this host
// has an RDMA device with an active port. InvalidArgument for other values.
absl::StatusOr<std::string> ResolveTransport(const Flags& flags);

// The verbs options the flags describe. InvalidArgument for a bad
// --gid-index; NotFound / InvalidArgument from reading --device-matrix.
absl::StatusOr<rdma::VerbsOptions> VerbsOptionsFromFlags(const Flags& flags);

// The same, as a client's options.
absl::StatusOr<ClientOptions::Rdma> ClientRdmaFromFlags(const Flags& flags);

// --busy-poll (its default when not given). InvalidArgument when it is
// not a duration in 0..kMaxBusyPoll.
absl::StatusOr<absl::Duration> BusyPollFromFlags(const Flags& flags);

// The uc options --profile, --uc-link and --busy-poll describe (with the
// RDMA flags for the verbs link). InvalidArgument for unknown values.
absl::StatusOr<rdma::UcOptions> UcOptionsFromFlags(const Flags& flags);

// A node's transport: TCP, uc or verbs as the flags configure it. With
// `authenticated` (the node's control plane runs TLS) a tcp or uc-on-UDP
// node admits only connections and sessions that present a token from its
// handshake (rdma::TcpOptions::require_token, UcOptions::require_token).
absl::StatusOr<std::unique_ptr<rdma::Transport>> NodeTransportFromFlags(
    const Flags& flags, bool authenticated);

// The RDMA flags that were set, to pass on to child processes (the
// coordinator's repair client uses the same devices).
std::vector<std::string> RdmaArgs(const Flags& flags);

// The flags as given, to pass on to child `meshpool node` processes:
// "--transport", its value, the uc flags that differ from their defaults,
// then RdmaArgs. REQUIRES: DefineTransportFlags(flags, true).
std::vector<std::string> TransportArgs(const Flags& flags);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_TRANSPORT_FLAGS_H_
