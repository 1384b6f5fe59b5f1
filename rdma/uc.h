// meshpool/rdma/uc.h: the uc backend, for links that carry only unreliable
// messages: Apple's RDMA over Thunderbolt 5 (UC queue pairs, SEND/RECV
// only; ../shared/DESIGN.md §3) and UDP. A responder on the memory node
// serves one-sided READ/WRITE/CAS/FAA, checking every request as the tcp
// responder does, over a software-reliable channel per client
// (rdma/uc_channel.h: sequence numbers, acknowledgements, retransmission,
// checksums, liveness). Transfers above kUcChunkBytes are split.
//
// Links (rdma/uc_link.h), named by the node's address:
//   "uc://host:port"  UDP to the node's socket: any host has it, so the
//                     protocol runs for real in every test;
//   "uc://NAME/INSTANCE"
//                     UC queue pairs (rdma/verbs_uc_link.h), NAME being the
//                     node's VerbsOptions.self_name (it picks the device
//                     that reaches the node) and INSTANCE 16 hex digits a
//                     node draws when it listens (nodes of one host share
//                     NAME; a restarted node is another instance), set up
//                     through the node's Handshake RPC: Thunderbolt 5 on
//                     macOS, and Soft-RoCE or any RDMA NIC on Linux.
//                     "uc://NAME" alone reaches it too.
// A node listens on the link UcOptions.link names; a client follows each
// node's address.
//
// Thread-safety: as rdma.h.
#ifndef MESHPOOL_RDMA_UC_H_
#define MESHPOOL_RDMA_UC_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"

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

// Apple's limits on RDMA over Thunderbolt 5 (../shared/DESIGN.md §3). The
// thunderbolt profile applies them on any platform, so tests on Linux obey
// the same rules a Mac imposes.
enum class UcProfile : uint8_t { kNone, kThunderbolt };
inline constexpr uint32_t kThunderboltMaxQpsPerDevice = 10;
inline constexpr uint32_t kThunderboltMaxWorkRequests = 4095;  // per QP
inline constexpr size_t kThunderboltFrameBytes = 4096;
// "thunderbolt" or "none".
absl::string_view UcProfileName(UcProfile profile);

enum class UcLinkKind : uint8_t { kUdp, kVerbs };

// Work requests one UC QP of the verbs link posts for a channel window of
// `window` frames: receives for twice the peer's window plus its
// acknowledgements, sends for the window plus acknowledgements.
constexpr uint32_t UcReceiveDepth(uint32_t window) { return 2 * window + 16; }
constexpr uint32_t UcSendDepth(uint32_t window) { return window + 16; }
// A transport's lanes (endpoints) to one node share one link: one UC QP per
// device, or one UDP socket (a Thunderbolt controller has only
// kThunderboltMaxQpsPerDevice QPs). A QP's queues are sized for this many
// lanes' windows, as far as the device (or the profile) allows; more lanes
// still work, but their frames may find no receive posted and be sent
// again.
inline constexpr uint32_t kUcLanesPerLink = 8;
inline constexpr uint32_t kUcDefaultWindowFrames = 32;

// UcOptions::busy_poll at most (longer only burns a core).
inline constexpr absl::Duration kUcMaxBusyPoll = absl::Milliseconds(10);

struct UcOptions {
  // The link a node listens on (a client follows each node's address).
  UcLinkKind link = UcLinkKind::kUdp;
  // kVerbs: the devices, GID, self_name (the node's address is
  // "uc://" + self_name + "/" + instance) and device matrix, as for the
  // verbs backend.
  // Clients use it for every uc://NAME node.
  VerbsOptions verbs;
  // kThunderbolt: at most kThunderboltMaxQpsPerDevice UC QPs per device
  // (more peers than that are refused, naming the limit), at most
  // kThunderboltMaxWorkRequests per QP, frame_bytes of exactly
  // kThunderboltFrameBytes (InvalidArgument otherwise), and link-local IPv6
  // GIDs accepted where no IPv4 one exists.
  UcProfile profile = UcProfile::kNone;
  // Every frame's size (a receive must cover a send: Apple's 4 KiB page).
  size_t frame_bytes = 4096;
  // Frames in flight per channel; with UDP, what the socket buffer holds.
  uint32_t window_frames = kUcDefaultWindowFrames;
  // A peer that answers nothing for this long while requests wait fails
  // the endpoint (client) or the session (node) Unavailable.
  absl::Duration dead_after = absl::Seconds(2);
  // How long a thread with nothing to do polls its links before it sleeps
  // on them: the client waiting for a response (as VerbsOptions.busy_poll
  // on a CQ), the node's responder after its latest frame. Zero sleeps at
  // once (a wake-up per frame); an answer that comes within the poll
  // saves the wake-up, at the cost of a core while it lasts. At most
  // kUcMaxBusyPoll.
  absl::Duration busy_poll = absl::Microseconds(20);
  // Client: how long Connect waits for the node's answer.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Node: the most bytes a request may carry or ask for (at most
  // kUcChunkBytes; more is malformed).
  uint32_t max_request_bytes = kUcChunkBytes;
  // Node on UDP: admit a session only once its hello presents a token this
  // transport's AcceptHandshake issued (each works once, within 30 s); a
  // session that opens with anything else ends before any request is read,
  // and a hello without a valid token is refused (the client's Connect
  // fails PermissionDenied). A node turns this on when its control plane
  // runs TLS, so only clients that authenticated there reach its memory.
  // Sessions on UC queue pairs need none (the handshake made their link).
  // Clients need no setting: Connect asks the node through the Handshake it
  // is given and presents the token when one comes back.
  bool require_token = false;
  UcLinkFaults faults;
};

// InvalidArgument for options out of their bounds.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcTransport(
    const UcOptions& options = {});

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_UC_H_
