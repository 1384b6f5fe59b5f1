// meshpool/rdma internal: messages on the shm backend's unix socket.
//
// The socket is SOCK_STREAM, since macOS has no SOCK_SEQPACKET for unix
// sockets, so each message starts with its length (ShmFrame) and its
// descriptors (SCM_RIGHTS) ride on the sendmsg that carries its first
// byte. The node sends one message per connection (the hello or a
// refusal, shm_wire.h); the client reads exactly that much and then only
// watches for the hang-up that says the node died.
//
// Functions are stateless and thread-safe; descriptors received close on
// exec and are owned by the returned message.
#ifndef MESHPOOL_RDMA_SHM_SOCKET_H_
#define MESHPOOL_RDMA_SHM_SOCKET_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {

inline constexpr int kShmSocketType = SOCK_STREAM;

// What precedes every message: the length of what follows.
struct ShmFrame {
  uint32_t length;
};

struct ShmMessage {
  std::vector<uint8_t> bytes;  // without the frame
  std::vector<UniqueFd> fds;
};

// Sends `bytes` with `fds` as one message, without blocking (first raising
// the socket's send buffer to fit it). False when the socket would not take
// it whole at once or failed; the caller then drops the connection, and the
// peer's Receive reports that it closed early.
bool SendShmMessage(int fd, absl::Span<const uint8_t> bytes,
                    absl::Span<const int> fds);

// Receives one message of at most `max_bytes` and `max_fds` descriptors,
// waiting as the socket's SO_RCVTIMEO allows. Reads nothing past it.
// Errors: Unavailable (the peer closed, or the wait ran out, before the
// whole message: retry), FailedPrecondition (longer than max_bytes, or
// more descriptors than max_fds: not a peer of this version).
absl::StatusOr<ShmMessage> ReceiveShmMessage(int fd, size_t max_bytes,
                                             size_t max_fds);

// Whether the peer has hung up, without waiting: poll, and a readable
// socket is peeked for end-of-file.
bool ShmPeerHungUp(int fd);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SHM_SOCKET_H_
