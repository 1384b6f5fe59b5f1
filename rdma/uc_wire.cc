// The uc backend's UDP link: frames out through sendto, with injected
// faults for tests.
#include "rdma/uc_wire.h"

#include <cerrno>

namespace meshpool::rdma::internal {

bool UdpFrameSender::SendOnce(absl::Span<const uint8_t> frame,
                              const sockaddr* to, socklen_t to_len) {
  ssize_t sent;
  do {
    sent = ::sendto(fd_, frame.data(), frame.size(), MSG_NOSIGNAL, to, to_len);
  } while (sent < 0 && errno == EINTR);
  // EAGAIN / ENOBUFS: the buffer is full, the frame is lost (the channel
  // sends it again). ECONNREFUSED: an earlier frame found no one there.
  return !(sent < 0 && errno == ECONNREFUSED);
}

bool UdpFrameSender::Send(absl::Span<const uint8_t> frame, const sockaddr* to,
                          socklen_t to_len) {
  std::uniform_real_distribution<double> roll(0, 1);
  if (faults_.drop > 0 && roll(rng_) < faults_.drop) return true;
  absl::Span<const uint8_t> out = frame;
  if (faults_.corrupt > 0 && roll(rng_) < faults_.corrupt && !frame.empty()) {
    corrupted_.assign(frame.begin(), frame.end());
    corrupted_[rng_() % corrupted_.size()] ^=
        static_cast<uint8_t>(1 + rng_() % 255);
    out = corrupted_;
  }
  if (!SendOnce(out, to, to_len)) return false;
  if (faults_.duplicate > 0 && roll(rng_) < faults_.duplicate) {
    return SendOnce(out, to, to_len);
  }
  return true;
}

UcChannel::Options ChannelOptions(const UcOptions& options, uint64_t session) {
  UcChannel::Options o;
  o.session = session;
  o.frame_bytes = options.frame_bytes;
  o.window_frames = options.window_frames;
  o.max_message_bytes = kUcMaxMessageBytes;
  o.dead_after = options.dead_after;
  return o;
}

}  // namespace meshpool::rdma::internal
