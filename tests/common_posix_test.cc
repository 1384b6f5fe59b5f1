// The close-on-exec shims: every descriptor they make closes on exec, is
// non-blocking exactly when asked, and failures come back as -1 with errno.
#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/posix.h"
#include "gtest/gtest.h"

namespace meshpool {
namespace {

bool ClosesOnExec(int fd) { return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }
bool NonBlocking(int fd) { return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

TEST(PosixTest, SocketsCloseOnExecAndBlockUnlessAsked) {
  for (bool nonblocking : {false, true}) {
    const int fd = SocketCloexec(AF_UNIX, SOCK_STREAM, 0, nonblocking);
    ASSERT_GE(fd, 0) << errno;
    EXPECT_TRUE(ClosesOnExec(fd));
    EXPECT_EQ(NonBlocking(fd), nonblocking);
    ::close(fd);
  }
}

TEST(PosixTest, PipesCloseOnExecAtBothEnds) {
  for (bool nonblocking : {false, true}) {
    int fds[2];
    ASSERT_EQ(PipeCloexec(fds, nonblocking), 0) << errno;
    for (int fd : fds) {
      EXPECT_TRUE(ClosesOnExec(fd));
      EXPECT_EQ(NonBlocking(fd), nonblocking);
      ::close(fd);
    }
  }
}

TEST(PosixTest, AcceptedSocketsCloseOnExec) {
  const int listener = SocketCloexec(AF_INET, SOCK_STREAM, 0, true);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  // Nothing queued yet: a non-blocking accept says so through errno.
  EXPECT_EQ(AcceptCloexec(listener, nullptr, nullptr, true), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
  const int client = SocketCloexec(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; ++i) {  // the connection lands soon
    fd = AcceptCloexec(listener, nullptr, nullptr, /*nonblocking=*/true);
    if (fd < 0) ::usleep(1000);
  }
  ASSERT_GE(fd, 0) << errno;
  EXPECT_TRUE(ClosesOnExec(fd));
  EXPECT_TRUE(NonBlocking(fd));
  ::close(fd);
  ::close(client);
  ::close(listener);
}

TEST(PosixTest, PeerUidIsTheConnectingProcesssUser) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  uint32_t uid = ~0u;
  ASSERT_EQ(PeerUid(pair[0], &uid), 0) << errno;
  EXPECT_EQ(uid, static_cast<uint32_t>(::geteuid()));
  ::close(pair[0]);
  ::close(pair[1]);
  errno = 0;
  EXPECT_EQ(PeerUid(-1, &uid), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(PosixTest, SelfExecutablePathIsThisTestBinary) {
  std::string path;
  ASSERT_EQ(SelfExecutablePath(&path), 0) << errno;
  EXPECT_EQ(path.substr(path.rfind('/') + 1), "common_posix_test") << path;
  EXPECT_EQ(::access(path.c_str(), X_OK), 0) << path;
}

TEST(PosixTest, ABadDescriptorFailsWithErrno) {
  errno = 0;
  EXPECT_EQ(AcceptCloexec(-1, nullptr, nullptr, false), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace meshpool
