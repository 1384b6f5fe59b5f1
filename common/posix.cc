// The POSIX shims of posix.h: Linux's own calls inside the __linux__
// branches; elsewhere fcntl right after the call, getpeereid, nothing (no
// death signal), and on macOS _NSGetExecutablePath.
#include "common/posix.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#elif defined(__APPLE__)
#include <mach-o/dyld.h>
#include <sys/param.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace meshpool {
namespace {

#ifndef __linux__
// Sets FD_CLOEXEC (and O_NONBLOCK) on `fd`; on failure closes it and
// returns -1 with errno from fcntl.
int SetFlags(int fd, bool nonblocking) {
  if (fd < 0) return fd;
  bool ok = ::fcntl(fd, F_SETFD, FD_CLOEXEC) == 0;
  if (ok && nonblocking) {
    const int flags = ::fcntl(fd, F_GETFL);
    ok = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  }
  if (ok) return fd;
  const int err = errno;
  ::close(fd);
  errno = err;
  return -1;
}
#endif

}  // namespace

int SocketCloexec(int domain, int type, int protocol, bool nonblocking) {
#ifdef __linux__
  return ::socket(domain,
                  type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0),
                  protocol);
#else
  return SetFlags(::socket(domain, type, protocol), nonblocking);
#endif
}

int AcceptCloexec(int listen_fd, sockaddr* peer, socklen_t* peer_len,
                  bool nonblocking) {
#ifdef __linux__
  return ::accept4(listen_fd, peer, peer_len,
                   SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0));
#else
  return SetFlags(::accept(listen_fd, peer, peer_len), nonblocking);
#endif
}

ssize_t RecvmsgCloexec(int fd, msghdr* msg, int flags) {
#ifdef __linux__
  return ::recvmsg(fd, msg, flags | MSG_CMSG_CLOEXEC);
#else
  const ssize_t got = ::recvmsg(fd, msg, flags);
  if (got < 0) return got;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int one;
      std::memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      ::fcntl(one, F_SETFD, FD_CLOEXEC);
    }
  }
  return got;
#endif
}

int PipeCloexec(int fds[2], bool nonblocking) {
#ifdef __linux__
  return ::pipe2(fds, O_CLOEXEC | (nonblocking ? O_NONBLOCK : 0));
#else
  if (::pipe(fds) != 0) return -1;
  for (int i = 0; i < 2; ++i) {
    if (SetFlags(fds[i], nonblocking) < 0) {
      const int err = errno;
      if (i == 0)
        ::close(fds[1]);  // SetFlags closed fds[i] already
      else
        ::close(fds[0]);
      errno = err;
      return -1;
    }
  }
  return 0;
#endif
}

int PeerUid(int fd, uint32_t* uid) {
#ifdef __linux__
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  if (len != sizeof(cred)) {
    errno = EINVAL;
    return -1;
  }
  *uid = static_cast<uint32_t>(cred.uid);
  return 0;
#else
  uid_t peer = 0;
  gid_t group = 0;
  if (::getpeereid(fd, &peer, &group) != 0) return -1;
  *uid = static_cast<uint32_t>(peer);
  return 0;
#endif
}

void DieWithParent() {
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}

int SelfExecutablePath(std::string* path) {
  constexpr size_t kMaxPath = 4096;
#ifdef __linux__
  char buf[kMaxPath];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n < 0) return -1;
  path->assign(buf, static_cast<size_t>(n));
  return 0;
#elif defined(__APPLE__)
  char buf[kMaxPath];
  uint32_t size = sizeof(buf);
  if (::_NSGetExecutablePath(buf, &size) != 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  char real[PATH_MAX];
  if (::realpath(buf, real) == nullptr) return -1;
  path->assign(real);
  return 0;
#else
#error "SelfExecutablePath: only Linux and macOS are supported"
#endif
}

}  // namespace meshpool
