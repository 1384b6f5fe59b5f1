// meshpool/rdma internal: one event loop of the tcp responder.
//
// A TcpServeLoop owns the connections the responder hands it and serves them
// on its one thread: it reads requests, checks and executes each inline
// against a RegionRegistry, and writes the responses, never blocking on one
// peer. An idle connection costs a descriptor and a few KiB, no thread.
//
// Thread-safety: Adopt and RequestEvictions may be called
// from any thread; everything else runs on the loop's thread. The destructor
// stops the thread and closes every connection (calling on_close for each).
#ifndef MESHPOOL_RDMA_TCP_SERVE_LOOP_H_
#define MESHPOOL_RDMA_TCP_SERVE_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rdma/poller.h"
#include "rdma/region_registry.h"
#include "rdma/socket.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma::internal {

// What the responder's admission and a loop share about one connection.
struct TcpConnInfo {
  TcpConnInfo(std::string peer_in, size_t loop_in)
      : peer(std::move(peer_in)), loop(loop_in) {}
  const std::string peer;  // the peer's IP address
  const size_t loop;       // index of the loop serving it
  // When the connection last became idle (nothing half-received, no
  // response unsent), in ms since the epoch; 0 while it is busy. A new
  // connection is idle from its admission.
  std::atomic<int64_t> idle_since_ms{absl::ToUnixMillis(absl::Now())};
  // Set by admission: close the connection if it is still idle.
  std::atomic<bool> evict{false};
};

class TcpServeLoop {
 public:
  // Whom the token a connection's TcpHello presents admits it as; nullopt:
  // it is not admitted. Called on the loop's thread; must be thread-safe.
  using Admit =
      std::function<std::optional<DataAccess>(absl::string_view token)>;
  struct Limits {
    // Requests asking for more bytes close their connection.
    uint32_t max_request_bytes = 0;
    // A connection with work under way (a request half received, responses
    // unsent, or, with `admit`, no hello yet) that moves no byte for this
    // long is closed.
    absl::Duration stall_timeout = absl::Seconds(10);
    // Set: a connection must open with a TcpHello whose token this accepts;
    // one that opens with anything else is closed before any request is
    // read. Empty: connections are served from their first byte, with
    // unrestricted access.
    Admit admit;
  };
  // Called on the loop's thread (or the destructor's) once a connection is
  // closed, for the admission's bookkeeping.
  using OnClose = std::function<void(const std::shared_ptr<TcpConnInfo>&)>;

  // Starts the loop's thread. Errors: Internal / ResourceExhausted from the
  // OS (the Poller, the thread); InvalidArgument from Poller::Create.
  static absl::StatusOr<std::unique_ptr<TcpServeLoop>> Create(
      const Limits& limits, std::shared_ptr<const RegionRegistry> registry,
      OnClose on_close);

  TcpServeLoop(const TcpServeLoop&) = delete;
  TcpServeLoop& operator=(const TcpServeLoop&) = delete;
  ~TcpServeLoop();

  // Hands a connected socket over; the loop serves it from now on.
  void Adopt(UniqueFd fd, std::shared_ptr<TcpConnInfo> info);
  // Makes the loop close, soon, every connection whose `evict` is set and
  // that is idle by then (and clear `evict` on the others).
  void RequestEvictions();

 private:
  struct Conn;
  enum class Outcome { kKeep, kClose };

  TcpServeLoop(const Limits& limits,
               std::shared_ptr<const RegionRegistry> registry, OnClose on_close,
               std::unique_ptr<Poller> poller);
  void Run();
  void TakeAdopted();
  void Evict();
  void CloseStalled(int64_t now_ms);
  // Reads, executes and writes what `c` allows now.
  void Serve(Conn& c, uint32_t events);
  Outcome ReadRequests(Conn& c);
  Outcome Execute(Conn& c, const RequestHeader& h);
  Outcome PeerDoneSending(Conn& c);
  Outcome Flush(Conn& c);
  void UpdateInterest(Conn& c);
  void Close(Conn& c);
  void DropClosed();

  const Limits limits_;
  const std::shared_ptr<const RegionRegistry> registry_;
  const OnClose on_close_;
  const std::unique_ptr<Poller> poller_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> evictions_requested_{false};
  absl::Mutex inbox_mu_;
  std::vector<std::pair<UniqueFd, std::shared_ptr<TcpConnInfo>>> inbox_
      ABSL_GUARDED_BY(inbox_mu_);
  // Loop thread only.
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> ready_;  // input buffered, to serve again soon
  bool any_closed_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_SERVE_LOOP_H_
