// meshpool/rdma internal: a reliable, ordered message channel over an
// unreliable frame link, for the uc backend (Apple's RDMA over Thunderbolt:
// UC queue pairs, SEND/RECV only, no hardware acknowledgements, no error
// completion when the peer dies; ../shared/DESIGN.md §3).
//
// UcChannel is one direction pair between two peers (one UC QP): each side
// sends messages (byte strings up to Options::max_message_bytes) and
// receives the peer's, every message delivered exactly once, whole, in
// order, or the channel fails. A link may drop, duplicate, reorder or
// corrupt frames; it must not deliver a frame longer than it was sent.
//
// It is a state machine with no threads, clock or I/O of its own: the owner
// passes in the time, feeds it the frames the link received (OnFrame),
// lets it emit frames (Pump, through the FrameSink it was made with), and
// takes the messages it delivered (Receive). The wire format and the
// protocol (sequence numbers, selective acknowledgements, retransmission
// with back-off, the window, liveness) are described in uc_channel.cc.
//
// Thread-safety: none; the owner serialises every call.
#ifndef MESHPOOL_RDMA_UC_CHANNEL_H_
#define MESHPOOL_RDMA_UC_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshpool::rdma::internal {

// Apple's unit of a receive queue (a send and its receive must cover the
// same number of these): frames are a multiple of it on a Thunderbolt link.
inline constexpr size_t kUcPageBytes = 4096;
// Every frame starts with a header of this size (uc_channel.cc).
inline constexpr size_t kUcFrameHeaderBytes = 40;
// The smallest frame a link may offer (tests use small frames to split
// messages into many).
inline constexpr size_t kUcMinFrameBytes = 64;
// The largest single SEND Apple's RDMA accepts.
inline constexpr size_t kUcMaxFrameBytes = 16'773'120;
static_assert(kUcMinFrameBytes > kUcFrameHeaderBytes);
static_assert(kUcMaxFrameBytes % kUcPageBytes == 0);
// Frames sent and not yet acknowledged, at most (the receive queue the peer
// posts must hold this many plus room for acknowledgements).
inline constexpr uint32_t kUcMaxWindowFrames = 1024;
// Frames beyond the first missing one that an acknowledgement reports.
inline constexpr uint32_t kUcSackFrames = 64;
static_assert(kUcSackFrames <= kUcMaxWindowFrames);

// Emits one frame on the link: `header` (kUcFrameHeaderBytes) followed by
// `payload` (perhaps empty), both valid only during the call, so that a
// link gathers them where it sends from with no copy in between. Returns
// false when the link is broken (not when the frame is dropped: a UC link
// cannot tell).
using FrameSink = std::function<bool(absl::Span<const uint8_t> header,
                                     absl::Span<const uint8_t> payload)>;

class UcChannel {
 public:
  struct Options {
    // Both ends of one channel use the same id; frames of any other
    // session (an earlier connection) are ignored.
    uint64_t session = 0;
    // Every frame this side sends is exactly this long (a receive must
    // cover a send). REQUIRES: kUcMinFrameBytes <= frame_bytes <=
    // kUcMaxFrameBytes.
    size_t frame_bytes = kUcPageBytes;
    // Frames in flight unacknowledged, at most; the peer's receive queue
    // must be deeper. REQUIRES: 1 <= window_frames <= kUcMaxWindowFrames.
    uint32_t window_frames = 256;
    size_t max_message_bytes = 64 << 20;
    // Retransmission timeout bounds; it adapts between them to the
    // measured round trip and doubles for a frame sent again.
    absl::Duration min_rto = absl::Milliseconds(1);
    absl::Duration max_rto = absl::Milliseconds(200);
    // With frames unacknowledged and nothing valid heard from the peer for
    // this long, the channel fails Unavailable.
    absl::Duration dead_after = absl::Seconds(2);
  };

  // InvalidArgument when an option is out of its bounds.
  static absl::StatusOr<UcChannel> Create(Options options, FrameSink sink);

  UcChannel(UcChannel&&) = default;
  UcChannel& operator=(UcChannel&&) = default;

  // Queues one message (the concatenation of `parts`; copied). It leaves
  // in frames as the window allows, at the next Pump. InvalidArgument when
  // longer than max_message_bytes; the channel's failure once failed.
  absl::Status Send(absl::Span<const absl::Span<const uint8_t>> parts);

  // Takes one frame from the link: damaged, foreign (another session),
  // duplicate and out-of-window frames are dropped. Acknowledgements it
  // carries free window space; data is held until in order. A peer that
  // breaks the protocol (a message over max_message_bytes, a message
  // begun inside another) fails the channel with DataLoss.
  void OnFrame(absl::Span<const uint8_t> frame, absl::Time now);

  // Sends new frames the window allows, frames whose retransmission time
  // came, and an acknowledgement of what arrived since the last one.
  // Unavailable (and failed from then on) when the peer has been silent for
  // dead_after with frames unacknowledged, or when the sink reported the
  // link broken.
  absl::Status Pump(absl::Time now);

  // The next complete message from the peer, in order; nullopt if none.
  std::optional<std::vector<uint8_t>> Receive();

  // When Pump must run next even if no frame arrives (a retransmission or
  // the liveness deadline); InfiniteFuture when nothing waits.
  absl::Time NextDeadline() const;

  // Nothing queued or unacknowledged in the send direction.
  bool idle() const { return pending_.empty() && unacked_.empty(); }
  const absl::Status& status() const { return status_; }

  struct Stats {
    uint64_t frames_sent = 0;      // data frames, first transmissions
    uint64_t frames_resent = 0;    // data frames sent again
    uint64_t acks_sent = 0;        // frames carrying only an acknowledgement
    uint64_t frames_received = 0;  // valid data frames taken in order
    uint64_t frames_dropped = 0;   // damaged, foreign, duplicate, out of window
    uint64_t messages_sent = 0;    // fully acknowledged
    uint64_t messages_received = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  using Message = std::shared_ptr<const std::vector<uint8_t>>;
  struct Outgoing {  // a data frame sent and not yet acknowledged
    uint32_t seq;
    uint8_t flags;
    Message message;  // the frame's payload is a slice of it (no copy)
    size_t offset;
    size_t length;
    absl::Time sent_at;  // last transmission
    absl::Time first_sent_at;
    int transmissions;
    bool sacked;  // the peer holds it, out of order

    absl::Span<const uint8_t> payload() const {
      return {message->data() + offset, length};
    }
  };
  UcChannel(Options options, FrameSink sink);

  size_t payload_bytes() const {
    return options_.frame_bytes - kUcFrameHeaderBytes;
  }
  absl::Duration Rto(int transmissions) const;
  // When `out` is due for its next transmission.
  absl::Time ResendAt(const Outgoing& out) const;
  // Builds one frame (acknowledging what arrived so far) and hands it to
  // the sink; false when the link is broken.
  bool Emit(uint8_t type, uint8_t flags, uint32_t seq,
            absl::Span<const uint8_t> payload);
  // False when the acknowledgement names frames never sent (dropped).
  bool TakeAck(uint32_t ack, uint64_t sack, absl::Time now);
  // In order, `payload` is delivered from where it lies; ahead of order it
  // is copied to wait.
  void TakeData(uint32_t seq, uint8_t flags, absl::Span<const uint8_t> payload);
  void Deliver(uint8_t flags, absl::Span<const uint8_t> payload);
  absl::Status Fail(absl::Status status);

  Options options_;
  FrameSink sink_;
  absl::Status status_;
  Stats stats_;

  // Send direction.
  std::deque<Message> pending_;               // messages not yet framed
  size_t pending_offset_ = 0;                 // into pending_.front()
  uint32_t next_seq_ = 0;                     // of the next new frame
  std::deque<Outgoing> unacked_;              // in seq order
  absl::Time heard_from_peer_ = absl::InfinitePast();
  uint32_t highest_sacked_ = 0;  // valid while any frame is sacked
  bool any_sacked_ = false;
  std::optional<absl::Duration> srtt_;
  absl::Duration rttvar_ = absl::ZeroDuration();

  // Receive direction.
  uint32_t expected_ = 0;  // the next seq to deliver
  std::map<uint32_t, std::pair<uint8_t, std::vector<uint8_t>>>
      ahead_;                        // seq -> (flags, payload)
  std::vector<uint8_t> assembling_;  // the message being reassembled
  bool in_message_ = false;          // its first frame has arrived
  std::deque<std::vector<uint8_t>> delivered_;
  bool ack_due_ = false;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_CHANNEL_H_
