// meshpool/rdma internal: the tcp backend's node side. Serves one-sided
// READ/WRITE/CAS/FAA on the memory of one RegionRegistry to every client
// that connects.
//
// Threads: one accept thread, which admits connections (caps below) and
// hands each to one of a few TcpServeLoops; the loops serve them, every
// request executed inline (rdma/tcp_serve_loop.h). Connections cost no
// thread of their own, so idle ones are cheap; when the caps are reached a
// newcomer evicts the longest-idle connection (of its own peer first), so
// idle sockets cannot lock clients out. All threads are joined by the
// destructor, which first stops accepting and then closes every connection.
// Thread-safe: the only public operations are Create, address() and
// destruction.
#ifndef MESHPOOL_RDMA_TCP_RESPONDER_H_
#define MESHPOOL_RDMA_TCP_RESPONDER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/region_registry.h"
#include "rdma/socket.h"
#include "rdma/tcp_serve_loop.h"

namespace meshpool::rdma::internal {

struct TcpResponderOptions {
  // Requests asking for more bytes close their connection (capped at
  // kMaxTransferBytes).
  uint32_t max_request_bytes = kMaxTransferBytes;
  // Serve loops (threads); 0: one per core, at most kMaxDefaultLoops.
  int loops = 0;
  // Connections served at once (also held under the process's descriptor
  // limit) and from one IP address. A newcomer beyond either evicts the
  // longest-idle connection (the peer's own first); with none idle it is
  // refused (closed at once). REQUIRES: 1 <= per_peer <= max_connections.
  size_t max_connections = 4096;
  size_t max_connections_per_peer = 1024;
  // See TcpServeLoop::Limits::stall_timeout and admit.
  absl::Duration stall_timeout = absl::Seconds(10);
  TcpServeLoop::Admit admit;
};

class TcpResponder {
 public:
  static constexpr int kMaxDefaultLoops = 4;
  // Descriptors kept out of the connection budget for everything else the
  // process opens (files, gRPC, the node's own links).
  static constexpr size_t kReservedDescriptors = 128;

  // Listens on `bind` ("host:port", port 0 = any free one) and serves the
  // memory registered in `registry`. REQUIRES: `options` as documented
  // (CreateTcpTransport checks them). Errors: InvalidArgument (malformed
  // bind), Unavailable / AlreadyExists / Internal /
  // ResourceExhausted from the OS.
  static absl::StatusOr<std::unique_ptr<TcpResponder>> Create(
      absl::string_view bind, const TcpResponderOptions& options,
      std::shared_ptr<const RegionRegistry> registry);

  TcpResponder(const TcpResponder&) = delete;
  TcpResponder& operator=(const TcpResponder&) = delete;
  ~TcpResponder();

  // "tcp://host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  using Peers =
      std::map<std::string, std::vector<std::shared_ptr<TcpConnInfo>>>;

  TcpResponder(UniqueFd listen_fd, WakePipe wake, std::string address,
               const TcpResponderOptions& options);
  void AcceptLoop();
  // Admits a connection from `peer` (evicting, or refusing it, at the caps).
  void Admit(UniqueFd fd, std::string peer);
  // Marks the longest-idle connection of `peer` (of anyone if empty) for
  // eviction; false when none is idle.
  bool EvictOneLocked(absl::string_view peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnClosed(const std::shared_ptr<TcpConnInfo>& info);

  const TcpResponderOptions options_;
  const std::string address_;
  UniqueFd listen_fd_;
  WakePipe wake_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Peers peers_ ABSL_GUARDED_BY(mu_);
  size_t connections_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_loop_ ABSL_GUARDED_BY(mu_) = 0;
  // Destroyed (joined, connections closed) before the bookkeeping above,
  // which their on_close callbacks update.
  std::vector<std::unique_ptr<TcpServeLoop>> loops_;
  std::thread accept_thread_;  // last: started once everything above exists
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_RESPONDER_H_
