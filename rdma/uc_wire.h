// meshpool/rdma internal: the uc backend's messages.
//
// Messages on a UcChannel: a client opens with kUcHello (4 bytes) and the
// node answers the same; then each request is a tcp RequestHeader (a WRITE's
// payload after it) and each response a ResponseHeader (a READ's payload
// after it), in order, exactly as on the tcp backend (rdma/tcp_wire.h). A
// client that goes away sends kUcBye, or kUcByeLast when it was the last
// lane on its link (the node then drops the link too); best effort: idle
// sessions and unused links are dropped anyway.
#ifndef MESHPOOL_RDMA_UC_WIRE_H_
#define MESHPOOL_RDMA_UC_WIRE_H_

#include <cstdint>

#include "rdma/uc.h"
#include "rdma/uc_channel.h"

namespace meshpool::rdma::internal {

inline constexpr uint32_t kUcHello = 0x4948504d;  // "MPHI"
inline constexpr uint32_t kUcBye = 0x5942504d;    // "MPBY"
inline constexpr uint32_t kUcByeLast = 0x4c42504d;  // "MPBL"
// A channel's largest message: a chunk and its header.
inline constexpr size_t kUcMaxMessageBytes = kUcChunkBytes + 64;

// UcChannel options from the transport's.
UcChannel::Options ChannelOptions(const UcOptions& options, uint64_t session);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_WIRE_H_
