// Messages on the shm socket (rdma/shm_socket.h): a stream socket, so a
// message may arrive in pieces; its descriptors come with its first byte.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rdma/shm_socket.h"
#include "tests/shm_test_util.h"

namespace meshpool::rdma::internal {
namespace {

struct Pair {
  UniqueFd a, b;
};
Pair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, kShmSocketType, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void SendRaw(int fd, const std::string& bytes, const std::vector<int>& fds) {
  ASSERT_EQ(shm_testing::SendRawWithFds(fd, bytes, fds),
            static_cast<ssize_t>(bytes.size()));
}

std::string Framed(const std::string& body, uint32_t length) {
  const ShmFrame frame{length};
  return std::string(reinterpret_cast<const char*>(&frame), sizeof(frame)) +
         body;
}

void SetReceiveTimeoutMs(int fd, int ms) {
  timeval tv{0, ms * 1000};
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

TEST(ShmSocketTest, AMessageAndItsDescriptorsArriveWhole) {
  Pair p = MakePair();
  Pair carried = MakePair();  // any two descriptors will do
  const std::string body(5000, 'h');
  ASSERT_TRUE(SendShmMessage(
      p.a.get(), {reinterpret_cast<const uint8_t*>(body.data()), body.size()},
      std::vector<int>{carried.a.get(), carried.b.get()}));
  absl::StatusOr<ShmMessage> m = ReceiveShmMessage(p.b.get(), 8192, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::string(m->bytes.begin(), m->bytes.end()), body);
  ASSERT_EQ(m->fds.size(), 2u);
  for (const UniqueFd& fd : m->fds) {
    EXPECT_EQ(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  }
}

TEST(ShmSocketTest, AMessageSentInPiecesIsReassembled) {
  Pair p = MakePair();
  Pair carried = MakePair();
  const std::string framed = Framed("0123456789", 10);
  SendRaw(p.a.get(), framed.substr(0, 2), {carried.a.get()});  // half a frame
  SendRaw(p.a.get(), framed.substr(2, 5), {});
  SendRaw(p.a.get(), framed.substr(7), {});
  absl::StatusOr<ShmMessage> m = ReceiveShmMessage(p.b.get(), 64, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::string(m->bytes.begin(), m->bytes.end()), "0123456789");
  EXPECT_EQ(m->fds.size(), 1u);
}

TEST(ShmSocketTest, NothingPastTheMessageIsRead) {
  Pair p = MakePair();
  SendRaw(p.a.get(), Framed("abc", 3) + "rest", {});
  absl::StatusOr<ShmMessage> m = ReceiveShmMessage(p.b.get(), 64, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes.size(), 3u);
  char rest[8] = {};
  EXPECT_EQ(::recv(p.b.get(), rest, sizeof(rest), MSG_DONTWAIT), 4);
}

TEST(ShmSocketTest, ALongerMessageThanExpectedIsFailedPrecondition) {
  Pair p = MakePair();
  SendRaw(p.a.get(), Framed("", 65), {});
  EXPECT_EQ(ReceiveShmMessage(p.b.get(), 64, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShmSocketTest, MoreDescriptorsThanExpectedAreFailedPreconditionAndClosed) {
  Pair p = MakePair();
  Pair carried = MakePair();
  SendRaw(p.a.get(), Framed("ab", 2),
          {carried.a.get(), carried.a.get(), carried.a.get()});
  EXPECT_EQ(ReceiveShmMessage(p.b.get(), 64, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The copies received were closed: only this test's own end is open, so
  // closing it hangs up the other end.
  carried.a = UniqueFd();
  EXPECT_TRUE(ShmPeerHungUp(carried.b.get()));
}

TEST(ShmSocketTest, APeerThatHangsUpMidMessageIsUnavailable) {
  Pair p = MakePair();
  SendRaw(p.a.get(), Framed("abc", 10), {});
  p.a = UniqueFd();
  EXPECT_EQ(ReceiveShmMessage(p.b.get(), 64, 4).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShmSocketTest, ASilentPeerIsUnavailableOnceTheWaitRunsOut) {
  Pair p = MakePair();
  SetReceiveTimeoutMs(p.b.get(), 50);
  EXPECT_EQ(ReceiveShmMessage(p.b.get(), 64, 4).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShmSocketTest, AHangUpIsSeenAndAnOpenPeerIsNot) {
  Pair p = MakePair();
  EXPECT_FALSE(ShmPeerHungUp(p.b.get()));
  SendRaw(p.a.get(), "x", {});  // readable but open
  EXPECT_FALSE(ShmPeerHungUp(p.b.get()));
  char c;
  ASSERT_EQ(::recv(p.b.get(), &c, 1, 0), 1);
  ::shutdown(p.a.get(), SHUT_WR);  // half-closed: the node sends no more
  EXPECT_TRUE(ShmPeerHungUp(p.b.get()));
}

}  // namespace
}  // namespace meshpool::rdma::internal
