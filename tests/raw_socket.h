// A raw TCP client socket a test owns, for speaking to a responder as a
// hostile or broken peer would. Not thread-safe.
#ifndef MESHPOOL_TESTS_RAW_SOCKET_H_
#define MESHPOOL_TESTS_RAW_SOCKET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshpool::testing {

class RawSocket {
 public:
  // How long ReadUntilClosed waits: a failure bound, not a sync point.
  static constexpr int kCloseWaitMs = 30000;

  // Connects to 127.0.0.1:`port`, from `source` when given (another
  // loopback address such as "127.0.0.2" stands in for another host).
  explicit RawSocket(uint16_t port, const char* source = nullptr)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      if (::inet_pton(AF_INET, source, &from.sin_addr) != 1 ||
          ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
        return;
      }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    connected_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (!connected_) connect_errno_ = errno;
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  // errno of a failed connect (0 when connected).
  int connect_errno() const { return connect_errno_; }
  int fd() const { return fd_; }
  bool Send(const void* data, size_t n) {
    return ::send(fd_, data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // Reads until the peer closes; true when it did within kCloseWaitMs.
  bool ReadUntilClosed(std::string* received) {
    char buf[4096];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, kCloseWaitMs);
      if (ready < 0 && errno == EINTR) continue;  // a signal (libFuzzer's)
      if (ready <= 0) return false;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return true;  // EOF or reset
      received->append(buf, static_cast<size_t>(n));
    }
  }
  // Whether the peer has closed the connection by now (never waits).
  bool ClosedByPeer() {
    char byte;
    ssize_t n = ::recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
  }

 private:
  int fd_;
  bool connected_ = false;
  int connect_errno_ = 0;
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_RAW_SOCKET_H_
