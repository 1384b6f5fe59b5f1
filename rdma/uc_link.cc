// The uc backend's UDP link and the fault injection every link applies.
#include "rdma/uc_link.h"

#include <sys/uio.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma::internal {

bool FrameFaults::Apply(absl::Span<const uint8_t> header,
                        absl::Span<const uint8_t> payload, FrameParts send) {
  std::uniform_real_distribution<double> roll(0, 1);
  if (faults_.drop > 0 && roll(rng_) < faults_.drop) return true;
  absl::Span<const uint8_t> h = header, p = payload;
  const size_t size = header.size() + payload.size();
  if (faults_.corrupt > 0 && roll(rng_) < faults_.corrupt && size > 0) {
    corrupted_.assign(header.begin(), header.end());
    corrupted_.insert(corrupted_.end(), payload.begin(), payload.end());
    corrupted_[rng_() % size] ^= static_cast<uint8_t>(1 + rng_() % 255);
    h = corrupted_;
    p = {};
  }
  if (!send(h, p)) return false;
  if (faults_.duplicate > 0 && roll(rng_) < faults_.duplicate) {
    return send(h, p);
  }
  return true;
}

bool UdpFrameSender::Send(absl::Span<const uint8_t> header,
                          absl::Span<const uint8_t> payload, const sockaddr* to,
                          socklen_t to_len) {
  return faults_.Apply(
      header, payload,
      [&](absl::Span<const uint8_t> h, absl::Span<const uint8_t> p) {
        iovec iov[2] = {{const_cast<uint8_t*>(h.data()), h.size()},
                        {const_cast<uint8_t*>(p.data()), p.size()}};
        msghdr msg{};
        msg.msg_name = const_cast<sockaddr*>(to);
        msg.msg_namelen = to_len;
        msg.msg_iov = iov;
        msg.msg_iovlen = p.empty() ? 1 : 2;
        ssize_t sent;
        do {
          sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
        } while (sent < 0 && errno == EINTR);
        // EAGAIN / ENOBUFS: the buffer is full, the frame is lost (the channel
        // sends it again). ECONNREFUSED: an earlier frame found no one there.
        return !(sent < 0 && errno == ECONNREFUSED);
      });
}

absl::StatusOr<std::unique_ptr<UdpLink>> UdpLink::Connect(
    const HostPort& peer, size_t frame_bytes, const UcLinkFaults& faults) {
  MESHPOOL_ASSIGN_OR_RETURN(UniqueFd fd, ConnectUdp(peer));
  return std::unique_ptr<UdpLink>(
      new UdpLink(std::move(fd), frame_bytes, faults));
}

bool UdpLink::Send(absl::Span<const uint8_t> header,
                   absl::Span<const uint8_t> payload) {
  return sender_.Send(header, payload);
}

absl::Status UdpLink::Receive(FrameTaker take, int max) {
  for (int i = 0; i < max; ++i) {
    const ssize_t n = ::recv(fd_.get(), rx_.data(), rx_.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) {
        --i;
        continue;
      }
      if (errno == ECONNREFUSED) {
        return absl::UnavailableError(
            "the node's port is closed (it died or stopped)");
      }
      return absl::OkStatus();  // EAGAIN: nothing more now
    }
    if (static_cast<size_t>(n) >= rx_.size()) continue;  // over a frame
    take(absl::MakeConstSpan(rx_.data(), static_cast<size_t>(n)));
  }
  return absl::OkStatus();
}

}  // namespace meshpool::rdma::internal
