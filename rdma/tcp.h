// meshpool/rdma/tcp.h: the TCP backend. A responder on the memory node
// emulates one-sided READ/WRITE/CAS/FAA over TCP (validating every request
// before it touches memory), several lanes (connections) per peer,
// pipelined. Addresses are "tcp://host:port". Thread-safety: as rdma.h.
#ifndef MESHPOOL_RDMA_TCP_H_
#define MESHPOOL_RDMA_TCP_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

struct TcpOptions {
  // Responder: the most bytes a single request may carry or ask for.
  uint32_t max_request_bytes = kMaxTransferBytes;
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
