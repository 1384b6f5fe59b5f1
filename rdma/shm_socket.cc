// How shm messages travel: see shm_socket.h. The receiver reads the frame,
// then exactly the length it names; descriptors are collected from every
// recvmsg (they arrive with the first byte) and owned at once, so none
// leaks on an error path.
#include "rdma/shm_socket.h"

#include <poll.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/posix.h"
#include "rdma/shm_wire.h"

namespace meshpool::rdma::internal {
namespace {

// Room for the control messages of one recvmsg.
constexpr size_t kControlBytes = CMSG_SPACE(sizeof(int) * kShmHelloMaxFds);

// Reads exactly `n` bytes into `out`, owning every descriptor that comes
// with them; Unavailable / FailedPrecondition as ReceiveShmMessage.
absl::Status ReadExactly(int fd, uint8_t* out, size_t n, size_t max_fds,
                         std::vector<UniqueFd>* fds) {
  size_t got = 0;
  while (got < n) {
    alignas(cmsghdr) char control[kControlBytes];
    iovec iov{out + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = RecvmsgCloexec(fd, &msg, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::UnavailableError(
          r == 0 ? std::string("it closed the connection")
                 : std::string(ErrnoToStatus(errno, "recvmsg").message()));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int one;
        std::memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->emplace_back(one);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds->size() > max_fds) {
      return absl::FailedPreconditionError(
          absl::StrCat("more than the ", max_fds, " descriptors expected"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

bool SendShmMessage(int fd, absl::Span<const uint8_t> bytes,
                    absl::Span<const int> fds) {
  if (fds.size() > kShmHelloMaxFds) return false;
  const ShmFrame frame{static_cast<uint32_t>(bytes.size())};
  const size_t total = sizeof(frame) + bytes.size();
  // macOS gives unix stream sockets an 8 KiB send buffer, less than a full
  // hello; a non-blocking send must take the whole message at once.
  int sndbuf = 0;
  socklen_t len = sizeof(sndbuf);
  if (::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0 &&
      static_cast<size_t>(sndbuf) < 2 * total) {
    const int want = static_cast<int>(2 * total);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
  }
  iovec iov[2] = {{const_cast<ShmFrame*>(&frame), sizeof(frame)},
                  {const_cast<uint8_t*>(bytes.data()), bytes.size()}};
  alignas(cmsghdr) char control[kControlBytes];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = bytes.empty() ? 1 : 2;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(total);
}

absl::StatusOr<ShmMessage> ReceiveShmMessage(int fd, size_t max_bytes,
                                             size_t max_fds) {
  ShmMessage message;
  ShmFrame frame{};
  MESHPOOL_RETURN_IF_ERROR(ReadExactly(fd, reinterpret_cast<uint8_t*>(&frame),
                                       sizeof(frame), max_fds, &message.fds));
  if (frame.length > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("a message of ", frame.length, " bytes, more than the ",
                     max_bytes, " expected"));
  }
  message.bytes.resize(frame.length);
  MESHPOOL_RETURN_IF_ERROR(ReadExactly(fd, message.bytes.data(), frame.length,
                                       max_fds, &message.fds));
  return message;
}

bool ShmPeerHungUp(int fd) {
  pollfd p{fd, static_cast<short>(POLLIN | kPollReadHangUp), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLHUP | kPollReadHangUp | POLLERR | POLLNVAL)) != 0) {
    return true;
  }
  if ((p.revents & POLLIN) == 0) return false;
  char byte;
  const ssize_t r = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 ||
         (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace meshpool::rdma::internal
