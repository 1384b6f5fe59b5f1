// The uc backend's UDP link and the fault injection every link applies.
#include "rdma/uc_link.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma::internal {

bool FrameFaults::Apply(
    absl::Span<const uint8_t> frame,
    absl::FunctionRef<bool(absl::Span<const uint8_t>)> send) {
  std::uniform_real_distribution<double> roll(0, 1);
  if (faults_.drop > 0 && roll(rng_) < faults_.drop) return true;
  absl::Span<const uint8_t> out = frame;
  if (faults_.corrupt > 0 && roll(rng_) < faults_.corrupt && !frame.empty()) {
    corrupted_.assign(frame.begin(), frame.end());
    corrupted_[rng_() % corrupted_.size()] ^=
        static_cast<uint8_t>(1 + rng_() % 255);
    out = corrupted_;
  }
  if (!send(out)) return false;
  if (faults_.duplicate > 0 && roll(rng_) < faults_.duplicate) return send(out);
  return true;
}

bool UdpFrameSender::Send(absl::Span<const uint8_t> frame, const sockaddr* to,
                          socklen_t to_len) {
  return faults_.Apply(frame, [&](absl::Span<const uint8_t> f) {
    ssize_t sent;
    do {
      sent = ::sendto(fd_, f.data(), f.size(), MSG_NOSIGNAL, to, to_len);
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

bool UdpLink::Send(absl::Span<const uint8_t> frame) {
  return sender_.Send(frame);
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
