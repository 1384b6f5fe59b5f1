// How the client endpoint works: Post() appends request frames to one
// blocking socket (sendmsg gathers headers and WRITE payloads); Poll()
// receives responses with non-blocking recvmsg() calls that scatter many
// responses at once (ReceiveBatch), keeping a partially received response
// across calls, and waits with ppoll() when nothing is ready, so a slow or
// stuck peer never blocks Poll beyond its timeout.
#include "rdma/tcp_endpoint.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/region_registry.h"
#include "rdma/socket.h"
#include "rdma/tcp_wire.h"
#include "rdma/tokens.h"

namespace meshpool::rdma::internal {

absl::StatusOr<std::unique_ptr<Endpoint>> TcpEndpoint::Connect(
    absl::string_view address, absl::Duration connect_timeout,
    absl::Duration send_timeout, absl::string_view token) {
  MESHPOOL_ASSIGN_OR_RETURN(HostPort peer, ParseHostPort(address, "tcp://"));
  MESHPOOL_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(peer, connect_timeout));
  // A send that cannot progress for send_timeout fails (EAGAIN) and breaks
  // the endpoint, so Post never blocks for good on a hung peer.
  timeval tv = absl::ToTimeval(send_timeout);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(SO_SNDTIMEO)");
  }
  if (!token.empty()) {
    static_assert(sizeof(TcpHello::token) == kTokenBytes);
    TcpHello hello{};
    hello.magic = kHelloMagic;
    std::memcpy(hello.token, token.data(), kTokenBytes);
    iovec iov{&hello, sizeof(hello)};
    absl::Status sent = SendAll(fd.get(), absl::MakeSpan(&iov, 1));
    if (!sent.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot present the tcp token to ", address, ": ", sent.message()));
    }
  }
  return std::unique_ptr<Endpoint>(new TcpEndpoint(std::move(fd)));
}

void TcpEndpoint::Break(absl::string_view why) {
  if (!broken_.ok()) return;
  broken_ = absl::UnavailableError(absl::StrCat(
      "tcp endpoint broken (", why, "); drop it and Connect again"));
  ::shutdown(fd_.get(), SHUT_RDWR);
}

absl::Status TcpEndpoint::Post(absl::Span<const WorkRequest> batch) {
  MESHPOOL_RETURN_IF_ERROR(ValidateLocalBatch(batch, pending_.size()));
  if (!broken_.ok()) return broken_;
  tx_headers_.resize(batch.size());
  tx_iov_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const WorkRequest& wr = batch[i];
    RequestHeader& h = tx_headers_[i];
    h = RequestHeader{};
    h.magic = kRequestMagic;
    h.opcode = static_cast<uint8_t>(wr.opcode);
    h.rkey = wr.rkey;
    h.length = wr.length;
    h.wr_id = wr.wr_id;
    h.remote_addr = wr.remote_addr;
    h.compare_add = wr.compare_add;
    h.swap = wr.swap;
    tx_iov_.push_back({&h, sizeof(h)});
    if (wr.opcode == Opcode::kWrite) tx_iov_.push_back({wr.local, wr.length});
  }
  absl::Status sent = SendAll(fd_.get(), absl::MakeSpan(tx_iov_));
  if (!sent.ok()) {
    Break(sent.message());
    return broken_;
  }
  for (const WorkRequest& wr : batch) {
    pending_.push_back(Pending{wr.wr_id, wr.opcode,
                               static_cast<uint8_t*>(wr.local), wr.length});
  }
  return absl::OkStatus();
}

void TcpEndpoint::Complete(Completion* out, absl::Status status) {
  const Pending& head = pending_.front();
  out->wr_id = head.wr_id;
  out->opcode = head.opcode;
  out->status = std::move(status);
  pending_.pop_front();
  rx_header_got_ = 0;
  rx_payload_got_ = 0;
}

TcpEndpoint::Step TcpEndpoint::OnHeaderComplete(Completion* out) {
  const Pending& head = pending_.front();
  if (rx_header_.magic != kResponseMagic || rx_header_.wr_id != head.wr_id) {
    Break("response out of sequence or corrupt");
    return Step::kProgress;
  }
  if (rx_header_.status == static_cast<uint8_t>(WireStatus::kAccessDenied)) {
    Break("the peer refused a request and closed the connection");
    Complete(out, absl::PermissionDeniedError(absl::StrCat(
                      OpcodeName(head.opcode), " wr_id ", head.wr_id,
                      " named memory the peer does not expose (bad rkey or "
                      "out of bounds); refresh the region descriptor")));
    return Step::kCompleted;
  }
  const uint32_t expected = head.opcode == Opcode::kRead ? head.length : 0;
  if (rx_header_.status != static_cast<uint8_t>(WireStatus::kOk) ||
      rx_header_.length != expected) {
    Break("malformed response");
    return Step::kProgress;
  }
  if (IsAtomic(head.opcode)) {
    std::memcpy(head.local, &rx_header_.old_value, kAtomicBytes);
  }
  if (expected == 0) {
    Complete(out, absl::OkStatus());
    return Step::kCompleted;
  }
  return Step::kProgress;
}

TcpEndpoint::Step TcpEndpoint::ReceiveBatch(absl::Span<Completion> out,
                                            size_t* completed) {
  // The response stream is predictable: each pending request, in order,
  // gets one header and, for a READ, exactly its length in payload;
  // anything else breaks the endpoint. So one recvmsg() scatters the rest
  // of the head response and whole responses after it: headers into
  // rx_header_ and rx_ahead_, payloads straight into the callers' buffers.
  // A header that turns out wrong breaks the endpoint and fails every
  // request still pending, so bytes that a later READ's buffer took on the
  // plan's word are never reported as its data.
  static_assert(2 * (kMaxResponsesPerRecv + 1) <= IOV_MAX,
                "one receive's headers and payloads fit one recvmsg");
  const size_t responses =
      std::min({out.size(), pending_.size(), kMaxResponsesPerRecv + 1});
  rx_iov_.clear();
  size_t want = 0;
  auto add = [&](void* base, size_t length) {
    if (length == 0) return;
    rx_iov_.push_back({base, length});
    want += length;
  };
  for (size_t k = 0; k < responses; ++k) {
    const Pending& p = pending_[k];
    const size_t payload = p.opcode == Opcode::kRead ? p.length : 0;
    if (k == 0) {
      add(reinterpret_cast<uint8_t*>(&rx_header_) + rx_header_got_,
          sizeof(rx_header_) - rx_header_got_);
      add(p.local + rx_payload_got_, payload - rx_payload_got_);
    } else {
      add(&rx_ahead_[k - 1], sizeof(ResponseHeader));
      add(p.local, payload);
    }
  }
  msghdr msg{};
  msg.msg_iov = rx_iov_.data();
  msg.msg_iovlen = rx_iov_.size();
  const ssize_t got = RecvmsgNoCancel(fd_.get(), &msg, MSG_DONTWAIT);
  if (got == 0) {
    Break("the peer closed the connection");
    return Step::kProgress;
  }
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Step::kWouldBlock;
    if (errno != EINTR) Break(ErrnoToStatus(errno, "recvmsg").message());
    return Step::kProgress;
  }
  Consume(static_cast<size_t>(got), out, completed);
  // A short receive drained the socket: asking again now would only
  // return EAGAIN.
  if (!broken_.ok() || static_cast<size_t>(got) == want) {
    return Step::kProgress;
  }
  return Step::kWouldBlock;
}

void TcpEndpoint::Consume(size_t got, absl::Span<Completion> out,
                          size_t* completed) {
  // Response k of this receive: k == 0 is the head as it stood, whose
  // header went straight into rx_header_; k > 0 had its header in
  // rx_ahead_[k - 1] and none of it was received before.
  for (size_t k = 0; got > 0 && broken_.ok(); ++k) {
    if (rx_header_got_ < sizeof(rx_header_)) {
      const size_t take = std::min(got, sizeof(rx_header_) - rx_header_got_);
      if (k > 0) {
        std::memcpy(reinterpret_cast<uint8_t*>(&rx_header_) + rx_header_got_,
                    reinterpret_cast<const uint8_t*>(&rx_ahead_[k - 1]) +
                        rx_header_got_,
                    take);
      }
      rx_header_got_ += take;
      got -= take;
      if (rx_header_got_ < sizeof(rx_header_)) return;
      if (OnHeaderComplete(&out[*completed]) == Step::kCompleted) {
        ++*completed;
        continue;
      }
      if (!broken_.ok()) return;
    }
    const Pending& head = pending_.front();
    const size_t take = std::min<size_t>(got, head.length - rx_payload_got_);
    rx_payload_got_ += take;
    got -= take;
    if (rx_payload_got_ < head.length) return;
    Complete(&out[(*completed)++], absl::OkStatus());
  }
}

absl::Status TcpEndpoint::WaitReadable(absl::Duration timeout) {
  pollfd p{fd_.get(), POLLIN, 0};
  const timespec ts = absl::ToTimespec(timeout);
  if (::ppoll(&p, 1, &ts, nullptr) < 0 && errno != EINTR) {
    return ErrnoToStatus(errno, "ppoll");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> TcpEndpoint::Poll(absl::Span<Completion> out,
                                         absl::Duration timeout) {
  if (pending_.empty()) {
    if (!broken_.ok()) return broken_;
    return 0;
  }
  // Read the clock only once there is nothing to take without waiting.
  absl::Time deadline = absl::InfiniteFuture();
  size_t n = 0;
  while (n < out.size() && !pending_.empty()) {
    if (!broken_.ok()) {
      Complete(&out[n++], broken_);
      continue;
    }
    size_t completed = 0;
    const Step step = ReceiveBatch(out.subspan(n), &completed);
    n += completed;
    if (step != Step::kWouldBlock) continue;
    if (n > 0) break;
    const absl::Time now = absl::Now();
    if (deadline == absl::InfiniteFuture()) deadline = now + timeout;
    const absl::Duration left = deadline - now;
    if (left <= absl::ZeroDuration()) break;
    absl::Status waited = WaitReadable(left);
    if (!waited.ok()) Break(waited.message());
  }
  return n;
}

}  // namespace meshpool::rdma::internal
