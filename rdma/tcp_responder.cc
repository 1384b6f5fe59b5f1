// How the responder admits connections.
//
// The accept thread polls the listener and a wake pipe. Each accepted
// connection is counted under its peer's IP address and handed to the serve
// loops in turn. At a cap (the peer's, or the responder's) the newcomer
// marks the longest-idle connection for eviction (the peer's own first, so
// one host churning sockets evicts its own) and its loop closes it if it is
// still idle when it gets there; with nothing idle the newcomer is closed
// at once. The caps are soft by the few connections whose eviction is still
// on its way. When the process runs out of descriptors, accept evicts the
// longest-idle connection and waits a moment instead of spinning.
#include "rdma/tcp_responder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/posix.h"

namespace meshpool::rdma::internal {
namespace {

// How long accepting pauses when the process is out of file descriptors.
constexpr int kAcceptBackoffMs = 100;

// The peer's IP address, the key of the per-peer cap.
std::string PeerAddress(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
  }
  return text;
}

// The connection budget the descriptor limit leaves.
size_t DescriptorBudget() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return SIZE_MAX;
  }
  const size_t cur = static_cast<size_t>(limit.rlim_cur);
  return cur > 2 * TcpResponder::kReservedDescriptors
             ? cur - TcpResponder::kReservedDescriptors
             : cur / 2;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpResponder>> TcpResponder::Create(
    absl::string_view bind, const TcpResponderOptions& options,
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
  TcpResponderOptions resolved = options;
  resolved.max_request_bytes =
      std::min(resolved.max_request_bytes, kMaxTransferBytes);
  resolved.max_connections =
      std::min(resolved.max_connections, DescriptorBudget());
  resolved.max_connections_per_peer =
      std::min(resolved.max_connections_per_peer, resolved.max_connections);
  if (resolved.loops <= 0) {
    resolved.loops = static_cast<int>(std::clamp<unsigned>(
        std::thread::hardware_concurrency(), 1, kMaxDefaultLoops));
  }
  std::unique_ptr<TcpResponder> responder(new TcpResponder(
      std::move(fd), std::move(wake), std::move(address), resolved));
  TcpServeLoop::Limits limits;
  limits.max_request_bytes = resolved.max_request_bytes;
  limits.stall_timeout = resolved.stall_timeout;
  limits.admit = resolved.admit;
  for (int i = 0; i < resolved.loops; ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(
        std::unique_ptr<TcpServeLoop> loop,
        TcpServeLoop::Create(
            limits, registry,
            [r = responder.get()](const std::shared_ptr<TcpConnInfo>& info) {
              r->OnClosed(info);
            }));
    responder->loops_.push_back(std::move(loop));
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      responder->accept_thread_,
      StartThread([r = responder.get()] { r->AcceptLoop(); }));
  return responder;
}

TcpResponder::TcpResponder(UniqueFd listen_fd, WakePipe wake,
                           std::string address,
                           const TcpResponderOptions& options)
    : options_(options),
      address_(std::move(address)),
      listen_fd_(std::move(listen_fd)),
      wake_(std::move(wake)) {}

TcpResponder::~TcpResponder() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.Wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  loops_.clear();  // joins each loop and closes its connections
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
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    UniqueFd fd(AcceptCloexec(listen_fd_.get(),
                              reinterpret_cast<sockaddr*>(&peer), &peer_len,
                              /*nonblocking=*/true));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of resources: free a descriptor held by an idle connection,
        // and wait (or stop) instead of spinning on a listener that stays
        // readable while the connection waits in the queue.
        {
          absl::MutexLock lock(&mu_);
          EvictOneLocked("");
        }
        pollfd wake = {wake_.read_end.get(), POLLIN, 0};
        ::poll(&wake, 1, kAcceptBackoffMs);
      }
      continue;  // EAGAIN, ECONNABORTED: try again
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Admit(std::move(fd), PeerAddress(peer));
  }
}

void TcpResponder::Admit(UniqueFd fd, std::string peer) {
  std::shared_ptr<TcpConnInfo> info;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    const size_t from_peer = it == peers_.end() ? 0 : it->second.size();
    if (from_peer >= options_.max_connections_per_peer) {
      if (!EvictOneLocked(peer)) return;  // all busy: refused (closes fd)
    } else if (connections_ >= options_.max_connections) {
      if (!EvictOneLocked("")) return;
    }
    info = std::make_shared<TcpConnInfo>(peer, next_loop_);
    next_loop_ = (next_loop_ + 1) % loops_.size();
    peers_[peer].push_back(info);
    ++connections_;
  }
  loops_[info->loop]->Adopt(std::move(fd), std::move(info));
}

bool TcpResponder::EvictOneLocked(absl::string_view peer) {
  TcpConnInfo* victim = nullptr;
  int64_t oldest = INT64_MAX;
  auto consider = [&](const std::vector<std::shared_ptr<TcpConnInfo>>& v) {
    for (const auto& info : v) {
      const int64_t since = info->idle_since_ms.load();
      if (since != 0 && since < oldest && !info->evict.load()) {
        oldest = since;
        victim = info.get();
      }
    }
  };
  if (peer.empty()) {
    for (const auto& [ignored, conns] : peers_) consider(conns);
  } else if (auto it = peers_.find(std::string(peer)); it != peers_.end()) {
    consider(it->second);
  }
  if (victim == nullptr) return false;
  victim->evict.store(true);
  loops_[victim->loop]->RequestEvictions();
  return true;
}

void TcpResponder::OnClosed(const std::shared_ptr<TcpConnInfo>& info) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(info->peer);
  if (it == peers_.end()) return;
  auto& conns = it->second;
  auto pos = std::find(conns.begin(), conns.end(), info);
  if (pos == conns.end()) return;
  *pos = std::move(conns.back());
  conns.pop_back();
  --connections_;
  if (conns.empty()) peers_.erase(it);
}

}  // namespace meshpool::rdma::internal
