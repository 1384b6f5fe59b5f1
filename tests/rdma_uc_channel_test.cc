// rdma/uc_channel.h: the uc backend's reliable channel over a simulated UC
// link (simulated time; frames dropped, duplicated, reordered and corrupted
// at seeded random). Every message arrives once, whole and in order, or the
// channel fails: Unavailable within dead_after when the peer goes silent,
// DataLoss when it breaks the protocol.
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdma/uc_channel.h"

namespace meshpool::rdma::internal {
namespace {

uint64_t TestSeed() {
  std::random_device rd;
  const uint64_t seed = (uint64_t{rd()} << 32) ^ rd();
  std::cout << "seed=" << seed << std::endl;
  return seed;
}

struct Faults {
  double drop = 0;
  double duplicate = 0;
  double corrupt = 0;
  absl::Duration latency = absl::Microseconds(20);
  absl::Duration jitter =
      absl::ZeroDuration();  // uniform extra delay: reorders
  bool black_hole = false;   // nothing arrives
};

// Two channels joined by a simulated link, run on a simulated clock.
class Link {
 public:
  Link(uint64_t seed, Faults faults, UcChannel::Options a_options,
       UcChannel::Options b_options)
      : rng_(seed), faults_(faults) {
    a_.emplace(Make(a_options, 0));
    b_.emplace(Make(b_options, 1));
  }
  Link(uint64_t seed, Faults faults, UcChannel::Options options = {})
      : Link(seed, faults, options, options) {}

  UcChannel& a() { return *a_; }
  UcChannel& b() { return *b_; }
  absl::Time now() const { return now_; }
  Faults& faults() { return faults_; }
  // Data frames the sinks were handed (first transmissions and resends).
  uint64_t frames_emitted(int side) const { return emitted_[side]; }

  // Runs until `done` or `limit` of simulated time; false on the limit.
  // Channel failures stop it too (the caller checks status()).
  template <typename Done>
  bool RunUntil(Done done, absl::Duration limit) {
    const absl::Time end = now_ + limit;
    while (!done()) {
      if (!a_->status().ok() || !b_->status().ok()) return false;
      absl::Time next = std::min(a_->NextDeadline(), b_->NextDeadline());
      if (!wire_.empty()) next = std::min(next, wire_.begin()->first);
      if (next > end) {
        now_ = end;
        return false;
      }
      now_ = std::max(now_, next);
      while (!wire_.empty() && wire_.begin()->first <= now_) {
        auto node = wire_.extract(wire_.begin());
        (node.mapped().to == 0 ? *a_ : *b_).OnFrame(node.mapped().bytes, now_);
      }
      (void)a_->Pump(now_);
      (void)b_->Pump(now_);
    }
    return true;
  }

 private:
  struct InFlight {
    int to;
    std::vector<uint8_t> bytes;
  };
  UcChannel Make(UcChannel::Options options, int side) {
    auto made = UcChannel::Create(
        options,
        [this, side](absl::Span<const uint8_t> h, absl::Span<const uint8_t> p) {
          std::vector<uint8_t> frame(h.begin(), h.end());
          frame.insert(frame.end(), p.begin(), p.end());
          Transmit(side, frame);
          return true;
        });
    EXPECT_TRUE(made.ok()) << made.status();
    return *std::move(made);
  }
  void Transmit(int from, absl::Span<const uint8_t> frame) {
    ++emitted_[from];
    std::uniform_real_distribution<double> u(0, 1);
    if (faults_.black_hole || u(rng_) < faults_.drop) return;
    const int copies = u(rng_) < faults_.duplicate ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      std::vector<uint8_t> bytes(frame.begin(), frame.end());
      if (u(rng_) < faults_.corrupt) {
        std::uniform_int_distribution<size_t> at(0, bytes.size() - 1);
        bytes[at(rng_)] ^= static_cast<uint8_t>(1 + rng_() % 255);
      }
      const absl::Duration delay = faults_.latency + u(rng_) * faults_.jitter;
      wire_.emplace(now_ + delay, InFlight{1 - from, std::move(bytes)});
    }
  }

  std::mt19937_64 rng_;
  Faults faults_;
  absl::Time now_ = absl::UnixEpoch();
  std::multimap<absl::Time, InFlight> wire_;
  uint64_t emitted_[2] = {0, 0};
  std::optional<UcChannel> a_;
  std::optional<UcChannel> b_;
};

std::vector<uint8_t> Message(std::mt19937_64& rng, size_t size) {
  std::vector<uint8_t> m(size);
  for (uint8_t& b : m) b = static_cast<uint8_t>(rng());
  return m;
}

absl::Status SendOne(UcChannel& c, const std::vector<uint8_t>& m) {
  const absl::Span<const uint8_t> part(m);
  return c.Send({&part, 1});
}

UcChannel::Options SmallFrames() {
  UcChannel::Options o;
  o.session = 77;
  o.frame_bytes = 256;  // messages of a few KiB span many frames
  o.window_frames = 32;
  return o;
}

// Sends `count` messages each way at once and checks both sides got every
// one, once, whole, in order.
void ExchangeAndCheck(Link& link, std::mt19937_64& rng, int count,
                      uint64_t seed) {
  std::vector<std::vector<uint8_t>> to_b, to_a;
  std::uniform_int_distribution<size_t> size(0, 3000);
  for (int i = 0; i < count; ++i) {
    to_b.push_back(Message(rng, i == 0 ? 0 : size(rng)));
    to_a.push_back(Message(rng, size(rng)));
    ASSERT_TRUE(SendOne(link.a(), to_b.back()).ok());
    ASSERT_TRUE(SendOne(link.b(), to_a.back()).ok());
  }
  std::vector<std::vector<uint8_t>> at_b, at_a;
  const bool finished = link.RunUntil(
      [&] {
        while (auto m = link.b().Receive()) at_b.push_back(*std::move(m));
        while (auto m = link.a().Receive()) at_a.push_back(*std::move(m));
        return at_b.size() == to_b.size() && at_a.size() == to_a.size() &&
               link.a().idle() && link.b().idle();
      },
      absl::Minutes(10));
  ASSERT_TRUE(finished) << "seed " << seed << ": a=" << link.a().status()
                        << " b=" << link.b().status() << ", " << at_b.size()
                        << " of " << count << " at b, " << at_a.size()
                        << " at a";
  for (int i = 0; i < count; ++i) {
    ASSERT_EQ(at_b[i], to_b[i]) << "message " << i << " to b, seed " << seed;
    ASSERT_EQ(at_a[i], to_a[i]) << "message " << i << " to a, seed " << seed;
  }
  EXPECT_FALSE(link.a().Receive().has_value()) << "a message arrived twice";
  EXPECT_FALSE(link.b().Receive().has_value()) << "a message arrived twice";
}

TEST(UcChannelTest, MessagesArriveOnceWholeAndInOrderOverACleanLink) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  Link link(seed, Faults{}, SmallFrames());
  ExchangeAndCheck(link, rng, 200, seed);
  EXPECT_EQ(link.a().stats().frames_resent, 0u) << "nothing was lost";
  EXPECT_EQ(link.a().stats().messages_sent, 200u);
  EXPECT_EQ(link.b().stats().messages_received, 200u);
}

TEST(UcChannelTest,
     MessagesArriveOnceDespiteLossReorderingDuplicationAndCorruption) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  Faults faults;
  faults.drop = 0.05;
  faults.duplicate = 0.05;
  faults.corrupt = 0.02;
  faults.jitter = absl::Microseconds(200);  // frames overtake each other
  Link link(seed, faults, SmallFrames());
  ExchangeAndCheck(link, rng, 300, seed);
  const UcChannel::Stats& s = link.a().stats();
  std::cout << "a: " << s.frames_sent << " frames, " << s.frames_resent
            << " resent, " << s.acks_sent << " acks, " << s.frames_dropped
            << " dropped on arrival; "
            << "b dropped " << link.b().stats().frames_dropped << std::endl;
  EXPECT_GT(s.frames_resent, 0u) << "5% loss yet nothing resent";
  EXPECT_GT(link.b().stats().frames_dropped, 0u)
      << "duplicates and corruption unseen";
}

TEST(UcChannelTest, HeavyLossStillDeliversEverything) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  Faults faults;
  faults.drop = 0.3;
  faults.jitter = absl::Microseconds(50);
  Link link(seed, faults, SmallFrames());
  ExchangeAndCheck(link, rng, 40, seed);
}

TEST(UcChannelTest, NoMoreThanAWindowIsInFlight) {
  Faults faults;
  faults.black_hole = true;
  UcChannel::Options o = SmallFrames();
  Link link(1, faults, o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(SendOne(link.a(), Message(rng, 100 * o.frame_bytes)).ok());
  ASSERT_TRUE(link.a().Pump(link.now()).ok());
  EXPECT_EQ(link.frames_emitted(0), o.window_frames);
}

TEST(UcChannelTest, ASilentPeerFailsUnavailableWithinDeadAfter) {
  Faults faults;
  UcChannel::Options o = SmallFrames();
  o.dead_after = absl::Seconds(2);
  Link link(2, faults, o);
  std::mt19937_64 rng(2);
  // A first exchange, so the channel has heard its peer.
  ExchangeAndCheck(link, rng, 3, 2);
  faults.black_hole = true;
  link.faults() = faults;  // the peer dies: nothing comes back
  const absl::Time died = link.now();
  // A message that fills the window: every frame waits on the dead peer.
  ASSERT_TRUE(SendOne(link.a(), Message(rng, 100 * o.frame_bytes)).ok());
  EXPECT_FALSE(link.RunUntil([] { return false; }, absl::Seconds(10)));
  const absl::Status status = link.a().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  const absl::Duration took = link.now() - died;
  std::cout << "a silent peer failed the channel after " << took << std::endl;
  EXPECT_GE(took, o.dead_after);
  EXPECT_LE(took, o.dead_after + o.max_rto) << "the liveness bound";
  EXPECT_EQ(link.a().Pump(link.now()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SendOne(link.a(), {}).code(), absl::StatusCode::kUnavailable);
  // Each timeout sent one frame again (a probe), not the whole window, and
  // the timeouts backed off: far fewer than one per min_rto.
  std::cout << link.a().stats().frames_resent << " frames sent again"
            << std::endl;
  EXPECT_LT(link.a().stats().frames_resent, 40u);
}

TEST(UcChannelTest, AnIdleChannelNeverFails) {
  Link link(3, Faults{}, SmallFrames());
  std::mt19937_64 rng(3);
  ExchangeAndCheck(link, rng, 2, 3);
  EXPECT_EQ(link.a().NextDeadline(), absl::InfiniteFuture());
  EXPECT_FALSE(link.RunUntil([] { return false; }, absl::Hours(1)));
  ASSERT_TRUE(link.a().status().ok()) << link.a().status();
  ExchangeAndCheck(link, rng, 2, 3);
}

TEST(UcChannelTest, FramesOfAnotherSessionAreIgnored) {
  UcChannel::Options a = SmallFrames(), b = SmallFrames();
  b.session = a.session + 1;  // an earlier connection's leftovers
  Link link(4, Faults{}, a, b);
  std::mt19937_64 rng(4);
  ASSERT_TRUE(SendOne(link.a(), Message(rng, 500)).ok());
  EXPECT_FALSE(link.RunUntil([&] { return link.b().Receive().has_value(); },
                             absl::Seconds(1)));
  EXPECT_GT(link.b().stats().frames_dropped, 0u);
  EXPECT_EQ(link.b().stats().frames_received, 0u);
}

TEST(UcChannelTest, APeerSendingOverTheMessageLimitFailsDataLoss) {
  UcChannel::Options a = SmallFrames(), b = SmallFrames();
  b.max_message_bytes = 1000;
  Link link(5, Faults{}, a, b);
  std::mt19937_64 rng(5);
  ASSERT_TRUE(SendOne(link.a(), Message(rng, 5000)).ok());
  link.RunUntil([] { return false; }, absl::Seconds(1));
  EXPECT_EQ(link.b().status().code(), absl::StatusCode::kDataLoss)
      << link.b().status();
  // Its own limit is checked on sending.
  EXPECT_EQ(SendOne(link.a(), Message(rng, a.max_message_bytes + 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UcChannelTest, FramesThatAreNotFramesAreDropped) {
  Link link(6, Faults{}, SmallFrames());
  const absl::Time t = link.now();
  std::vector<uint8_t> junk(300, 0xab);
  link.b().OnFrame(junk, t);
  link.b().OnFrame(absl::Span<const uint8_t>(junk.data(), 10), t);
  link.b().OnFrame({}, t);
  EXPECT_EQ(link.b().stats().frames_dropped, 3u);
  EXPECT_TRUE(link.b().status().ok());
  EXPECT_FALSE(link.b().Receive().has_value());
}

TEST(UcChannelTest, CreateRefusesOptionsOutOfBounds) {
  auto sink = [](absl::Span<const uint8_t>, absl::Span<const uint8_t>) {
    return true;
  };
  UcChannel::Options o;
  o.frame_bytes = kUcFrameHeaderBytes;
  EXPECT_EQ(UcChannel::Create(o, sink).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = {};
  o.window_frames = 0;
  EXPECT_EQ(UcChannel::Create(o, sink).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = {};
  o.dead_after = o.max_rto;
  EXPECT_EQ(UcChannel::Create(o, sink).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UcChannel::Create({}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UcChannelTest, ABrokenLinkFailsUnavailable) {
  auto made =
      UcChannel::Create({}, [](absl::Span<const uint8_t>,
                               absl::Span<const uint8_t>) { return false; });
  ASSERT_TRUE(made.ok());
  const std::vector<uint8_t> m(10, 1);
  ASSERT_TRUE(SendOne(*made, m).ok());
  EXPECT_EQ(made->Pump(absl::UnixEpoch()).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace meshpool::rdma::internal
