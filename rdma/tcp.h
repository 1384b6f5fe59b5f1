// meshpool/rdma/tcp.h: the TCP backend. A responder on the memory node
// emulates one-sided READ/WRITE/CAS/FAA over TCP (validating every request
// before it touches memory), several lanes (connections) per peer,
// pipelined. Addresses are "tcp://host:port". Thread-safety: as rdma.h.
#ifndef MESHPOOL_RDMA_TCP_H_
#define MESHPOOL_RDMA_TCP_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

struct TcpOptions {
  // Responder: the most bytes a single request may carry or ask for.
  uint32_t max_request_bytes = kMaxTransferBytes;
  // Responder: threads serving connections; 0 picks one per core (at most
  // 4). Each executes its connections' requests inline.
  int responder_threads = 0;
  // Responder: connections served at once (also kept under the process's
  // descriptor limit), and from one IP address. A newcomer beyond either
  // evicts the longest-idle connection, its own peer's first; when none is
  // idle it is closed at once. REQUIRES: 1 <= per_peer <= max_connections.
  size_t max_connections = 4096;
  size_t max_connections_per_peer = 1024;
  // Responder: a connection with a request half received or responses
  // unsent that moves no byte for this long is closed.
  absl::Duration stall_timeout = absl::Seconds(10);
  // Client: how long Connect waits for the TCP handshake.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Client: a Post whose sending stalls this long (peer hung, link black-
  // holed) breaks the endpoint with Unavailable instead of blocking.
  absl::Duration send_timeout = absl::Seconds(10);
};
absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(
    const TcpOptions& options = {});

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_TCP_H_
