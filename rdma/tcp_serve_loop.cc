// How a serve loop works.
//
// One thread and one Poller (level-triggered; epoll on Linux, poll(2)
// elsewhere), woken by Adopt and RequestEvictions. Each connection is a small
// state machine:
//
//   input   recv()s into a 16 KiB buffer, so a batch of pipelined headers
//           arrives in one call. Each complete header is checked before it
//           touches memory (CheckRequest: magic, opcode, 1..max length,
//           atomics 8 bytes and aligned, rkey registered, range inside the
//           registration) and executed at once:
//             WRITE   - its payload goes into registered memory: what the
//                       buffer already holds is copied, the rest recv()d
//                       straight into place;
//             READ    - a response that points at registered memory is
//                       queued; the bytes leave with it (no staging copy);
//             CAS/FAA - std::atomic_ref on the word; the old value queued.
//   output  queued responses leave with sendmsg(), headers and READ
//           payloads gathered, as many as fit, never blocking; writability is
//           asked for only while something is left.
//
// Responses leave in request order. At most kMaxQueuedResponses wait per
// connection: beyond that the loop stops reading from it (a client that
// never reads its responses stalls only itself, holding bounded memory).
// Each turn on a connection is bounded (kRecvCallsPerTurn), and a connection
// whose buffered input was left unserved goes on the ready list, so one
// busy peer cannot starve the others of the loop.
//
// With Limits::admit, a connection's first bytes must be a TcpHello whose
// token admit() accepts (its requests then run as the DataAccess admit()
// returns); anything else closes it before a request is read,
// and until the hello it counts as work under way (below), so a peer that
// connects and sends nothing is closed after stall_timeout.
//
// A malformed request closes the connection at once with no response. A
// well-formed request for memory it may not touch (rkey, bounds) queues one
// kAccessDenied response and stops reading; the connection closes once that
// is sent. A WRITE's payload is never read then.
//
// A connection with work under way that moves no byte for stall_timeout
// (a header or payload cut short, responses the peer never reads) is
// closed, checked once a second. An idle one stays until its peer closes it
// or the responder's admission evicts it for a newcomer. A connection
// marked for eviction before its loop took it from the inbox is closed as it
// is taken (the wake-up that asked for the eviction may have been spent on
// an Evict() that ran before it arrived).
//
// Note: a READ's bytes leave when they are sent, so a WRITE to the same
// bytes pipelined after the READ on the same connection may show up in the
// READ (rdma.h promises only read-after-write ordering).
#include "rdma/tcp_serve_loop.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma::internal {
namespace {

// Responses one connection may have queued and not yet sent. A client keeps
// at most kMaxOutstanding requests unpolled, so a well-behaved one never
// waits on this.
constexpr size_t kMaxQueuedResponses = kMaxOutstanding;
// The input buffer: a batch of a few hundred request headers arrives in one
// recv() (kMaxBatch of them in two).
constexpr size_t kInputBufferBytes = 16 << 10;
static_assert(2 * kInputBufferBytes >= kMaxBatch * kRequestHeaderBytes);
// recv() calls one connection may make per turn before the others get one.
constexpr int kRecvCallsPerTurn = 16;
// Gather entries per sendmsg (a header and a payload per response).
constexpr size_t kMaxIovecs = 64;
static_assert(kMaxIovecs % 2 == 0 && kMaxIovecs <= 1024);  // <= IOV_MAX
// Events taken per wait.
constexpr size_t kMaxEvents = 64;
// How often stalled connections are looked for.
constexpr int64_t kStallCheckMs = 1000;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

struct TcpServeLoop::Conn {
  struct Outgoing {
    ResponseHeader header;
    const uint8_t* payload;  // READ: registered memory; else nullptr
    bool last;               // close once this one is sent
  };

  Conn(UniqueFd fd_in, std::shared_ptr<TcpConnInfo> info_in)
      : fd(std::move(fd_in)), info(std::move(info_in)) {}

  size_t buffered() const { return in_end - in_begin; }
  // Whether buffered input can be executed without receiving more.
  bool has_ready_input() const {
    return payload_left > 0 ? buffered() > 0
                            : buffered() >= kRequestHeaderBytes;
  }
  // Work under way: no hello yet where one is required, bytes of a request
  // half received, or responses unsent.
  bool busy() const {
    return !admitted || buffered() > 0 || payload_left > 0 || !out.empty();
  }
  // Whether more requests may be read now.
  bool may_read() const { return reading && out.size() < kMaxQueuedResponses; }
  void Enqueue(const RequestHeader& h, WireStatus status, uint64_t old_value,
               const uint8_t* payload, bool last_one) {
    Outgoing o{};
    o.header.magic = kResponseMagic;
    o.header.status = static_cast<uint8_t>(status);
    o.header.length = payload != nullptr ? h.length : 0;
    o.header.wr_id = h.wr_id;
    o.header.old_value = old_value;
    o.payload = payload;
    o.last = last_one;
    out.push_back(o);
  }

  UniqueFd fd;
  const std::shared_ptr<TcpConnInfo> info;
  bool closed = false;
  bool on_ready_list = false;
  bool watched = false;   // in the Poller's set
  uint32_t interest = 0;  // the Poller events asked for
  int64_t last_progress_ms = 0;
  // Input; the buffer is allocated on the first receive, so a peer that
  // never sends costs none.
  std::unique_ptr<uint8_t[]> in;
  size_t in_begin = 0;
  size_t in_end = 0;
  bool reading = true;    // false once a request was denied or the peer
                          // shut its sending side
  bool admitted = true;   // false until the hello, where one is required
  DataAccess access;      // what the hello's token admitted it as
  RequestHeader write{};  // the WRITE whose payload is arriving
  uint8_t* payload_at = nullptr;
  size_t payload_left = 0;
  // Output; references into a deque stay valid as it grows.
  std::deque<Outgoing> out;
  size_t out_sent = 0;  // bytes of out.front() already sent
};

absl::StatusOr<std::unique_ptr<TcpServeLoop>> TcpServeLoop::Create(
    const Limits& limits, std::shared_ptr<const RegionRegistry> registry,
    OnClose on_close) {
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Poller> poller, Poller::Create());
  std::unique_ptr<TcpServeLoop> loop(new TcpServeLoop(
      limits, std::move(registry), std::move(on_close), std::move(poller)));
  MESHPOOL_ASSIGN_OR_RETURN(loop->thread_,
                            StartThread([l = loop.get()] { l->Run(); }));
  return loop;
}

TcpServeLoop::TcpServeLoop(const Limits& limits,
                           std::shared_ptr<const RegionRegistry> registry,
                           OnClose on_close, std::unique_ptr<Poller> poller)
    : limits_(limits),
      registry_(std::move(registry)),
      on_close_(std::move(on_close)),
      poller_(std::move(poller)) {}

TcpServeLoop::~TcpServeLoop() {
  stopping_.store(true);
  poller_->Wake();
  if (thread_.joinable()) thread_.join();
  TakeAdopted();
  for (auto& c : conns_) Close(*c);
  DropClosed();
}

void TcpServeLoop::Adopt(UniqueFd fd, std::shared_ptr<TcpConnInfo> info) {
  {
    absl::MutexLock lock(&inbox_mu_);
    inbox_.emplace_back(std::move(fd), std::move(info));
  }
  poller_->Wake();
}

void TcpServeLoop::RequestEvictions() {
  evictions_requested_.store(true);
  poller_->Wake();
}

void TcpServeLoop::Run() {
  Poller::Event events[kMaxEvents];
  int64_t next_stall_check = NowMs() + kStallCheckMs;
  while (!stopping_.load()) {
    const int64_t now = NowMs();
    int timeout_ms = ready_.empty()
                         ? static_cast<int>(std::clamp<int64_t>(
                               next_stall_check - now, 0, kStallCheckMs))
                         : 0;
    bool woken = false;
    const size_t n = poller_->Wait(timeout_ms, events, &woken);
    if (woken) {
      TakeAdopted();
      if (evictions_requested_.exchange(false)) Evict();
    }
    for (size_t i = 0; i < n; ++i) {
      Conn* c = static_cast<Conn*>(events[i].token);
      if (!c->closed) Serve(*c, events[i].events);
    }
    // Connections that left input unserved last turn.
    std::vector<Conn*> ready;
    ready.swap(ready_);
    for (Conn* c : ready) {
      c->on_ready_list = false;
      if (!c->closed) Serve(*c, 0);
    }
    if (NowMs() >= next_stall_check) {
      CloseStalled(NowMs());
      next_stall_check = NowMs() + kStallCheckMs;
    }
    DropClosed();
  }
}

void TcpServeLoop::TakeAdopted() {
  std::vector<std::pair<UniqueFd, std::shared_ptr<TcpConnInfo>>> adopted;
  {
    absl::MutexLock lock(&inbox_mu_);
    adopted.swap(inbox_);
  }
  for (auto& [fd, info] : adopted) {
    auto c = std::make_unique<Conn>(std::move(fd), std::move(info));
    c->last_progress_ms = NowMs();
    c->admitted = !limits_.admit;
    conns_.push_back(std::move(c));
    Conn& conn = *conns_.back();
    // Marked for eviction while it waited in the inbox: the Evict() that
    // request woke may have run before it got here, and no other will.
    if (stopping_.load() || conn.info->evict.load()) {
      Close(conn);
      continue;
    }
    if (!poller_->Add(conn.fd.get(), Poller::kReadable, &conn).ok()) {
      Close(conn);  // out of kernel memory: refuse this one, serve the rest
      continue;
    }
    conn.watched = true;
    conn.interest = Poller::kReadable;
  }
}

void TcpServeLoop::Evict() {
  for (auto& c : conns_) {
    if (c->closed || !c->info->evict.load()) continue;
    // A connection still owing its hello has nothing worth keeping.
    if (c->busy() && c->admitted) {
      c->info->evict.store(false);  // became busy meanwhile: keep it
    } else {
      Close(*c);
    }
  }
}

void TcpServeLoop::CloseStalled(int64_t now_ms) {
  const int64_t limit = absl::ToInt64Milliseconds(limits_.stall_timeout);
  for (auto& c : conns_) {
    if (!c->closed && c->busy() && now_ms - c->last_progress_ms > limit) {
      Close(*c);
    }
  }
}

void TcpServeLoop::Serve(Conn& c, uint32_t events) {
  const bool was_busy = c.busy();
  Outcome outcome = Outcome::kKeep;
  // An error or a connection shut both ways: no response can arrive.
  if (events & (Poller::kError | Poller::kHangUp)) outcome = Outcome::kClose;
  if (outcome == Outcome::kKeep && c.may_read() &&
      ((events & Poller::kReadable) != 0 || c.has_ready_input())) {
    outcome = ReadRequests(c);
  }
  if (outcome == Outcome::kKeep && !c.out.empty()) outcome = Flush(c);
  // Flushing may have made room to execute requests already buffered.
  if (outcome == Outcome::kKeep && c.may_read() && c.has_ready_input() &&
      !c.on_ready_list) {
    c.on_ready_list = true;
    ready_.push_back(&c);
  }
  if (outcome == Outcome::kClose) {
    Close(c);
    return;
  }
  UpdateInterest(c);
  const bool busy = c.busy();
  if (busy != was_busy) c.info->idle_since_ms.store(busy ? 0 : NowMs());
}

TcpServeLoop::Outcome TcpServeLoop::ReadRequests(Conn& c) {
  int recv_calls = 0;
  while (c.may_read()) {
    if (c.payload_left > 0) {
      // A WRITE's payload: first what the buffer holds, then straight in.
      size_t n = std::min(c.buffered(), c.payload_left);
      if (n > 0) {
        std::memcpy(c.payload_at, c.in.get() + c.in_begin, n);
        c.in_begin += n;
      } else {
        if (recv_calls++ == kRecvCallsPerTurn) return Outcome::kKeep;
        ssize_t got = RecvNoCancel(c.fd.get(), c.payload_at, c.payload_left,
                                   MSG_DONTWAIT);
        if (got == 0) return Outcome::kClose;  // a WRITE cut short
        if (got < 0) {
          if (errno == EINTR) continue;
          return WouldBlock(errno) ? Outcome::kKeep : Outcome::kClose;
        }
        n = static_cast<size_t>(got);
        c.last_progress_ms = NowMs();
      }
      c.payload_at += n;
      c.payload_left -= n;
      if (c.payload_left == 0) {
        c.Enqueue(c.write, WireStatus::kOk, 0, nullptr, false);
      }
      continue;
    }
    if (!c.admitted) {
      if (c.buffered() >= kHelloBytes) {
        TcpHello hello;
        std::memcpy(&hello, c.in.get() + c.in_begin, sizeof(hello));
        c.in_begin += sizeof(hello);
        const absl::string_view token(
            reinterpret_cast<const char*>(hello.token), sizeof(hello.token));
        std::optional<DataAccess> access;
        if (hello.magic == kHelloMagic && hello.reserved == 0) {
          access = limits_.admit(token);
        }
        if (!access.has_value()) {
          return Outcome::kClose;  // before any request is read
        }
        c.access = *std::move(access);
        c.admitted = true;
        continue;
      }
    } else if (c.buffered() >= kRequestHeaderBytes) {
      RequestHeader h;
      std::memcpy(&h, c.in.get() + c.in_begin, sizeof(h));
      c.in_begin += sizeof(h);
      if (Execute(c, h) == Outcome::kClose) return Outcome::kClose;
      continue;
    }
    // Less than a header: keep the tail, receive more behind it.
    if (c.in == nullptr) c.in.reset(new uint8_t[kInputBufferBytes]);
    if (c.in_begin > 0) {
      std::memmove(c.in.get(), c.in.get() + c.in_begin, c.buffered());
      c.in_end -= c.in_begin;
      c.in_begin = 0;
    }
    if (recv_calls++ == kRecvCallsPerTurn) return Outcome::kKeep;
    ssize_t got = RecvNoCancel(c.fd.get(), c.in.get() + c.in_end,
                               kInputBufferBytes - c.in_end, MSG_DONTWAIT);
    if (got == 0) return PeerDoneSending(c);
    if (got < 0) {
      if (errno == EINTR) continue;
      return WouldBlock(errno) ? Outcome::kKeep : Outcome::kClose;
    }
    c.in_end += static_cast<size_t>(got);
    c.last_progress_ms = NowMs();
  }
  return Outcome::kKeep;
}

// The peer shut its sending side between requests (perhaps with part of a
// header sent): it still gets the answers to what it asked, then the
// connection closes.
TcpServeLoop::Outcome TcpServeLoop::PeerDoneSending(Conn& c) {
  if (c.out.empty()) return Outcome::kClose;
  c.reading = false;
  c.out.back().last = true;
  return Outcome::kKeep;
}

TcpServeLoop::Outcome TcpServeLoop::Execute(Conn& c, const RequestHeader& h) {
  uint8_t* target = nullptr;
  switch (CheckRequest(h, limits_.max_request_bytes, *registry_, c.access,
                       &target)) {
    case RequestVerdict::kMalformed:
      return Outcome::kClose;
    case RequestVerdict::kDenied:
      c.Enqueue(h, WireStatus::kAccessDenied, 0, nullptr, /*last_one=*/true);
      c.reading = false;  // closes once the denial is sent
      return Outcome::kKeep;
    case RequestVerdict::kExecute:
      break;
  }
  const auto op = static_cast<Opcode>(h.opcode);
  if (op == Opcode::kWrite) {
    c.write = h;
    c.payload_at = target;
    c.payload_left = h.length;
  } else if (op == Opcode::kRead) {
    c.Enqueue(h, WireStatus::kOk, 0, target, false);
  } else {
    c.Enqueue(h, WireStatus::kOk,
              ExecuteAtomic(op, target, h.compare_add, h.swap), nullptr, false);
  }
  return Outcome::kKeep;
}

TcpServeLoop::Outcome TcpServeLoop::Flush(Conn& c) {
  iovec iov[kMaxIovecs];
  while (!c.out.empty()) {
    // Gather from the front, skipping what was already sent of it.
    size_t count = 0;
    size_t skip = c.out_sent;
    for (size_t i = 0; i < c.out.size() && count + 2 <= kMaxIovecs; ++i) {
      Conn::Outgoing& o = c.out[i];
      const size_t payload = o.payload != nullptr ? o.header.length : 0;
      if (skip < sizeof(o.header)) {
        iov[count++] = {reinterpret_cast<char*>(&o.header) + skip,
                        sizeof(o.header) - skip};
        skip = 0;
      } else {
        skip -= sizeof(o.header);
      }
      if (payload > 0) {
        iov[count++] = {const_cast<uint8_t*>(o.payload) + skip, payload - skip};
      }
      skip = 0;
      if (o.last) break;  // nothing after the last one is sent
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t sent =
        SendmsgNoCancel(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return WouldBlock(errno) ? Outcome::kKeep : Outcome::kClose;
    }
    c.last_progress_ms = NowMs();
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      Conn::Outgoing& o = c.out.front();
      const size_t whole = sizeof(o.header) +
                           (o.payload != nullptr ? o.header.length : 0) -
                           c.out_sent;
      if (left < whole) {
        c.out_sent += left;
        break;
      }
      left -= whole;
      const bool last = o.last;
      c.out.pop_front();
      c.out_sent = 0;
      if (last) return Outcome::kClose;  // the denial is out: hang up
    }
  }
  return Outcome::kKeep;
}

void TcpServeLoop::UpdateInterest(Conn& c) {
  uint32_t want = 0;
  if (c.may_read()) want |= Poller::kReadable;
  if (!c.out.empty()) want |= Poller::kWritable;
  if (want == c.interest) return;
  if (!poller_->Modify(c.fd.get(), want, &c).ok()) {
    Close(c);
    return;
  }
  c.interest = want;
}

void TcpServeLoop::Close(Conn& c) {
  if (c.closed) return;
  c.closed = true;
  any_closed_ = true;
  if (c.watched) poller_->Remove(c.fd.get());
  ::shutdown(c.fd.get(), SHUT_RDWR);
  c.fd = UniqueFd();
  if (on_close_) on_close_(c.info);
}

void TcpServeLoop::DropClosed() {
  if (!any_closed_) return;
  any_closed_ = false;
  // The ready list may name closed connections; it is empty between turns
  // except for live ones, so drop closed entries from it first.
  ready_.erase(std::remove_if(ready_.begin(), ready_.end(),
                              [](Conn* c) { return c->closed; }),
               ready_.end());
  size_t kept = 0;
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (conns_[i]->closed) continue;
    conns_[kept++] = std::move(conns_[i]);
  }
  conns_.resize(kept);
}

}  // namespace meshpool::rdma::internal
