// meshpool/rdma internal: the tcp backend's node side. Serves one-sided
// READ/WRITE/CAS/FAA on the memory of one RegionRegistry to every client
// that connects.
//
// Threads: one accept thread; per connection a reader (validates and
// executes requests in order) and a writer (sends responses). All are joined
// by the destructor, which first stops the listener and shuts every
// connection down. Thread-safe: the only public operations are Create,
// address() and destruction.
#ifndef MESHPOOL_RDMA_TCP_RESPONDER_H_
#define MESHPOOL_RDMA_TCP_RESPONDER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rdma/region_registry.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {

class TcpResponder {
 public:
  // Listens on `bind` ("host:port", port 0 = any free one) and serves the
  // memory registered in `registry`. Requests asking for more than
  // `max_request_bytes` (capped at kMaxTransferBytes) close their connection.
  // Errors: InvalidArgument (malformed bind), Unavailable / AlreadyExists /
  // Internal from the OS.
  static absl::StatusOr<std::unique_ptr<TcpResponder>> Create(
      absl::string_view bind, uint32_t max_request_bytes,
      std::shared_ptr<const RegionRegistry> registry);

  TcpResponder(const TcpResponder&) = delete;
  TcpResponder& operator=(const TcpResponder&) = delete;
  ~TcpResponder();

  // "tcp://host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  class Connection;

  TcpResponder(UniqueFd listen_fd, WakePipe wake, std::string address,
               uint32_t max_request_bytes,
               std::shared_ptr<const RegionRegistry> registry);
  void AcceptLoop();
  // Joins and drops connections whose threads have both ended.
  void ReapFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const RegionRegistry> registry_;
  const uint32_t max_request_bytes_;
  const std::string address_;
  UniqueFd listen_fd_;
  WakePipe wake_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;  // last: started once everything above exists
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_RESPONDER_H_
