// Fuzzes the uc backend's reliable channel (rdma/uc_channel.h) as a hostile
// peer that knows the protocol would drive it: every frame it takes comes
// from the input, most with a valid envelope (magic, version, session,
// length and checksum filled in here, so the fuzzer reaches the sequence,
// acknowledgement and reassembly logic), some raw. Input: records of
// [op u8][length u16 little-endian][length bytes]; op % 4 picks: 0 a frame
// with its envelope made valid, 1 a raw frame, 2 a message this side sends,
// 3 time passing (op / 4 milliseconds). After each record the channel
// pumps and every delivered message is taken. Checks: no message over the
// limit is delivered, every frame sent fits the frame size, and a failed
// channel says DataLoss (a protocol breach) or Unavailable (a silent peer).
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rdma/uc_channel.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using meshpool::rdma::internal::kUcFrameHeaderBytes;
using meshpool::rdma::internal::UcChannel;

constexpr uint64_t kSession = 0x5eed;
constexpr size_t kFrameBytes = 256;
constexpr size_t kMaxMessage = 4096;

// The envelope as uc_channel.cc's header comment specifies it.
void MakeEnvelopeValid(std::vector<uint8_t>& frame) {
  if (frame.size() < kUcFrameHeaderBytes) frame.resize(kUcFrameHeaderBytes);
  const uint32_t magic = 0x4355504d;  // "MPUC"
  std::memcpy(frame.data(), &magic, 4);
  frame[4] = 1;  // version
  std::memcpy(frame.data() + 8, &kSession, 8);
  const uint32_t length = static_cast<uint32_t>(std::min(
      frame.size() - kUcFrameHeaderBytes, kFrameBytes - kUcFrameHeaderBytes));
  std::memcpy(frame.data() + 32, &length, 4);
  const uint64_t h = XXH3_64bits(frame.data(), 36);
  const uint32_t checksum = static_cast<uint32_t>(
      XXH3_64bits_withSeed(frame.data() + kUcFrameHeaderBytes, length, h));
  std::memcpy(frame.data() + 36, &checksum, 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  UcChannel::Options options;
  options.session = kSession;
  options.frame_bytes = kFrameBytes;
  options.window_frames = 16;
  options.max_message_bytes = kMaxMessage;
  auto sink = [](absl::Span<const uint8_t> header,
                 absl::Span<const uint8_t> payload) {
    MESHPOOL_FUZZ_CHECK(header.size() == kUcFrameHeaderBytes &&
                            payload.size() <= kFrameBytes - kUcFrameHeaderBytes,
                        absl::StrCat("frame of ", payload.size()));
    return true;
  };
  auto channel = UcChannel::Create(options, sink);
  MESHPOOL_FUZZ_CHECK(channel.ok(), channel.status().ToString());
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t op = data[at];
    size_t length = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    length = std::min(length, size - at);
    std::vector<uint8_t> bytes(data + at, data + at + length);
    at += length;
    switch (op % 4) {
      case 0:
        MakeEnvelopeValid(bytes);
        channel->OnFrame(bytes, now);
        break;
      case 1:
        channel->OnFrame(bytes, now);
        break;
      case 2: {
        const absl::Span<const uint8_t> part(bytes);
        (void)channel->Send({&part, 1});
        break;
      }
      case 3:
        now += absl::Milliseconds(op / 4);
        break;
    }
    (void)channel->Pump(now);
    while (auto message = channel->Receive()) {
      MESHPOOL_FUZZ_CHECK(message->size() <= kMaxMessage,
                          absl::StrCat("message of ", message->size()));
      meshpool::testing::FuzzAccepted();
    }
    const absl::Status& status = channel->status();
    MESHPOOL_FUZZ_CHECK(
        status.ok() || absl::IsDataLoss(status) || absl::IsUnavailable(status),
        status.ToString());
  }
  return 0;
}
