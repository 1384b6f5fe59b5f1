// meshpool/rdma internal: the unreliable frame links the uc backend runs its
// channels over (rdma/uc_channel.h). A link carries frames between two
// peers and may drop, duplicate, reorder or (on UDP, with injected faults)
// corrupt them; the channel above makes that reliable.
//
// Two links: a connected UDP socket (UdpLink, here) and a UC queue pair
// (rdma/verbs_uc_link.h, Apple's RDMA over Thunderbolt and Soft-RoCE).
//
// Thread-safety: a link is used by one thread at a time.
#ifndef MESHPOOL_RDMA_UC_LINK_H_
#define MESHPOOL_RDMA_UC_LINK_H_

#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/socket.h"
#include "rdma/uc.h"

namespace meshpool::rdma::internal {

// Receives one frame; the bytes are valid only during the call.
using FrameTaker = absl::FunctionRef<void(absl::Span<const uint8_t>)>;
// Sends one frame given as its header and payload (either may be empty).
using FrameParts = absl::FunctionRef<bool(absl::Span<const uint8_t> header,
                                          absl::Span<const uint8_t> payload)>;

class UcLink {
 public:
  virtual ~UcLink() = default;

  // Sends one frame, `header` then `payload` (gathered, copied at most
  // once). False when the link is broken for good; a frame the link had no
  // room for is lost silently (true), as on a wire. A link may hold frames
  // back to post them together: call FlushSends() after a burst (a
  // channel's Pump). REQUIRES: header.size() + payload.size() <= the frame
  // size the link was made for.
  virtual bool Send(absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload) = 0;
  // Posts the frames Send held back, with one doorbell. False when the
  // link is broken for good.
  virtual bool FlushSends() { return true; }

  // Passes every frame received so far (at most `max`) to `take`. Returns
  // Unavailable, naming why, once the link is broken (the peer's port
  // closed, the device gone); it stays broken.
  virtual absl::Status Receive(FrameTaker take, int max) = 0;

  // Appends the descriptors poll(2) reports readable when frames may have
  // arrived. Call PrepareWait() first, and sleep on them only when that
  // returns true (false: frames arrived meanwhile; Receive them first).
  virtual void AddWaitFds(std::vector<pollfd>* fds) const = 0;
  virtual bool PrepareWait() = 0;

  // Waits up to `max` until every frame sent has left (a goodbye sent just
  // before the link is destroyed). No-op where sending is synchronous.
  virtual void AwaitSent(absl::Duration max) {}

  // For a link shared by several channels (UcLinkMux): the session whose
  // frames this view receives. Call before the channel's first frame.
  virtual void BindSession(uint64_t session) {}
  // The peer stopped answering on this link (or never did): no new channel
  // may join it. Channels already on it keep it.
  virtual void Abandon() {}
  // Called just before a channel's goodbye: true when no other channel
  // uses the link or will join it, so the peer may drop the link with the
  // session (kUcByeLast).
  virtual bool LastUser() { return true; }
};

// Applies injected faults (UcLinkFaults: drop, duplicate, corrupt) to
// frames on their way out. Not thread-safe.
class FrameFaults {
 public:
  explicit FrameFaults(const UcLinkFaults& faults)
      : faults_(faults), rng_(faults.seed) {}
  // Sends the frame `header` + `payload` through `send` zero, one or two
  // times, perhaps changed. Returns false when a `send` did.
  bool Apply(absl::Span<const uint8_t> header,
             absl::Span<const uint8_t> payload, FrameParts send);

 private:
  UcLinkFaults faults_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> corrupted_;
};

// Sends frames on a UDP socket (connected, or to an address), with faults.
// Not thread-safe.
class UdpFrameSender {
 public:
  UdpFrameSender(int fd, const UcLinkFaults& faults)
      : fd_(fd), faults_(faults) {}
  // Sends `header` + `payload` as one datagram. False when the socket
  // reports the peer gone (ECONNREFUSED); a full buffer drops the frame,
  // as a UC link would.
  bool Send(absl::Span<const uint8_t> header, absl::Span<const uint8_t> payload,
            const sockaddr* to = nullptr, socklen_t to_len = 0);

 private:
  int fd_;
  FrameFaults faults_;
};

// A UDP socket connected to one peer: the client side of a uc:// node.
class UdpLink : public UcLink {
 public:
  // Unavailable when the peer cannot be reached (no route).
  static absl::StatusOr<std::unique_ptr<UdpLink>> Connect(
      const HostPort& peer, size_t frame_bytes, const UcLinkFaults& faults);

  bool Send(absl::Span<const uint8_t> header,
            absl::Span<const uint8_t> payload) override;
  absl::Status Receive(FrameTaker take, int max) override;
  void AddWaitFds(std::vector<pollfd>* fds) const override {
    fds->push_back({fd_.get(), POLLIN, 0});
  }
  bool PrepareWait() override { return true; }

 private:
  UdpLink(UniqueFd fd, size_t frame_bytes, const UcLinkFaults& faults)
      : fd_(std::move(fd)), sender_(fd_.get(), faults), rx_(frame_bytes + 1) {}
  UniqueFd fd_;
  UdpFrameSender sender_;
  std::vector<uint8_t> rx_;  // one frame and a byte (to see longer ones)
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_LINK_H_
