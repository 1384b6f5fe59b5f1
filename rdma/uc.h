// meshpool/rdma/uc.h: the uc backend, for links that carry only unreliable
// messages: Apple's RDMA over Thunderbolt 5 (UC queue pairs, SEND/RECV
// only; ../shared/DESIGN.md §3) and UDP. A responder on the memory node
// serves one-sided READ/WRITE/CAS/FAA, checking every request as the tcp
// responder does, over a software-reliable channel per client
// (rdma/uc_channel.h: sequence numbers, acknowledgements, retransmission,
// checksums, liveness). Transfers above kUcChunkBytes are split.
//
// Links: today UDP ("uc://host:port", the node's socket), which any host
// has, so the protocol runs for real in every test; the UC verbs link for
// Thunderbolt comes next behind the same channel.
//
// Thread-safety: as rdma.h.
#ifndef MESHPOOL_RDMA_UC_H_
#define MESHPOOL_RDMA_UC_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

// One request carries at most this many bytes; bigger READs and WRITEs go
// as several requests and complete once, when the last one has.
inline constexpr uint32_t kUcChunkBytes = 1 << 20;
static_assert(kMaxTransferBytes % kUcChunkBytes == 0);

// Faults injected into every frame a transport sends (tests: the protocol
// must deliver through them). Probabilities in [0, 1].
struct UcLinkFaults {
  double drop = 0;
  double duplicate = 0;
  double corrupt = 0;  // one byte changed
  uint64_t seed = 0;
};

struct UcOptions {
  // Every frame's size (a receive must cover a send: Apple's 4 KiB page).
  size_t frame_bytes = 4096;
  // Frames in flight per channel; with UDP, what the socket buffer holds.
  uint32_t window_frames = 32;
  // A peer that answers nothing for this long while requests wait fails
  // the endpoint (client) or the session (node) Unavailable.
  absl::Duration dead_after = absl::Seconds(2);
  // Client: how long Connect waits for the node's answer.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Node: the most bytes a request may carry or ask for (at most
  // kUcChunkBytes; more is malformed).
  uint32_t max_request_bytes = kUcChunkBytes;
  UcLinkFaults faults;
};

// InvalidArgument for options out of their bounds.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcTransport(
    const UcOptions& options = {});

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_UC_H_
