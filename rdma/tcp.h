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
  // Responder: admit a connection only once its first bytes present a token
  // this transport's AcceptHandshake issued (each works once, within 30 s);
  // one that opens with anything else is closed before any request is
  // read, and one that sends nothing for stall_timeout too. A node turns
  // this on when its control plane runs TLS, so only clients that
  // authenticated there reach its memory. Off, anyone who reaches the port
  // may use what it names (AcceptHandshake then answers that no token is
  // needed). Clients need no setting: Connect asks the node through the
  // Handshake it is given, and sends the token when one comes back.
  bool require_token = false;
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
