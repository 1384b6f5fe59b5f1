// How UcChannel works.
//
// Frames. Every frame starts with a 40-byte little-endian header:
//
//   0  u32 magic "MPUC"        16 u32 seq (data frames)
//   4  u8  version (1)         20 u32 ack: the next seq the sender expects
//   5  u8  type (data, ack)    24 u64 sack: bit i set = frame ack+1+i held
//   6  u8  flags (first, last) 32 u32 payload bytes that follow the header
//   7  u8  0                   36 u32 checksum: low 32 bits of XXH3-64 over
//   8  u64 session                    bytes 0..35, seeding one over
//                                     the payload
//
// A message is split into data frames of consecutive sequence numbers; the
// first carries `first`, the last `last` (a one-frame message both). Every
// frame, data or not, acknowledges what its sender has received: `ack` is
// cumulative, `sack` names frames held beyond a gap. A frame with a bad
// checksum, magic, version, length or session is dropped unseen; UC's own
// CRC covers the wire, the checksum covers the rest (and a hostile peer).
//
// Sending. At most window_frames frames are unacknowledged. When the
// oldest frame's retransmission timeout passes (from the smoothed round
// trip, RFC 6298 style, doubled for every transmission) it alone is sent
// again and the others wait another timeout; a frame is also sent again,
// sooner, when the peer acknowledged a later frame and the frame has been
// out for a round trip (a gap: it was probably lost). Round trips are
// sampled only from frames sent once (Karn).
//
// Receiving. Frames are taken in sequence order: a frame below `expected_`
// is a duplicate (a retransmission crossed an acknowledgement), dropped but
// acknowledged again; a frame at most a window ahead waits in `ahead_`; one
// further ahead is dropped. So every frame, and every message, is delivered
// exactly once and in order: a retransmitted WRITE or CAS executes once.
// Whatever arrives makes an acknowledgement due; it rides on the next data
// frame, or Pump sends it alone.
//
// Copies. A message is copied once, into the channel (Send: a READ's bytes
// are taken when it executes); its frames are slices of it, each header
// built on the stack, and the link gathers header and payload where it
// sends from. A frame that arrives in order goes from the link's buffer
// straight into the message being assembled; only a frame ahead of order
// is copied to wait.
//
// Credits. A UC SEND that finds no posted receive is lost. The window is
// the credit: the receiver posts more receives than one window of data
// frames, so a well-behaved sender never overruns it; acknowledgement-only
// frames may still be lost then, which costs a retransmission, not
// correctness (acknowledgements are cumulative).
//
// Liveness. UC gives no error completion when the peer dies, so with
// frames unacknowledged and no valid frame from the peer for dead_after,
// Pump fails the channel Unavailable; an idle channel never fails (there is
// nothing to lose).
#include "rdma/uc_channel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace meshpool::rdma::internal {
namespace {

constexpr uint32_t kMagic = 0x4355504d;  // "MPUC"
constexpr uint8_t kVersion = 1;
constexpr uint8_t kTypeData = 1;
constexpr uint8_t kTypeAck = 2;
constexpr uint8_t kFlagFirst = 1;
constexpr uint8_t kFlagLast = 2;
// Byte offsets in the header.
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffType = 5, kOffFlags = 6,
                 kOffSession = 8, kOffSeq = 16, kOffAck = 20, kOffSack = 24,
                 kOffLength = 32, kOffChecksum = 36;
static_assert(kOffChecksum + 4 == kUcFrameHeaderBytes);
// Before a round trip is measured, a frame waits this many min_rto.
constexpr int kInitialRtoFactor = 20;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}

// Serial-number order over 32-bit sequence numbers (they wrap).
bool SeqBefore(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

// The header's hash seeds the payload's (two one-shot calls, no state).
uint32_t Checksum(const uint8_t* header, absl::Span<const uint8_t> payload) {
  const uint64_t h = XXH3_64bits(header, kOffChecksum);
  return static_cast<uint32_t>(
      XXH3_64bits_withSeed(payload.data(), payload.size(), h));
}

}  // namespace

absl::StatusOr<UcChannel> UcChannel::Create(Options options, FrameSink sink) {
  if (options.frame_bytes < kUcMinFrameBytes ||
      options.frame_bytes > kUcMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("uc channel: frame_bytes ", options.frame_bytes,
                     " is outside ", kUcMinFrameBytes, "..", kUcMaxFrameBytes));
  }
  if (options.window_frames < 1 || options.window_frames > kUcMaxWindowFrames) {
    return absl::InvalidArgumentError(
        absl::StrCat("uc channel: window_frames ", options.window_frames,
                     " is outside 1..", kUcMaxWindowFrames));
  }
  if (options.min_rto <= absl::ZeroDuration() ||
      options.max_rto < options.min_rto ||
      options.dead_after <= options.max_rto) {
    return absl::InvalidArgumentError(
        absl::StrCat("uc channel: need 0 < min_rto <= max_rto < dead_after (",
                     absl::FormatDuration(options.min_rto), ", ",
                     absl::FormatDuration(options.max_rto), ", ",
                     absl::FormatDuration(options.dead_after), ")"));
  }
  if (!sink) return absl::InvalidArgumentError("uc channel: no frame sink");
  return UcChannel(options, std::move(sink));
}

UcChannel::UcChannel(Options options, FrameSink sink)
    : options_(options), sink_(std::move(sink)) {}

absl::Status UcChannel::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
  return status_;
}

absl::Status UcChannel::Send(
    absl::Span<const absl::Span<const uint8_t>> parts) {
  if (!status_.ok()) return status_;
  size_t total = 0;
  for (absl::Span<const uint8_t> p : parts) total += p.size();
  if (total > options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "uc channel: a message of ", total, " bytes is over the limit of ",
        options_.max_message_bytes));
  }
  auto message = std::make_shared<std::vector<uint8_t>>();
  message->reserve(total);
  for (absl::Span<const uint8_t> p : parts)
    message->insert(message->end(), p.begin(), p.end());
  pending_.push_back(std::move(message));
  return absl::OkStatus();
}

absl::Duration UcChannel::Rto(int transmissions) const {
  absl::Duration base = srtt_.has_value()
                            ? *srtt_ + 4 * rttvar_
                            : kInitialRtoFactor * options_.min_rto;
  base = std::clamp(base, options_.min_rto, options_.max_rto);
  for (int i = 1; i < transmissions && base < options_.max_rto; ++i) base *= 2;
  return std::min(base, options_.max_rto);
}

absl::Time UcChannel::ResendAt(const Outgoing& out) const {
  absl::Time at = out.sent_at + Rto(out.transmissions);
  // A gap below a frame the peer holds: lost, most likely; one round trip
  // of patience for reordering.
  if (any_sacked_ && SeqBefore(out.seq, highest_sacked_)) {
    const absl::Duration rtt =
        std::max(srtt_.value_or(options_.min_rto), options_.min_rto);
    at = std::min(at, out.sent_at + rtt);
  }
  return at;
}

bool UcChannel::Emit(uint8_t type, uint8_t flags, uint32_t seq,
                     absl::Span<const uint8_t> payload) {
  uint64_t sack = 0;
  for (const auto& [held, frame] : ahead_) {
    const uint32_t bit = held - expected_ - 1;
    if (bit < kUcSackFrames) sack |= uint64_t{1} << bit;
  }
  uint8_t h[kUcFrameHeaderBytes];
  Store<uint32_t>(h + kOffMagic, kMagic);
  h[kOffVersion] = kVersion;
  h[kOffType] = type;
  h[kOffFlags] = flags;
  h[7] = 0;
  Store<uint64_t>(h + kOffSession, options_.session);
  Store<uint32_t>(h + kOffSeq, seq);
  Store<uint32_t>(h + kOffAck, expected_);
  Store<uint64_t>(h + kOffSack, sack);
  Store<uint32_t>(h + kOffLength, static_cast<uint32_t>(payload.size()));
  Store<uint32_t>(h + kOffChecksum, Checksum(h, payload));
  ack_due_ = false;
  return sink_({h, kUcFrameHeaderBytes}, payload);
}

void UcChannel::OnFrame(absl::Span<const uint8_t> frame, absl::Time now) {
  if (!status_.ok()) return;
  const uint8_t* h = frame.data();
  if (frame.size() < kUcFrameHeaderBytes ||
      Load<uint32_t>(h + kOffMagic) != kMagic || h[kOffVersion] != kVersion ||
      Load<uint64_t>(h + kOffSession) != options_.session) {
    ++stats_.frames_dropped;
    return;
  }
  const uint32_t length = Load<uint32_t>(h + kOffLength);
  if (length > frame.size() - kUcFrameHeaderBytes ||
      length > options_.frame_bytes - kUcFrameHeaderBytes) {
    ++stats_.frames_dropped;
    return;
  }
  absl::Span<const uint8_t> payload =
      frame.subspan(kUcFrameHeaderBytes, length);
  const uint8_t type = h[kOffType];
  if (Load<uint32_t>(h + kOffChecksum) != Checksum(h, payload) ||
      (type != kTypeData && type != kTypeAck) ||
      !TakeAck(Load<uint32_t>(h + kOffAck), Load<uint64_t>(h + kOffSack),
               now)) {
    ++stats_.frames_dropped;
    return;
  }
  heard_from_peer_ = now;
  if (type == kTypeData) {
    TakeData(Load<uint32_t>(h + kOffSeq), h[kOffFlags], payload);
  }
}

bool UcChannel::TakeAck(uint32_t ack, uint64_t sack, absl::Time now) {
  if (SeqBefore(next_seq_, ack)) return false;  // acknowledges the unsent
  while (!unacked_.empty() && SeqBefore(unacked_.front().seq, ack)) {
    const Outgoing& out = unacked_.front();
    if (out.transmissions == 1) {
      const absl::Duration sample = now - out.sent_at;
      if (!srtt_.has_value()) {
        srtt_ = sample;
        rttvar_ = sample / 2;
      } else {
        rttvar_ = (3 * rttvar_ + absl::AbsDuration(*srtt_ - sample)) / 4;
        srtt_ = (7 * *srtt_ + sample) / 8;
      }
    }
    if (out.flags & kFlagLast) ++stats_.messages_sent;
    unacked_.pop_front();
  }
  if (sack != 0) {
    for (Outgoing& out : unacked_) {
      const uint32_t bit = out.seq - ack - 1;
      if (bit < kUcSackFrames && (sack >> bit) & 1) {
        out.sacked = true;
        if (!any_sacked_ || SeqBefore(highest_sacked_, out.seq))
          highest_sacked_ = out.seq;
        any_sacked_ = true;
      }
    }
  }
  if (unacked_.empty() || SeqBefore(highest_sacked_, unacked_.front().seq)) {
    any_sacked_ = false;
  }
  return true;
}

void UcChannel::TakeData(uint32_t seq, uint8_t flags,
                         absl::Span<const uint8_t> payload) {
  ack_due_ = true;  // a duplicate too: the peer missed our acknowledgement
  if (SeqBefore(seq, expected_) || seq - expected_ >= options_.window_frames) {
    ++stats_.frames_dropped;
    return;
  }
  if (seq != expected_) {
    ahead_.try_emplace(seq, flags,
                       std::vector<uint8_t>(payload.begin(), payload.end()));
    return;
  }
  Deliver(flags, payload);
  ++expected_;
  for (auto it = ahead_.find(expected_); it != ahead_.end() && status_.ok();
       it = ahead_.find(expected_)) {
    Deliver(it->second.first, it->second.second);
    ahead_.erase(it);
    ++expected_;
  }
}

void UcChannel::Deliver(uint8_t flags, absl::Span<const uint8_t> payload) {
  if (!status_.ok()) return;
  ++stats_.frames_received;
  if ((flags & kFlagFirst) != 0) {
    if (in_message_) {
      (void)Fail(absl::DataLossError(
          "uc channel: the peer began a message inside another"));
      return;
    }
    in_message_ = true;
  } else if (!in_message_) {
    (void)Fail(absl::DataLossError(
        "uc channel: the peer continued a message it never began"));
    return;
  }
  if (assembling_.size() + payload.size() > options_.max_message_bytes) {
    (void)Fail(absl::DataLossError(
        absl::StrCat("uc channel: the peer sent a message over the limit of ",
                     options_.max_message_bytes, " bytes")));
    return;
  }
  assembling_.insert(assembling_.end(), payload.begin(), payload.end());
  if ((flags & kFlagLast) != 0) {
    delivered_.push_back(std::move(assembling_));
    assembling_.clear();
    in_message_ = false;
    ++stats_.messages_received;
  }
}

absl::Status UcChannel::Pump(absl::Time now) {
  if (!status_.ok()) return status_;
  if (!unacked_.empty()) {
    const absl::Time since =
        std::max(heard_from_peer_, unacked_.front().first_sent_at);
    if (now - since >= options_.dead_after) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "uc channel: the peer has not answered for ",
          absl::FormatDuration(now - since), " with ", unacked_.size(),
          " frames unacknowledged (it died, or the link is down)")));
    }
  }
  const absl::Status broken =
      absl::UnavailableError("uc channel: the link is broken");
  // Gaps below a frame the peer holds are all sent again. A timeout sends
  // only the oldest frame again (a probe) and restarts every other frame's
  // timer with the probe's back-off: a peer that is slow to take its
  // frames (not polling) costs one frame per timeout, not a window.
  const Outgoing* probe = nullptr;
  for (Outgoing& out : unacked_) {
    if (out.sacked || now < ResendAt(out)) continue;
    const bool gap = any_sacked_ && SeqBefore(out.seq, highest_sacked_);
    if (!gap && probe != nullptr) {
      out.sent_at = now;
      out.transmissions = probe->transmissions;
      continue;
    }
    if (!Emit(kTypeData, out.flags, out.seq, out.payload())) {
      return Fail(broken);
    }
    out.sent_at = now;
    ++out.transmissions;
    ++stats_.frames_resent;
    if (!gap) probe = &out;
  }
  while (!pending_.empty() && unacked_.size() < options_.window_frames) {
    const Message& message = pending_.front();
    const size_t n =
        std::min(payload_bytes(), message->size() - pending_offset_);
    uint8_t flags = 0;
    if (pending_offset_ == 0) flags |= kFlagFirst;
    if (pending_offset_ + n == message->size()) flags |= kFlagLast;
    Outgoing out{next_seq_, flags, message, pending_offset_, n, now,
                 now,       1,     false};
    if (!Emit(kTypeData, out.flags, out.seq, out.payload())) {
      return Fail(broken);
    }
    unacked_.push_back(std::move(out));
    ++next_seq_;
    ++stats_.frames_sent;
    pending_offset_ += n;
    if ((flags & kFlagLast) != 0) {
      pending_.pop_front();
      pending_offset_ = 0;
    }
  }
  if (ack_due_) {
    if (!Emit(kTypeAck, 0, 0, {})) return Fail(broken);
    ++stats_.acks_sent;
  }
  return absl::OkStatus();
}

std::optional<std::vector<uint8_t>> UcChannel::Receive() {
  if (delivered_.empty()) return std::nullopt;
  std::vector<uint8_t> message = std::move(delivered_.front());
  delivered_.pop_front();
  return message;
}

absl::Time UcChannel::NextDeadline() const {
  if (!status_.ok()) return absl::InfiniteFuture();
  if (ack_due_ ||
      (!pending_.empty() && unacked_.size() < options_.window_frames)) {
    return absl::InfinitePast();
  }
  absl::Time next = absl::InfiniteFuture();
  if (!unacked_.empty()) {
    next = std::max(heard_from_peer_, unacked_.front().first_sent_at) +
           options_.dead_after;
  }
  for (const Outgoing& out : unacked_) {
    if (!out.sacked) next = std::min(next, ResendAt(out));
  }
  return next;
}

}  // namespace meshpool::rdma::internal
