// meshpool/proto: the generated control-plane messages and services, plus the
// one place a grpc::Status and an absl::Status convert into each other.
// Only proto/ and the thin service/stub layers (placement/coordinator_*,
// store/node_service*, client/node_connection*) include this header.
#ifndef MESHPOOL_PROTO_PROTO_H_
#define MESHPOOL_PROTO_PROTO_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/meshpool.grpc.pb.h"
#include "proto/meshpool.pb.h"

namespace meshpool {

// Same code, same message. `what` (e.g. "GrantSlab at 127.0.0.1:7000")
// prefixes the message of a non-OK status. A gRPC UNAVAILABLE or
// DEADLINE_EXCEEDED from an unreachable server becomes Unavailable.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace meshpool

#endif  // MESHPOOL_PROTO_PROTO_H_
