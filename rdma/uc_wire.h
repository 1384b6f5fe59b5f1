// meshpool/rdma internal: the uc backend's messages.
//
// Messages on a UcChannel: a client opens with kUcHello (4 bytes), followed
// by a token (kTokenBytes, rdma/tokens.h) when its handshake got one, and
// the node answers kUcHello; a node that requires a token on its UDP
// socket (UcOptions::require_token) answers kUcHelloRefused instead, to a
// hello without a valid one, and ends the session. A session on the socket
// that sends anything but a hello first ends unanswered, before any request
// is read. The token handshake runs over the node's control plane: the
// client sends kUcTokenRequest; the node answers a token, or nothing when it
// requires none. (Sessions on UC queue-pair links need no token: the
// authenticated handshake that made the link admitted them.) Then each
// request is a tcp RequestHeader (a WRITE's
// payload after it) and each response a ResponseHeader (a READ's payload
// after it), in order, exactly as on the tcp backend (rdma/tcp_wire.h). A
// client that goes away sends kUcBye, or kUcByeLast when it was the last
// lane on its link (the node then drops the link too); best effort: idle
// sessions and unused links are dropped anyway.
#ifndef MESHPOOL_RDMA_UC_WIRE_H_
#define MESHPOOL_RDMA_UC_WIRE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "rdma/uc.h"
#include "rdma/uc_channel.h"

namespace meshpool::rdma::internal {

inline constexpr uint32_t kUcHello = 0x4948504d;  // "MPHI"
inline constexpr uint32_t kUcHelloRefused = 0x4e48504d;  // "MPHN"
inline constexpr uint32_t kUcBye = 0x5942504d;    // "MPBY"
inline constexpr uint32_t kUcByeLast = 0x4c42504d;  // "MPBL"
inline constexpr char kUcTokenRequest[] = "meshpool uc token v1";
// How long a session on the socket may take to present its hello.
inline constexpr absl::Duration kUcHelloTimeout = absl::Seconds(5);
// A channel's largest message: a chunk and its header.
inline constexpr size_t kUcMaxMessageBytes = kUcChunkBytes + 64;

// UcChannel options from the transport's.
UcChannel::Options ChannelOptions(const UcOptions& options, uint64_t session);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_WIRE_H_
