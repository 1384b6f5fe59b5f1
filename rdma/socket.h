// meshpool/rdma internal: the socket plumbing of the tcp backend (and the
// UDP link of the uc backend).
//
//  * UniqueFd: the one owner of a file descriptor (move-only, closes on
//    destruction).
//  * StartThread: a thread, or a Status when the OS has none to give.
//  * Address parsing, listening, connecting with a timeout, and whole-buffer
//    send/receive loops that turn errno into Status once.
//
// Functions are stateless and thread-safe; a UniqueFd is owned by one object.
#ifndef MESHPOOL_RDMA_SOCKET_H_
#define MESHPOOL_RDMA_SOCKET_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshpool::rdma::internal {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port" or "[v6]:port" (after the optional `scheme`, e.g.
// "tcp://", which must then be present). InvalidArgument when malformed.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address,
                                       absl::string_view scheme);

// A listening TCP socket bound to `where` (port 0 picks a free one).
// Errors: Unavailable / AlreadyExists / Internal from the OS.
absl::StatusOr<UniqueFd> ListenTcp(const HostPort& where);

// UDP sockets (the uc backend's test link): non-blocking, with buffers of
// kUdpBufferBytes where the kernel allows. BindUdp binds `where` (port 0
// picks one); ConnectUdp connects to `peer`, so that a closed port shows up
// as ECONNREFUSED on the next receive. Errors as ListenTcp.
inline constexpr int kUdpBufferBytes = 4 << 20;
absl::StatusOr<UniqueFd> BindUdp(const HostPort& where);
absl::StatusOr<UniqueFd> ConnectUdp(const HostPort& peer);

// The port a bound socket got.
absl::StatusOr<uint16_t> BoundPort(int fd);

// A connected, blocking TCP socket with TCP_NODELAY. Unavailable when the
// peer refuses, cannot be resolved, or `timeout` passes.
absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& peer,
                                    absl::Duration timeout);

// recv(2), recvmsg(2) and sendmsg(2) as direct system calls, with the same
// results and errno. glibc's wrappers are pthread cancellation points and pay
// for it on every call (enabling and disabling asynchronous cancellation: about
// 130 instructions a call, and a tcp GET makes two or three: about 260 of its
// client's 6,000); meshpool never cancels a thread, and its tcp data paths
// make these calls per operation.
ssize_t RecvNoCancel(int fd, void* buffer, size_t length, int flags);
ssize_t RecvmsgNoCancel(int fd, msghdr* msg, int flags);
ssize_t SendmsgNoCancel(int fd, const msghdr* msg, int flags);

// Sends every byte of `iov` (consumed in place) with sendmsg(MSG_NOSIGNAL),
// blocking. Unavailable when the connection is gone.
absl::Status SendAll(int fd, absl::Span<iovec> iov);

// Receives exactly `length` bytes, blocking. Unavailable on EOF or error.
absl::Status RecvAll(int fd, void* buffer, size_t length);

// Starts a thread running `body`. ResourceExhausted when the OS has no
// thread to give (std::thread reports that by throwing; this is the one
// place that catches it).
absl::StatusOr<std::thread> StartThread(std::function<void()> body);

// A non-blocking pipe used to wake a thread blocked in poll().
struct WakePipe {
  static absl::StatusOr<WakePipe> Create();
  void Wake() const;
  // Empties the pipe (call before polling again, so that a wake-up already
  // seen does not wake the next poll).
  void Drain() const;
  UniqueFd read_end;
  UniqueFd write_end;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SOCKET_H_
