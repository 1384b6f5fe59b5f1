// meshpool/rdma internal: the uc backend's client side. One UcEndpoint is one
// channel (its own session, on a view of the link its transport shares among
// its lanes to the node: rdma/uc_link_mux.h) to a node's responder; requests
// are pipelined on it, split into chunks of at most kUcChunkBytes. Not
// thread-safe (an Endpoint is used by one thread at a time); the channel
// makes progress only inside Post and Poll.
#ifndef MESHPOOL_RDMA_UC_ENDPOINT_H_
#define MESHPOOL_RDMA_UC_ENDPOINT_H_

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"
#include "rdma/uc.h"
#include "rdma/uc_channel.h"
#include "rdma/uc_link.h"
#include "rdma/uc_wire.h"

namespace meshpool::rdma::internal {

class UcEndpoint : public Endpoint {
 public:
  // Opens a channel on `link` (a UDP socket or a UC QP connected to the
  // node at `address`) and exchanges hellos with the responder, presenting
  // `token` (kTokenBytes from the node's handshake; empty: none).
  // Unavailable when no responder answers within options.connect_timeout;
  // PermissionDenied when the node refuses the hello (it requires a token
  // and this one was missing, spent or expired).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Open(
      std::unique_ptr<UcLink> link, std::string address,
      const UcOptions& options, absl::string_view token = {});
  ~UcEndpoint() override;  // says goodbye (best effort)

  // See rdma.h. Copies each WRITE's payload into the channel.
  absl::Status Post(absl::Span<const WorkRequest> batch) override;
  // See rdma.h. Copies READ payloads into the caller's buffers. Once
  // broken, outstanding requests complete with Unavailable (the one the
  // responder refused with PermissionDenied), then Poll returns
  // Unavailable.
  absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                              absl::Duration timeout) override;
  bool healthy() const override { return broken_.ok(); }

 private:
  // One request on the wire: a whole work request, or one chunk of one.
  struct Chunk {
    uint64_t wr_id;
    Opcode opcode;
    uint8_t* local;
    uint32_t length;
    bool last;  // of its work request: completes it
  };
  UcEndpoint(std::unique_ptr<UcLink> link, std::string address,
             absl::Duration busy_poll);

  // Receives what the socket holds, lets the channel send, and turns
  // delivered responses into completions.
  void Progress();
  // Feeds the channel every frame the link holds.
  void Drain();
  void TakeResponse(const std::vector<uint8_t>& message);
  void Break(absl::Status why);
  // Waits until the link may have frames, or `until`.
  void Wait(absl::Time until);

  std::unique_ptr<UcLink> link_;
  const std::string address_;
  const absl::Duration busy_poll_;    // UcOptions::busy_poll
  std::optional<UcChannel> channel_;  // built after link_ (its sink)
  absl::Status broken_;               // OK while healthy
  std::deque<Chunk> chunks_;          // sent, in order, not yet answered
  size_t outstanding_ = 0;            // work requests not yet completed
  std::deque<Completion> ready_;
  std::vector<pollfd> poll_fds_;  // Wait's, kept to spare an allocation
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_ENDPOINT_H_
