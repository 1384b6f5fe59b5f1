// meshpool/rdma internal: the tcp backend's client side. One TcpEndpoint is
// one TCP connection (lane) to a responder; requests are pipelined on it.
// Not thread-safe (an Endpoint is used by one thread at a time).
#ifndef MESHPOOL_RDMA_TCP_ENDPOINT_H_
#define MESHPOOL_RDMA_TCP_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"
#include "rdma/socket.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma::internal {

class TcpEndpoint : public Endpoint {
 public:
  // Connects to "tcp://host:port" and, when `token` is not empty, opens
  // with a TcpHello presenting it. REQUIRES: `token` is empty or the
  // kTokenBytes a node's handshake issued. InvalidArgument for a
  // malformed address; Unavailable when the peer cannot be reached within
  // `connect_timeout`.
  static absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view address, absl::Duration connect_timeout,
      absl::Duration send_timeout, absl::string_view token = {});

  // See rdma.h. Writes every header, and each WRITE's payload straight from
  // the caller's buffer, before returning (blocking).
  absl::Status Post(absl::Span<const WorkRequest> batch) override;
  // See rdma.h. Receives READ payloads straight into the caller's buffers,
  // many responses per system call; a READ that fails (the endpoint broke)
  // may have changed its buffer.
  // Once broken, outstanding requests complete with Unavailable (the one
  // the responder refused with PermissionDenied), then Poll returns
  // Unavailable.
  absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                              absl::Duration timeout) override;
  bool healthy() const override { return broken_.ok(); }

 private:
  struct Pending {
    uint64_t wr_id;
    Opcode opcode;
    uint8_t* local;
    uint32_t length;
  };
  enum class Step { kProgress, kWouldBlock, kCompleted };
  // Responses one receive call may take, beyond the one under way.
  static constexpr size_t kMaxResponsesPerRecv = 64;

  explicit TcpEndpoint(UniqueFd fd) : fd_(std::move(fd)) {}
  // Marks the endpoint broken for good and shuts the socket down.
  void Break(absl::string_view why);
  // One non-blocking receive of as many of the next responses as `out` has
  // room for; writes their completions to `out` and counts them in
  // `*completed`. kWouldBlock when the socket had less than asked for.
  Step ReceiveBatch(absl::Span<Completion> out, size_t* completed);
  // Accounts `got` received bytes against the responses planned by
  // ReceiveBatch, completing those that are whole.
  void Consume(size_t got, absl::Span<Completion> out, size_t* completed);
  Step OnHeaderComplete(Completion* out);
  void Complete(Completion* out, absl::Status status);
  // Waits up to `timeout` for the socket to become readable.
  absl::Status WaitReadable(absl::Duration timeout);

  UniqueFd fd_;
  absl::Status broken_;  // OK while healthy, else Unavailable
  std::deque<Pending> pending_;
  ResponseHeader rx_header_{};  // the head response's header
  size_t rx_header_got_ = 0;
  size_t rx_payload_got_ = 0;
  // Headers of the responses after the head, received in the same call.
  ResponseHeader rx_ahead_[kMaxResponsesPerRecv]{};
  std::vector<iovec> rx_iov_;              // reused by ReceiveBatch
  std::vector<RequestHeader> tx_headers_;  // reused by Post
  std::vector<iovec> tx_iov_;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_ENDPOINT_H_
