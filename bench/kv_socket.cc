#include "bench/kv_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::bench {
namespace {

// writev/readv take at most this many pieces per call.
constexpr size_t kMaxIov = 64;
static_assert(kMaxIov <= IOV_MAX, "the kernel limits iovec counts");

absl::Status SetTimeout(int fd, int option, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  if (::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(timeout)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TcpStream> TcpStream::Connect(absl::string_view address,
                                             absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "' is not HOST:PORT (e.g. 127.0.0.1:6379)"));
  }
  const std::string host(address.substr(0, colon));
  const std::string service = absl::StrCat(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = ErrnoToStatus(errno, "socket");
      continue;
    }
    TcpStream stream(fd, std::string(address));  // closes fd on failure
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    last = SetTimeout(fd, SO_SNDTIMEO, timeout);  // bounds connect too
    if (last.ok()) last = SetTimeout(fd, SO_RCVTIMEO, timeout);
    if (!last.ok()) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      return stream;
    }
    last = ErrnoToStatus(errno, absl::StrCat("connect to ", address,
                                             " (is the server running?)"));
  }
  ::freeaddrinfo(found);
  return last;
}

TcpStream::TcpStream(int fd, std::string address)
    : fd_(fd),
      address_(std::move(address)),
      buf_(new char[kStreamBufferBytes]) {}

TcpStream::TcpStream(TcpStream&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      address_(std::move(other.address_)),
      buf_(std::move(other.buf_)),
      begin_(std::exchange(other.begin_, 0)),
      end_(std::exchange(other.end_, 0)) {}

TcpStream& TcpStream::operator=(TcpStream&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
    buf_ = std::move(other.buf_);
    begin_ = std::exchange(other.begin_, 0);
    end_ = std::exchange(other.end_, 0);
  }
  return *this;
}

TcpStream::~TcpStream() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TcpStream::Send(absl::Span<const absl::string_view> pieces) {
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (absl::string_view p : pieces) {
    if (!p.empty()) {
      iov.push_back({const_cast<char*>(p.data()), p.size()});
    }
  }
  size_t next = 0;
  while (next < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[next];
    msg.msg_iovlen = std::min(kMaxIov, iov.size() - next);
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno,
                           absl::StrCat("send to ", address_,
                                        errno == EAGAIN ? " (timed out)" : ""));
    }
    auto left = static_cast<size_t>(n);
    while (left > 0 && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left > 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status TcpStream::RecvError(long got) const {
  if (got == 0) {
    return absl::UnavailableError(
        absl::StrCat(address_, " closed the connection"));
  }
  return ErrnoToStatus(
      errno, absl::StrCat("receive from ", address_,
                          errno == EAGAIN ? " (no reply: timed out)" : ""));
}

absl::Status TcpStream::Fill() {
  if (begin_ > 0) {
    std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == kStreamBufferBytes) {
    return absl::DataLossError(absl::StrCat(
        "a line from ", address_, " is longer than ", kMaxLineBytes,
        " bytes: is this the right kind of server?"));
  }
  while (true) {
    ssize_t n = ::recv(fd_, buf_.get() + end_, kStreamBufferBytes - end_, 0);
    if (n > 0) {
      end_ += static_cast<size_t>(n);
      return absl::OkStatus();
    }
    if (n < 0 && errno == EINTR) continue;
    return RecvError(n);
  }
}

absl::StatusOr<absl::string_view> TcpStream::ReadLine() {
  size_t scanned = begin_;
  while (true) {
    const char* nl = static_cast<const char*>(
        std::memchr(buf_.get() + scanned, '\n', end_ - scanned));
    if (nl != nullptr) {
      const size_t start = begin_;
      size_t stop = static_cast<size_t>(nl - buf_.get());
      begin_ = stop + 1;
      if (stop > start && buf_[stop - 1] == '\r') --stop;
      return absl::string_view(buf_.get() + start, stop - start);
    }
    const size_t unread = end_ - begin_;
    MESHPOOL_RETURN_IF_ERROR(Fill());  // moves unread bytes to the front
    scanned = unread;
  }
}

absl::Status TcpStream::ReadExact(absl::Span<char> out) {
  size_t have = std::min(out.size(), end_ - begin_);
  std::memcpy(out.data(), buf_.get() + begin_, have);
  begin_ += have;
  if (have == out.size()) return absl::OkStatus();
  // The buffer is empty now: read the rest straight into `out`, and
  // whatever follows it into the buffer, in the same calls.
  begin_ = end_ = 0;
  while (have < out.size()) {
    iovec iov[2] = {{out.data() + have, out.size() - have},
                    {buf_.get(), kStreamBufferBytes}};
    ssize_t n = ::readv(fd_, iov, 2);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return RecvError(n);
    const size_t into_out = std::min(static_cast<size_t>(n), out.size() - have);
    have += into_out;
    end_ = static_cast<size_t>(n) - into_out;
  }
  return absl::OkStatus();
}

absl::Status TcpStream::Expect(absl::string_view want) {
  std::string got(want.size(), '\0');
  MESHPOOL_RETURN_IF_ERROR(ReadExact(absl::MakeSpan(got)));
  if (got != want) {
    return absl::DataLossError(
        absl::StrCat("protocol mismatch from ", address_, ": expected '",
                     absl::CEscape(want), "', got '", absl::CEscape(got), "'"));
  }
  return absl::OkStatus();
}

}  // namespace meshpool::bench
