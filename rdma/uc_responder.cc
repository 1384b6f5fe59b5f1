// UcResponder: one thread, one UDP socket and any number of links, a
// UcChannel per client session.
//
// A frame's session id (header bytes 8..15) picks its session. A frame for
// an unknown session opens one only if the channel takes it as valid (its
// checksum holds) and there is room; a session stays bound to the address
// or link that opened it, so frames naming it from elsewhere are dropped.
// A link carries the sessions of one client's lanes (at most
// kMaxUcSessionsPerLink); it is dropped when it breaks, when its last lane
// says kUcByeLast, or kUcLinkUnusedTimeout after its last session ended.
//
// Requests run in the order their channel delivers them, each checked
// before it touches memory. A READ's bytes are copied into the channel when
// it executes, so a WRITE pipelined after it never shows in it.
#include "rdma/uc_responder.h"

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/tcp_wire.h"
#include "rdma/tokens.h"

namespace meshpool::rdma::internal {
namespace {

// The loop wakes at least this often (to notice stopping and idle sessions).
constexpr absl::Duration kMaxWaitSlice = absl::Milliseconds(100);
// Datagrams taken per wake before the channels are pumped.
constexpr int kMaxDrainPerRound = 512;
// Where the session id sits in a frame header (rdma/uc_channel.cc).
constexpr size_t kSessionOffset = 8;

absl::Span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

bool SameAddress(const sockaddr_storage& a, socklen_t a_len,
                 const sockaddr_storage* b, socklen_t b_len) {
  return b != nullptr && a_len == b_len && std::memcmp(&a, b, a_len) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcResponder>> UcResponder::Create(
    absl::string_view bind, const UcOptions& options,
    std::shared_ptr<const RegionRegistry> registry, Admit admit) {
  MESHPOOL_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(bind, ""));
  MESHPOOL_ASSIGN_OR_RETURN(UniqueFd fd, BindUdp(where));
  MESHPOOL_ASSIGN_OR_RETURN(uint16_t port, BoundPort(fd.get()));
  MESHPOOL_ASSIGN_OR_RETURN(WakePipe wake, WakePipe::Create());
  const bool v6 = where.host.find(':') != std::string::npos;
  std::string address = v6 ? absl::StrCat("uc://[", where.host, "]:", port)
                           : absl::StrCat("uc://", where.host, ":", port);
  return std::unique_ptr<UcResponder>(
      new UcResponder(std::move(fd), std::move(wake), std::move(address),
                      options, std::move(registry), std::move(admit)));
}

absl::StatusOr<std::unique_ptr<UcResponder>> UcResponder::CreateForLinks(
    std::string address, const UcOptions& options,
    std::shared_ptr<const RegionRegistry> registry) {
  MESHPOOL_ASSIGN_OR_RETURN(WakePipe wake, WakePipe::Create());
  return std::unique_ptr<UcResponder>(
      new UcResponder(UniqueFd(), std::move(wake), std::move(address), options,
                      std::move(registry), nullptr));
}

UcResponder::UcResponder(UniqueFd fd, WakePipe wake, std::string address,
                         const UcOptions& options,
                         std::shared_ptr<const RegionRegistry> registry,
                         Admit admit)
    : options_(options),
      registry_(std::move(registry)),
      admit_(std::move(admit)),
      address_(std::move(address)),
      fd_(std::move(fd)),
      wake_(std::move(wake)),
      sender_(fd_.get(), options.faults),
      rx_(options.frame_bytes + 1) {
  thread_ = std::thread([this] { Loop(); });
}

void UcResponder::AddLink(std::unique_ptr<UcLink> link, DataAccess access) {
  {
    absl::MutexLock lock(&mu_);
    LinkEntry entry;
    entry.link = std::move(link);
    entry.access = std::move(access);
    added_.push_back(std::move(entry));
  }
  wake_.Wake();
}

UcResponder::~UcResponder() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.Wake();
  thread_.join();
}

void UcResponder::Loop() {
  while (true) {
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      for (LinkEntry& entry : added_) {
        UcLink* raw = entry.link.get();
        entry.unused_since = now;
        links_[raw] = std::move(entry);
      }
      added_.clear();
    }
    Drain(now);
    const absl::Time next = std::min(PumpAll(now), now + kMaxWaitSlice);
    DropLinks(now);
    // Poll instead of sleeping while a frame came recently
    // (UcOptions::busy_poll).
    if (absl::Now() < poll_until_) continue;
    Wait(next);
  }
}

void UcResponder::Wait(absl::Time until) {
  wake_.Drain();
  poll_fds_.clear();
  poll_fds_.push_back({wake_.read_end.get(), POLLIN, 0});
  if (fd_.valid()) poll_fds_.push_back({fd_.get(), POLLIN, 0});
  absl::Duration left = std::max(until - absl::Now(), absl::ZeroDuration());
  for (auto& [raw, entry] : links_) {
    if (entry.broken) continue;
    // False: frames arrived since the drain; take them before sleeping.
    if (!raw->PrepareWait()) left = absl::ZeroDuration();
    raw->AddWaitFds(&poll_fds_);
  }
  // ppoll: a deadline under a millisecond away must not turn into a spin.
  const timespec ts = absl::ToTimespec(left);
  ::ppoll(poll_fds_.data(), poll_fds_.size(), &ts, nullptr);
}

void UcResponder::Drain(absl::Time now) {
  for (int i = 0; fd_.valid() && i < kMaxDrainPerRound; ++i) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = ::recvfrom(fd_.get(), rx_.data(), rx_.size(), MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN, or an ICMP error for some earlier peer: nothing now
    }
    if (static_cast<size_t>(n) >= rx_.size()) continue;  // over a frame
    OnFrame(absl::MakeConstSpan(rx_.data(), static_cast<size_t>(n)),
            From{nullptr, &from, from_len}, now);
  }
  for (auto& [raw, entry] : links_) DrainLink(entry, now);
}

void UcResponder::DrainLink(LinkEntry& entry, absl::Time now) {
  if (entry.broken) return;
  UcLink* link = entry.link.get();
  absl::Status received = link->Receive(
      [&](absl::Span<const uint8_t> frame) { OnFrame(frame, From{link}, now); },
      kMaxDrainPerRound);
  if (!received.ok()) entry.broken = true;  // its session ends in PumpAll
}

void UcResponder::OnFrame(absl::Span<const uint8_t> frame, const From& from,
                          absl::Time now) {
  if (frame.size() < kUcFrameHeaderBytes) return;
  uint64_t id;
  std::memcpy(&id, frame.data() + kSessionOffset, sizeof(id));
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (sessions_.size() >= kMaxUcSessions) return;
    LinkEntry* entry = nullptr;
    if (from.link != nullptr) {
      entry = &links_.at(from.link);
      if (entry->sessions >= kMaxUcSessionsPerLink) return;
    }
    Session& s = sessions_[id];
    s.link = from.link;
    if (from.addr != nullptr) s.peer = *from.addr;
    s.peer_len = from.addr_len;
    s.last_frame = now;
    s.opened = now;
    UcChannel::Options channel_options = ChannelOptions(options_, id);
    absl::StatusOr<UcChannel> channel =
        from.link != nullptr
            ? UcChannel::Create(
                  channel_options,
                  [link = from.link](absl::Span<const uint8_t> h,
                                     absl::Span<const uint8_t> p) {
                    return link->Send(h, p);
                  })
            : UcChannel::Create(
                  channel_options,
                  [this, peer = &s](absl::Span<const uint8_t> h,
                                    absl::Span<const uint8_t> p) {
                    // One peer gone must not fail the socket: true.
                    sender_.Send(h, p,
                                 reinterpret_cast<const sockaddr*>(&peer->peer),
                                 peer->peer_len);
                    return true;
                  });
    if (!channel.ok()) {
      sessions_.erase(id);
      return;
    }
    s.channel.emplace(*std::move(channel));
    s.channel->OnFrame(frame, now);
    if (s.channel->stats().frames_dropped > 0) {
      sessions_.erase(id);  // not a frame of ours
      return;
    }
    if (entry != nullptr) ++entry->sessions;
    return;
  }
  Session& s = it->second;
  if (s.link != from.link) return;
  if (s.link == nullptr &&
      !SameAddress(s.peer, s.peer_len, from.addr, from.addr_len)) {
    return;
  }
  s.last_frame = now;
  poll_until_ = now + options_.busy_poll;
  s.channel->OnFrame(frame, now);
}

void UcResponder::AdmitSession(Session& s,
                               const std::vector<uint8_t>& message) {
  uint32_t magic = 0;
  if (message.size() >= sizeof(magic)) {
    std::memcpy(&magic, message.data(), sizeof(magic));
  }
  const bool token_sent = message.size() == sizeof(magic) + kTokenBytes;
  if (magic != kUcHello || (message.size() != sizeof(magic) && !token_sent)) {
    s.done = true;  // not a hello: end the session before any request
    return;
  }
  // Sessions on a link were admitted by the handshake that made the link.
  const bool needs_token = s.link == nullptr && admit_ != nullptr;
  std::optional<DataAccess> access;
  if (needs_token && token_sent) {
    access = admit_(absl::string_view(
        reinterpret_cast<const char*>(message.data() + sizeof(magic)),
        kTokenBytes));
  }
  if (needs_token && !access.has_value()) {
    const uint32_t refused = kUcHelloRefused;
    (void)s.channel->Send({Bytes(&refused, sizeof(refused))});
    s.closing = true;  // ends once the refusal is delivered
    return;
  }
  if (s.link != nullptr) {
    s.access = links_.at(s.link).access;
  } else if (needs_token) {
    s.access = *std::move(access);
  }
  s.admitted = true;
  (void)s.channel->Send({Bytes(&magic, sizeof(magic))});
}

void UcResponder::Handle(Session& s, const std::vector<uint8_t>& message) {
  if (s.closing) return;  // refused a request: nothing more executes
  if (!s.admitted) {
    AdmitSession(s, message);
    return;
  }
  uint32_t magic = 0;
  if (message.size() == sizeof(magic)) {
    std::memcpy(&magic, message.data(), sizeof(magic));
    if (magic == kUcHello) {  // a hello again: answer it again
      (void)s.channel->Send({Bytes(&magic, sizeof(magic))});
      return;
    }
    if (magic == kUcBye || magic == kUcByeLast) {
      s.done = true;
      s.last_on_link = magic == kUcByeLast;
      return;
    }
  }
  RequestHeader h;
  if (message.size() < sizeof(h)) {
    s.done = true;  // malformed: end the session unanswered
    return;
  }
  std::memcpy(&h, message.data(), sizeof(h));
  uint8_t* target = nullptr;
  const RequestVerdict verdict = CheckRequest(h, options_.max_request_bytes,
                                              *registry_, s.access, &target);
  const auto op = static_cast<Opcode>(h.opcode);
  const size_t payload = message.size() - sizeof(h);
  if (verdict == RequestVerdict::kMalformed ||
      payload != (op == Opcode::kWrite ? h.length : 0)) {
    s.done = true;  // malformed: end the session unanswered
    return;
  }
  ResponseHeader r{};
  r.magic = kResponseMagic;
  r.wr_id = h.wr_id;
  if (verdict == RequestVerdict::kDenied) {
    r.status = static_cast<uint8_t>(WireStatus::kAccessDenied);
    (void)s.channel->Send({Bytes(&r, sizeof(r))});
    s.closing = true;
    return;
  }
  r.status = static_cast<uint8_t>(WireStatus::kOk);
  if (op == Opcode::kWrite) {
    std::memcpy(target, message.data() + sizeof(h), h.length);
  } else if (IsAtomic(op)) {
    r.old_value = ExecuteAtomic(op, target, h.compare_add, h.swap);
  }
  if (op == Opcode::kRead) {
    r.length = h.length;
    const absl::Span<const uint8_t> parts[2] = {Bytes(&r, sizeof(r)),
                                                Bytes(target, h.length)};
    (void)s.channel->Send(parts);
  } else {
    (void)s.channel->Send({Bytes(&r, sizeof(r))});
  }
}

absl::Time UcResponder::PumpAll(absl::Time now) {
  absl::Time next = absl::InfiniteFuture();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = it->second;
    while (!s.done) {
      std::optional<std::vector<uint8_t>> m = s.channel->Receive();
      if (!m.has_value()) break;
      Handle(s, *m);
    }
    if (s.link != nullptr && links_.at(s.link).broken) s.done = true;
    if (!s.done && !s.channel->Pump(now).ok()) s.done = true;  // a silent peer
    if (!s.done && s.link != nullptr && !s.link->FlushSends()) s.done = true;
    if (s.closing && s.channel->idle()) s.done = true;  // denial delivered
    if (s.channel->idle() && now - s.last_frame > kUcSessionIdle) s.done = true;
    // A session that never presented its hello holds no slot for long.
    if (!s.admitted && !s.closing && now - s.opened > kUcHelloTimeout) {
      s.done = true;
    }
    if (s.done) {
      if (s.link != nullptr) {
        LinkEntry& entry = links_.at(s.link);
        --entry.sessions;
        entry.unused_since = now;
        // The client's last lane closed: it holds the link no more.
        if (s.last_on_link) entry.broken = true;
      }
      it = sessions_.erase(it);
      continue;
    }
    next = std::min(next, s.channel->NextDeadline());
    ++it;
  }
  return next;
}

void UcResponder::DropLinks(absl::Time now) {
  for (auto it = links_.begin(); it != links_.end();) {
    LinkEntry& entry = it->second;
    const bool unused =
        entry.sessions == 0 && now - entry.unused_since > kUcLinkUnusedTimeout;
    // A broken link's session was ended by PumpAll (which runs first).
    if (entry.broken || unused) {
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace meshpool::rdma::internal
