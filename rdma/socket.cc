#include "rdma/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/common.h"
#include "common/posix.h"

namespace meshpool::rdma::internal {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.Release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address,
                                       absl::string_view scheme) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed address '", address, "' (", why, "); use ", scheme,
        "host:port, e.g. ", scheme, "127.0.0.1:7000"));
  };
  absl::string_view rest = address;
  if (!absl::ConsumePrefix(&rest, scheme)) return bad("wrong scheme");
  HostPort out;
  absl::string_view port_text;
  if (absl::ConsumePrefix(&rest, "[")) {
    size_t close = rest.find(']');
    if (close == absl::string_view::npos) return bad("unclosed '['");
    out.host = std::string(rest.substr(0, close));
    rest.remove_prefix(close + 1);
    if (!absl::ConsumePrefix(&rest, ":")) return bad("missing port");
    port_text = rest;
  } else {
    size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) return bad("missing port");
    out.host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) return bad("bracket IPv6");
  }
  uint32_t port = 0;
  if (out.host.empty()) return bad("empty host");
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return bad("port must be 0..65535");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

namespace {

absl::StatusOr<addrinfo*> Resolve(const HostPort& where, bool passive,
                                  int socktype = SOCK_STREAM) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string port = absl::StrCat(where.port);
  int rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve '", where.host, "': ", gai_strerror(rc),
        "; check the host name"));
  }
  return result;
}

absl::Status WaitWritable(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLOUT, 0};
  int ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(timeout), INT_MAX));
  int rc;
  do {
    rc = ::poll(&p, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return ErrnoToStatus(errno, "poll(connect)");
  if (rc == 0) return ErrnoToStatus(ETIMEDOUT, "connect");
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return ErrnoToStatus(errno, "getsockopt(SO_ERROR)");
  }
  if (err != 0) return ErrnoToStatus(err, "connect");
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ConnectOne(const addrinfo& ai,
                                    absl::Duration timeout) {
  UniqueFd fd(SocketCloexec(ai.ai_family, ai.ai_socktype, ai.ai_protocol));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket");
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoToStatus(errno, "fcntl(O_NONBLOCK)");
  }
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return ErrnoToStatus(errno, "connect");
    MESHPOOL_RETURN_IF_ERROR(WaitWritable(fd.get(), timeout));
  }
  if (::fcntl(fd.get(), F_SETFL, flags) != 0) {
    return ErrnoToStatus(errno, "fcntl(blocking)");
  }
  int one = 1;
  if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) {
    return ErrnoToStatus(errno, "setsockopt(TCP_NODELAY)");
  }
  return fd;
}

}  // namespace

absl::StatusOr<UniqueFd> ListenTcp(const HostPort& where) {
  MESHPOOL_ASSIGN_OR_RETURN(addrinfo * ai, Resolve(where, /*passive=*/true));
  UniqueFd fd(SocketCloexec(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
  absl::Status status = absl::OkStatus();
  int one = 1;
  if (!fd.valid()) {
    status = ErrnoToStatus(errno, "socket");
  } else if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one,
                          sizeof(one)) != 0) {
    status = ErrnoToStatus(errno, "setsockopt(SO_REUSEADDR)");
  } else if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    status = ErrnoToStatus(errno, absl::StrCat("bind ", where.host, ":",
                                               where.port));
  } else if (::listen(fd.get(), SOMAXCONN) != 0) {
    status = ErrnoToStatus(errno, "listen");
  }
  ::freeaddrinfo(ai);
  if (!status.ok()) return status;
  return fd;
}

namespace {

// A non-blocking UDP socket with big buffers, bound (`connect` false) or
// connected to `where`.
absl::StatusOr<UniqueFd> UdpSocket(const HostPort& where, bool connect) {
  MESHPOOL_ASSIGN_OR_RETURN(addrinfo * ai,
                            Resolve(where, !connect, SOCK_DGRAM));
  UniqueFd fd(SocketCloexec(ai->ai_family, ai->ai_socktype, ai->ai_protocol,
                            /*nonblocking=*/true));
  absl::Status status = absl::OkStatus();
  if (!fd.valid()) {
    status = ErrnoToStatus(errno, "socket(udp)");
  } else {
    // The kernel caps these at net.core.[rw]mem_max; a smaller buffer only
    // means more drops, which the uc channel repairs.
    int bytes = kUdpBufferBytes;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    if (connect && ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      status = ErrnoToStatus(
          errno, absl::StrCat("connect udp ", where.host, ":", where.port));
    } else if (!connect && ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      status = ErrnoToStatus(
          errno, absl::StrCat("bind udp ", where.host, ":", where.port));
    }
  }
  ::freeaddrinfo(ai);
  if (!status.ok()) return status;
  return fd;
}

}  // namespace

absl::StatusOr<UniqueFd> BindUdp(const HostPort& where) {
  return UdpSocket(where, false);
}

absl::StatusOr<UniqueFd> ConnectUdp(const HostPort& peer) {
  return UdpSocket(peer, true);
}

absl::StatusOr<uint16_t> BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoToStatus(errno, "getsockname");
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& peer,
                                    absl::Duration timeout) {
  MESHPOOL_ASSIGN_OR_RETURN(addrinfo * list, Resolve(peer, /*passive=*/false));
  absl::StatusOr<UniqueFd> result =
      absl::UnavailableError("no address to connect to");
  const absl::Time deadline = absl::Now() + timeout;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    result = ConnectOne(*ai, std::max(deadline - absl::Now(),
                                      absl::ZeroDuration()));
    if (result.ok()) break;
  }
  ::freeaddrinfo(list);
  if (!result.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach ", peer.host, ":", peer.port, ": ",
        result.status().message(), "; check the node is up and retry"));
  }
  return result;
}

ssize_t RecvNoCancel(int fd, void* buffer, size_t length, int flags) {
#ifdef __linux__
  return ::syscall(SYS_recvfrom, fd, buffer, length, flags, nullptr, nullptr);
#else
  return ::recv(fd, buffer, length, flags);
#endif
}

ssize_t RecvmsgNoCancel(int fd, msghdr* msg, int flags) {
#ifdef __linux__
  return ::syscall(SYS_recvmsg, fd, msg, flags);
#else
  return ::recvmsg(fd, msg, flags);
#endif
}

ssize_t SendmsgNoCancel(int fd, const msghdr* msg, int flags) {
#ifdef __linux__
  return ::syscall(SYS_sendmsg, fd, msg, flags);
#else
  return ::sendmsg(fd, msg, flags);
#endif
}

absl::Status SendAll(int fd, absl::Span<iovec> iov) {
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t sent = SendmsgNoCancel(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "sendmsg");
    }
    size_t left = static_cast<size_t>(sent);
    while (first < iov.size() && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* buffer, size_t length) {
  auto* p = static_cast<uint8_t*>(buffer);
  while (length > 0) {
    ssize_t got = ::recv(fd, p, length, 0);
    if (got == 0) {
      return absl::UnavailableError("peer closed the connection");
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "recv");
    }
    p += got;
    length -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::thread> StartThread(std::function<void()> body) {
  try {
    return std::thread(std::move(body));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start a thread: ", e.what()));
  }
}

absl::StatusOr<WakePipe> WakePipe::Create() {
  int fds[2];
  if (PipeCloexec(fds, /*nonblocking=*/true) != 0) {
    return ErrnoToStatus(errno, "pipe");
  }
  WakePipe pipe;
  pipe.read_end = UniqueFd(fds[0]);
  pipe.write_end = UniqueFd(fds[1]);
  return pipe;
}

void WakePipe::Wake() const {
  const char byte = 1;
  // Full pipe means a wake-up is already pending; nothing to do then.
  [[maybe_unused]] ssize_t rc = ::write(write_end.get(), &byte, 1);
}

void WakePipe::Drain() const {
  char bytes[64];
  while (::read(read_end.get(), bytes, sizeof(bytes)) > 0) {
  }
}

}  // namespace meshpool::rdma::internal
