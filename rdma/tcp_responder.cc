// How the responder works.
//
// Each connection has a reader and a writer thread. The reader receives a
// request header, validates it before touching any memory (magic, opcode,
// length within 1..max, atomics 8 bytes and aligned, rkey registered, range
// inside the registration), then executes it:
//   WRITE   - recv()s the payload straight into registered memory;
//   READ    - queues a response that points at registered memory; the writer
//             gathers header and bytes with sendmsg (no staging copy);
//   CAS/FAA - std::atomic_ref on the word, queues the old value.
// Because the reader never waits for the writer, a client that pipelines big
// WRITEs while big READ responses are pending cannot deadlock the pair.
//
// A malformed request shuts the connection down at once with no response. A
// well-formed request for memory it may not touch (rkey, bounds) queues one
// kAccessDenied response and stops reading; the writer sends what is queued
// and then shuts the connection down. A WRITE's payload is never read then.
//
// Note: a READ's bytes leave when the writer sends them, so a WRITE to the
// same bytes pipelined after the READ on the same connection may show up in
// the READ (rdma.h promises only read-after-write ordering).
#include "rdma/tcp_responder.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma::internal {
namespace {

// Responses one connection may have queued and not yet handed to its writer
// thread. A client keeps at most kMaxOutstanding requests unpolled, so a
// well-behaved one never waits on this; one that never reads its responses
// stalls only its own connection, holding bounded memory.
constexpr size_t kMaxQueuedResponses = kMaxOutstanding;
// Connections served at once (two threads each); more are closed at once.
constexpr size_t kMaxConnections = 512;
// How long accepting pauses when the process is out of file descriptors.
constexpr int kAcceptBackoffMs = 100;

}  // namespace

class TcpResponder::Connection {
 public:
  Connection(UniqueFd fd, const RegionRegistry& registry,
             uint32_t max_request_bytes)
      : fd_(std::move(fd)),
        registry_(registry),
        max_request_bytes_(max_request_bytes) {
    reader_ = std::thread([this] { ReadLoop(); });
    writer_ = std::thread([this] { WriteLoop(); });
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  ~Connection() {
    Shutdown();
    reader_.join();
    writer_.join();
  }

  // Ends both directions; the threads see errors/closing_ and return.
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
  }

  bool finished() const { return running_.load() == 0; }

 private:
  struct Outgoing {
    ResponseHeader header;
    const uint8_t* payload;  // READ: registered memory; else nullptr
    bool last;               // shut down after sending this one
  };
  void ReadLoop();
  void WriteLoop();
  void Enqueue(const RequestHeader& h, WireStatus status, uint64_t old_value,
               const uint8_t* payload, bool last);

  UniqueFd fd_;
  const RegionRegistry& registry_;
  const uint32_t max_request_bytes_;
  absl::Mutex mu_;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> running_{2};
  std::thread reader_;
  std::thread writer_;
};

void TcpResponder::Connection::Enqueue(const RequestHeader& h,
                                       WireStatus status, uint64_t old_value,
                                       const uint8_t* payload, bool last) {
  Outgoing out{};
  out.header.magic = kResponseMagic;
  out.header.status = static_cast<uint8_t>(status);
  out.header.length = payload != nullptr ? h.length : 0;
  out.header.wr_id = h.wr_id;
  out.header.old_value = old_value;
  out.payload = payload;
  out.last = last;
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
        return c->closing_ || c->queue_.size() < kMaxQueuedResponses;
      },
      this));
  queue_.push_back(out);
}

void TcpResponder::Connection::ReadLoop() {
  bool hard_close = true;
  while (true) {
    RequestHeader h;
    if (!RecvAll(fd_.get(), &h, sizeof(h)).ok()) break;
    uint8_t* target = nullptr;
    const RequestVerdict verdict =
        CheckRequest(h, max_request_bytes_, registry_, &target);
    if (verdict == RequestVerdict::kMalformed) break;
    if (verdict == RequestVerdict::kDenied) {
      Enqueue(h, WireStatus::kAccessDenied, 0, nullptr, /*last=*/true);
      hard_close = false;  // the writer sends the denial, then shuts down
      break;
    }
    const auto op = static_cast<Opcode>(h.opcode);
    if (op == Opcode::kWrite) {
      if (!RecvAll(fd_.get(), target, h.length).ok()) break;
      Enqueue(h, WireStatus::kOk, 0, nullptr, false);
    } else if (op == Opcode::kRead) {
      Enqueue(h, WireStatus::kOk, 0, target, false);
    } else {
      Enqueue(h, WireStatus::kOk,
              ExecuteAtomic(op, target, h.compare_add, h.swap), nullptr, false);
    }
  }
  if (hard_close) Shutdown();
  running_.fetch_sub(1);
}

void TcpResponder::Connection::WriteLoop() {
  std::vector<Outgoing> batch;
  std::vector<iovec> iov;
  bool done = false;
  while (!done) {
    batch.clear();
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->closing_ || !c->queue_.empty();
          },
          this));
      if (closing_) break;
      batch.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
    iov.clear();
    for (Outgoing& out : batch) {
      iov.push_back({&out.header, sizeof(out.header)});
      if (out.payload != nullptr) {
        iov.push_back({const_cast<uint8_t*>(out.payload), out.header.length});
      }
      done = done || out.last;
    }
    if (!SendAll(fd_.get(), absl::MakeSpan(iov)).ok()) done = true;
  }
  Shutdown();
  running_.fetch_sub(1);
}

absl::StatusOr<std::unique_ptr<TcpResponder>> TcpResponder::Create(
    absl::string_view bind, uint32_t max_request_bytes,
    std::shared_ptr<const RegionRegistry> registry) {
  MESHPOOL_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(bind, ""));
  MESHPOOL_ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp(where));
  if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK)) {
    return ErrnoToStatus(errno, "fcntl(listener O_NONBLOCK)");
  }
  MESHPOOL_ASSIGN_OR_RETURN(uint16_t port, BoundPort(fd.get()));
  MESHPOOL_ASSIGN_OR_RETURN(WakePipe wake, WakePipe::Create());
  const bool v6 = where.host.find(':') != std::string::npos;
  std::string address = v6 ? absl::StrCat("tcp://[", where.host, "]:", port)
                           : absl::StrCat("tcp://", where.host, ":", port);
  if (max_request_bytes > kMaxTransferBytes) {
    max_request_bytes = kMaxTransferBytes;
  }
  return std::unique_ptr<TcpResponder>(
      new TcpResponder(std::move(fd), std::move(wake), std::move(address),
                       max_request_bytes, std::move(registry)));
}

TcpResponder::TcpResponder(UniqueFd listen_fd, WakePipe wake,
                           std::string address, uint32_t max_request_bytes,
                           std::shared_ptr<const RegionRegistry> registry)
    : registry_(std::move(registry)),
      max_request_bytes_(max_request_bytes),
      address_(std::move(address)),
      listen_fd_(std::move(listen_fd)),
      wake_(std::move(wake)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TcpResponder::~TcpResponder() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.Wake();
  accept_thread_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) c->Shutdown();
  connections.clear();  // joins every connection's threads
}

void TcpResponder::ReapFinishedLocked() {
  connections_.remove_if(
      [](const std::unique_ptr<Connection>& c) { return c->finished(); });
}

void TcpResponder::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0},
                     {wake_.read_end.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    {
      // Closed connections give back their descriptors before we take one.
      absl::MutexLock lock(&mu_);
      ReapFinishedLocked();
    }
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of resources: the pending connection stays queued; wait (or
        // stop) instead of spinning on a listener that stays readable.
        pollfd wake = {wake_.read_end.get(), POLLIN, 0};
        ::poll(&wake, 1, kAcceptBackoffMs);
      }
      continue;  // EAGAIN, ECONNABORTED: try again
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    absl::MutexLock lock(&mu_);
    if (connections_.size() >= kMaxConnections) continue;  // closes fd
    connections_.push_back(std::make_unique<Connection>(
        std::move(fd), *registry_, max_request_bytes_));
  }
}

}  // namespace meshpool::rdma::internal
