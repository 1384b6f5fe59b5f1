// UcEndpoint: work requests become tcp-format requests on a UcChannel over
// a link (UDP or a UC QP); responses come back in order and complete them.
#include "rdma/uc_endpoint.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/region_registry.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma::internal {
namespace {

// Waiting in poll() is cut into slices of at most this, so that a channel
// deadline (a retransmission) is never missed by much.
constexpr absl::Duration kMaxWaitSlice = absl::Milliseconds(50);
// Frames taken from the link per Drain before the channel is pumped.
constexpr int kMaxFramesPerDrain = 1024;
// How long a closing endpoint waits for its goodbye to leave.
constexpr absl::Duration kByeFlush = absl::Milliseconds(20);

absl::Span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

}  // namespace

UcEndpoint::UcEndpoint(std::unique_ptr<UcLink> link, std::string address,
                       absl::Duration busy_poll)
    : link_(std::move(link)),
      address_(std::move(address)),
      busy_poll_(busy_poll) {}

absl::StatusOr<std::unique_ptr<Endpoint>> UcEndpoint::Open(
    std::unique_ptr<UcLink> link, std::string address, const UcOptions& options,
    absl::string_view token) {
  std::unique_ptr<UcEndpoint> ep(
      new UcEndpoint(std::move(link), std::move(address), options.busy_poll));
  absl::BitGen gen;
  UcLink* raw = ep->link_.get();
  const uint64_t session = absl::Uniform<uint64_t>(gen);
  raw->BindSession(session);
  MESHPOOL_ASSIGN_OR_RETURN(
      UcChannel channel, UcChannel::Create(ChannelOptions(options, session),
                                           [raw](absl::Span<const uint8_t> h,
                                                 absl::Span<const uint8_t> p) {
                                             return raw->Send(h, p);
                                           }));
  ep->channel_.emplace(std::move(channel));
  const uint32_t hello = kUcHello;
  const absl::Span<const uint8_t> parts[2] = {
      Bytes(&hello, sizeof(hello)), Bytes(token.data(), token.size())};
  MESHPOOL_RETURN_IF_ERROR(ep->channel_->Send(parts));
  // Broken: no goodbye, and no lane joins a link that brought no answer.
  auto fail = [&ep](absl::Status why) {
    ep->Break(why);
    return why;
  };
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  while (true) {
    ep->Drain();
    if (ep->broken_.ok()) {
      absl::Status pumped = ep->channel_->Pump(absl::Now());
      if (pumped.ok() && !ep->link_->FlushSends()) {
        pumped = absl::UnavailableError("the link broke");
      }
      if (!pumped.ok()) ep->Break(pumped);
    }
    if (!ep->broken_.ok()) {
      return fail(absl::UnavailableError(
          absl::StrCat("no uc responder answers at ", ep->address_, ": ",
                       ep->broken_.message())));
    }
    if (std::optional<std::vector<uint8_t>> m = ep->channel_->Receive()) {
      uint32_t magic = 0;
      if (m->size() == sizeof(magic))
        std::memcpy(&magic, m->data(), sizeof(magic));
      if (magic == kUcHelloRefused) {
        return fail(absl::PermissionDeniedError(absl::StrCat(
            "the node at ", ep->address_,
            token.empty() ? " requires a session token, which only its "
                            "authenticated control plane hands out; connect "
                            "with the cluster's TLS credentials"
                          : " refused the session token (spent or expired); "
                            "connect again")));
      }
      if (magic != kUcHello) {
        return fail(absl::UnavailableError(absl::StrCat(
            "the peer at ", ep->address_, " is not a meshpool uc responder")));
      }
      return std::unique_ptr<Endpoint>(std::move(ep));
    }
    if (absl::Now() >= deadline) {
      return fail(absl::UnavailableError(
          absl::StrCat("no uc responder answered at ", ep->address_, " within ",
                       absl::FormatDuration(options.connect_timeout),
                       "; is the node running?")));
    }
    ep->Wait(deadline);
  }
}

UcEndpoint::~UcEndpoint() {
  if (!channel_.has_value() || !broken_.ok()) return;
  // The last lane on the link lets the node drop the link with it.
  const uint32_t bye = link_->LastUser() ? kUcByeLast : kUcBye;
  const absl::Span<const uint8_t> part = Bytes(&bye, sizeof(bye));
  if (channel_->Send({&part, 1}).ok() && channel_->Pump(absl::Now()).ok() &&
      link_->FlushSends()) {
    link_->AwaitSent(kByeFlush);
  }
}

void UcEndpoint::Break(absl::Status why) {
  if (!broken_.ok()) return;
  // A peer that stopped answering (or a broken link) takes no new lanes.
  link_->Abandon();
  broken_ = absl::UnavailableError(
      absl::StrCat("uc endpoint to ", address_, " broke: ", why.message()));
  // Every request still waiting completes Unavailable.
  for (const Chunk& c : chunks_) {
    if (!c.last) continue;
    Completion done;
    done.wr_id = c.wr_id;
    done.opcode = c.opcode;
    done.status = broken_;
    ready_.push_back(std::move(done));
  }
  chunks_.clear();
  outstanding_ = 0;
}

void UcEndpoint::Drain() {
  if (!broken_.ok()) return;
  absl::Status received = link_->Receive(
      [this](absl::Span<const uint8_t> frame) {
        channel_->OnFrame(frame, absl::Now());
      },
      kMaxFramesPerDrain);
  if (!received.ok()) Break(received);
}

void UcEndpoint::TakeResponse(const std::vector<uint8_t>& message) {
  ResponseHeader h;
  if (message.size() < sizeof(h) || chunks_.empty()) {
    Break(absl::DataLossError(
        "the responder sent a response no request asked for"));
    return;
  }
  std::memcpy(&h, message.data(), sizeof(h));
  const Chunk c = chunks_.front();
  const size_t payload = message.size() - sizeof(h);
  const bool is_read = c.opcode == Opcode::kRead;
  if (h.magic != kResponseMagic || h.wr_id != c.wr_id ||
      (h.status == static_cast<uint8_t>(WireStatus::kOk) &&
       payload != (is_read ? c.length : 0))) {
    Break(absl::DataLossError(
        "the responder's response does not match the request"));
    return;
  }
  chunks_.pop_front();
  if (h.status == static_cast<uint8_t>(WireStatus::kAccessDenied)) {
    // Its other chunks will never be answered: the responder ends the
    // session after a denial, so the requests behind it fail Unavailable.
    for (bool last = c.last; !last && !chunks_.empty(); chunks_.pop_front()) {
      last = chunks_.front().last;
    }
    Completion denied;
    denied.wr_id = c.wr_id;
    denied.opcode = c.opcode;
    denied.status = absl::PermissionDeniedError(absl::StrCat(
        OpcodeName(c.opcode), " refused by the responder at ", address_,
        ": unknown rkey or out of the registration's bounds"));
    ready_.push_back(std::move(denied));
    --outstanding_;
    Break(absl::UnavailableError(
        "the responder refused a request and ended the session"));
    return;
  }
  if (is_read) {
    std::memcpy(c.local, message.data() + sizeof(h), payload);
  } else if (IsAtomic(c.opcode)) {
    std::memcpy(c.local, &h.old_value, sizeof(h.old_value));
  }
  if (!c.last) return;
  Completion done;
  done.wr_id = c.wr_id;
  done.opcode = c.opcode;
  ready_.push_back(std::move(done));
  --outstanding_;
}

void UcEndpoint::Progress() {
  Drain();
  if (broken_.ok()) {
    absl::Status pumped = channel_->Pump(absl::Now());
    if (pumped.ok() && !link_->FlushSends()) {
      pumped = absl::UnavailableError("the link broke");
    }
    if (!pumped.ok()) Break(pumped);
  }
  while (broken_.ok()) {
    std::optional<std::vector<uint8_t>> m = channel_->Receive();
    if (!m.has_value()) break;
    TakeResponse(*m);
  }
}

void UcEndpoint::Wait(absl::Time until) {
  const absl::Time now = absl::Now();
  absl::Time wake = std::min(until, channel_->NextDeadline());
  wake = std::min(wake, now + kMaxWaitSlice);
  // ppoll: a deadline under a millisecond away must not turn into a spin.
  if (!link_->PrepareWait()) return;  // frames arrived meanwhile
  const timespec ts =
      absl::ToTimespec(std::max(wake - now, absl::ZeroDuration()));
  poll_fds_.clear();
  link_->AddWaitFds(&poll_fds_);
  ::ppoll(poll_fds_.data(), poll_fds_.size(), &ts, nullptr);
}

absl::Status UcEndpoint::Post(absl::Span<const WorkRequest> batch) {
  MESHPOOL_RETURN_IF_ERROR(
      ValidateLocalBatch(batch, outstanding_ + ready_.size()));
  if (!broken_.ok()) return broken_;
  for (const WorkRequest& wr : batch) {
    for (uint32_t off = 0; off < wr.length; off += kUcChunkBytes) {
      const uint32_t n = std::min(kUcChunkBytes, wr.length - off);
      RequestHeader h{};
      h.magic = kRequestMagic;
      h.opcode = static_cast<uint8_t>(wr.opcode);
      h.rkey = wr.rkey;
      h.length = n;
      h.wr_id = wr.wr_id;
      h.remote_addr = wr.remote_addr + off;
      h.compare_add = wr.compare_add;
      h.swap = wr.swap;
      uint8_t* local = static_cast<uint8_t*>(wr.local) + off;
      absl::Span<const uint8_t> parts[2] = {Bytes(&h, sizeof(h)), {}};
      if (wr.opcode == Opcode::kWrite) parts[1] = Bytes(local, n);
      MESHPOOL_RETURN_IF_ERROR(channel_->Send(parts));
      chunks_.push_back(
          Chunk{wr.wr_id, wr.opcode, local, n, off + n == wr.length});
    }
    ++outstanding_;
  }
  Progress();
  return absl::OkStatus();
}

absl::StatusOr<size_t> UcEndpoint::Poll(absl::Span<Completion> out,
                                        absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const absl::Time poll_until = start + std::min(busy_poll_, timeout);
  while (true) {
    Progress();
    if (!ready_.empty()) {
      size_t n = 0;
      for (; n < out.size() && !ready_.empty(); ++n) {
        out[n] = std::move(ready_.front());
        ready_.pop_front();
      }
      return n;
    }
    if (!broken_.ok()) return broken_;
    const absl::Time now = absl::Now();
    if (now >= deadline) return 0;
    if (now < poll_until) continue;  // poll the link again
    Wait(deadline);
  }
}

}  // namespace meshpool::rdma::internal
