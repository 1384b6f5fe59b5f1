// The Poller backends (rdma/poller.h), each run through the same cases: poll
// everywhere, epoll on Linux. The tcp responder's own suites also run on the
// poll backend (tests/rdma.cmake, prefix "poll.").
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rdma/poller.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {
namespace {

std::vector<std::string> Backends() {
#ifdef __linux__
  return {"poll", "epoll"};
#else
  return {"poll"};
#endif
}

// A connected pair of stream sockets.
struct Pair {
  UniqueFd a, b;
};
Pair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

class PollerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "poll") {
      ASSERT_EQ(::setenv("MESHPOOL_POLLER", "poll", 1), 0);
    } else {
      ASSERT_EQ(::unsetenv("MESHPOOL_POLLER"), 0);
    }
    absl::StatusOr<std::unique_ptr<Poller>> p = Poller::Create();
    ASSERT_TRUE(p.ok()) << p.status();
    poller_ = *std::move(p);
    ASSERT_EQ(std::string(poller_->name()), GetParam());
  }
  void TearDown() override { ::unsetenv("MESHPOOL_POLLER"); }

  // The events of one wait of up to `timeout_ms`.
  std::vector<Poller::Event> WaitOnce(int timeout_ms, size_t room = 16,
                                      bool* woken = nullptr) {
    std::vector<Poller::Event> events(room);
    bool w = false;
    events.resize(poller_->Wait(timeout_ms, absl::MakeSpan(events), &w));
    if (woken != nullptr) *woken = w;
    return events;
  }

  std::unique_ptr<Poller> poller_;
  int token_a_ = 0, token_b_ = 0;
};

TEST_P(PollerTest, ReadableIsReportedWithItsTokenUntilItIsRead) {
  Pair p = MakePair();
  ASSERT_TRUE(poller_->Add(p.a.get(), Poller::kReadable, &token_a_).ok());
  EXPECT_TRUE(WaitOnce(0).empty());
  ASSERT_EQ(::write(p.b.get(), "x", 1), 1);
  for (int turn = 0; turn < 2; ++turn) {  // level-triggered: again
    std::vector<Poller::Event> got = WaitOnce(1000);
    ASSERT_EQ(got.size(), 1u) << "turn " << turn;
    EXPECT_EQ(got[0].token, &token_a_);
    EXPECT_EQ(got[0].events & Poller::kReadable, Poller::kReadable);
  }
  char c;
  ASSERT_EQ(::read(p.a.get(), &c, 1), 1);
  EXPECT_TRUE(WaitOnce(0).empty());
}

TEST_P(PollerTest, WritableIsReportedOnlyWhileAskedFor) {
  Pair p = MakePair();
  ASSERT_TRUE(poller_->Add(p.a.get(), Poller::kReadable, &token_a_).ok());
  EXPECT_TRUE(WaitOnce(0).empty());
  ASSERT_TRUE(poller_->Modify(p.a.get(), Poller::kWritable, &token_b_).ok());
  std::vector<Poller::Event> got = WaitOnce(1000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, &token_b_);  // Modify changed the token too
  EXPECT_EQ(got[0].events, Poller::kWritable);
  ASSERT_TRUE(poller_->Modify(p.a.get(), 0, &token_b_).ok());
  EXPECT_TRUE(WaitOnce(0).empty());
}

TEST_P(PollerTest, PeerClosingIsReportedWithoutInterest) {
  Pair p = MakePair();
  ASSERT_TRUE(poller_->Add(p.a.get(), 0, &token_a_).ok());
  EXPECT_TRUE(WaitOnce(0).empty());
  p.b = UniqueFd();
  std::vector<Poller::Event> got = WaitOnce(1000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, &token_a_);
  EXPECT_NE(got[0].events & Poller::kHangUp, 0u);
}

TEST_P(PollerTest, RemovedDescriptorIsNotReported) {
  Pair p = MakePair();
  Pair q = MakePair();
  ASSERT_TRUE(poller_->Add(p.a.get(), Poller::kReadable, &token_a_).ok());
  ASSERT_TRUE(poller_->Add(q.a.get(), Poller::kReadable, &token_b_).ok());
  ASSERT_EQ(::write(p.b.get(), "x", 1), 1);
  ASSERT_EQ(::write(q.b.get(), "y", 1), 1);
  poller_->Remove(p.a.get());
  poller_->Remove(p.a.get());  // twice: nothing
  std::vector<Poller::Event> got = WaitOnce(1000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, &token_b_);
}

TEST_P(PollerTest, WakeFromAnotherThreadEndsAWaitWithoutLimit) {
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    poller_->Wake();
  });
  bool woken = false;
  EXPECT_TRUE(WaitOnce(-1, 16, &woken).empty());
  EXPECT_TRUE(woken);
  waker.join();
  // Wake-ups coalesce and are consumed: the next wait times out.
  poller_->Wake();
  poller_->Wake();
  WaitOnce(1000, 16, &woken);
  EXPECT_TRUE(woken);
  WaitOnce(0, 16, &woken);
  EXPECT_FALSE(woken);
}

TEST_P(PollerTest, MoreReadyThanOneWaitTakesAreAllReportedOverTurns) {
  constexpr int kPairs = 5;
  std::vector<Pair> pairs;
  int tokens[kPairs];
  for (int i = 0; i < kPairs; ++i) {
    pairs.push_back(MakePair());
    ASSERT_TRUE(
        poller_->Add(pairs[i].a.get(), Poller::kReadable, &tokens[i]).ok());
    ASSERT_EQ(::write(pairs[i].b.get(), "x", 1), 1);
  }
  std::set<void*> seen;
  for (int turn = 0; turn < 2 * kPairs && seen.size() < kPairs; ++turn) {
    for (const Poller::Event& e : WaitOnce(1000, /*room=*/2)) {
      EXPECT_LE(e.events & Poller::kReadable, Poller::kReadable);
      seen.insert(e.token);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kPairs))
      << "a descriptor ready all along was never reported";
}

INSTANTIATE_TEST_SUITE_P(Backends, PollerTest, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(PollerChoiceTest, AnUnknownBackendInTheEnvironmentIsRefused) {
  ASSERT_EQ(::setenv("MESHPOOL_POLLER", "kqueue2", 1), 0);
  absl::StatusOr<std::unique_ptr<Poller>> p = Poller::Create();
  ::unsetenv("MESHPOOL_POLLER");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("set it to poll"), std::string::npos)
      << p.status();
}

TEST(PollerChoiceTest, PollCanBeAskedForInCode) {
  ASSERT_EQ(::unsetenv("MESHPOOL_POLLER"), 0);
  absl::StatusOr<std::unique_ptr<Poller>> p =
      Poller::Create(Poller::Backend::kPoll);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_STREQ((*p)->name(), "poll");
}

}  // namespace
}  // namespace meshpool::rdma::internal
