// The uc backend's UC queue-pair link.
//
// A link's memory is one registration: `send_depth` send frames, then
// `recv_depth` receive frames, each frame_bytes long. Every receive frame is
// posted while the QP is in INIT (before the peer can send), and posted
// again as soon as its frame was handed up. The receive queue holds the
// whole window, plus room for acknowledgements, of as many of the peer's
// lanes as fit (kUcLanesPerLink; the lanes share the QP: rdma/uc_link_mux.h),
// so a SEND finds a receive unless the peer breaks that (then it is lost,
// as any frame may be, and the channel sends it again).
//
// Sends: a frame is copied into a free send frame and joins a chain of
// work requests, posted with one doorbell by FlushSends (after a channel's
// pump) or when kMaxChain frames wait; every request is signaled, and its
// completion (local only: UC has no acknowledgements) frees the frame. With
// every send frame taken a frame is dropped, never waited for.
//
// Completions: one CQ for both directions, armed on a completion channel
// whose descriptor the owner polls. Completions polled while looking for
// free send frames, or while arming, wait in `pending_` for Receive.
//
// A completion with an error status (the QP went to the error state: the
// device is gone or was reset) breaks the link for good; UC reports nothing
// when the peer dies, which the channel's liveness covers.
#include "rdma/verbs_uc_link.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "rdma/uc_channel.h"
#include "rdma/verbs_handshake.h"
#include "rdma/verbs_resources.h"

namespace meshpool::rdma::internal {
namespace {

constexpr uint64_t kSendTag = uint64_t{1} << 63;
constexpr int kPollBatch = 32;
// Sends posted with one doorbell at most (rxe turns each post into a system
// call; a Thunderbolt controller into an MMIO write).
constexpr size_t kMaxChain = 32;

// Any window the channel allows fits Apple's work-request limit per QP,
// for one lane at least; the default window fits every lane's.
static_assert(UcReceiveDepth(kUcMaxWindowFrames) +
                  UcSendDepth(kUcMaxWindowFrames) <=
              kThunderboltMaxWorkRequests);
static_assert(kUcLanesPerLink * (UcReceiveDepth(kUcDefaultWindowFrames) +
                                 UcSendDepth(kUcDefaultWindowFrames)) <=
              kThunderboltMaxWorkRequests);

}  // namespace

struct VerbsUcLinks::State {
  UcOptions options;
  DeviceSet set;
  uint32_t send_depth = 0;
  uint32_t recv_depth = 0;
  uint32_t max_qps = 0;  // per device; 0: the device's own limit
  mutable absl::Mutex mu;
  std::vector<uint32_t> live ABSL_GUARDED_BY(mu);

  absl::Status Reserve(size_t d) {
    absl::MutexLock lock(&mu);
    if (max_qps != 0 && live[d] >= max_qps) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "RDMA device ", set.devices[d]->name, " has all ", max_qps,
          " UC queue pairs the ", UcProfileName(options.profile),
          " profile allows in use; this host talks to more peers (or runs "
          "more client processes) over it than a Thunderbolt controller "
          "serves: close some, or spread them over other cables"));
    }
    ++live[d];
    return absl::OkStatus();
  }
  void Release(size_t d) {
    absl::MutexLock lock(&mu);
    --live[d];
  }
};

namespace {

// Holds one QP of a device's budget; destroyed after everything else of
// its link (declared first).
class Reservation {
 public:
  Reservation(std::shared_ptr<VerbsUcLinks::State> state, size_t device)
      : state_(std::move(state)), device_(device) {}
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { state_->Release(device_); }

 private:
  std::shared_ptr<VerbsUcLinks::State> state_;
  size_t device_;
};

class VerbsUcLink : public UcLink {
 public:
  // A UC QP in INIT with every receive posted. Errors as VerbsUcLinks.
  static absl::StatusOr<std::unique_ptr<VerbsUcLink>> Create(
      std::shared_ptr<VerbsUcLinks::State> state, size_t d);

  QpInfo Local() const {
    QpInfo info;
    std::copy(std::begin(device_->gid.raw), std::end(device_->gid.raw),
              info.gid.begin());
    info.lid = device_->port_attr.lid;
    info.qpn = qp_.qpn();
    info.psn = psn_;
    info.mtu_bytes = MtuBytes(device_->port_attr.active_mtu);
    info.rd_atomic = 1;  // unused by UC; the handshake wants nonzero
    return info;
  }

  // INIT -> RTR -> RTS towards `remote`.
  absl::Status Connect(const QpInfo& remote) {
    RcConnectParams p;
    p.port = device_->port;
    p.gid_index = device_->gid_index;
    p.use_grh = device_->ethernet() || remote.lid == 0;
    const uint32_t mtu = MtuBytes(device_->port_attr.active_mtu);
    p.path_mtu = MtuFromBytes(std::min(mtu, remote.mtu_bytes));
    p.local_psn = psn_;
    std::copy(remote.gid.begin(), remote.gid.end(),
              std::begin(p.remote.gid.raw));
    p.remote.lid = remote.lid;
    p.remote.qpn = remote.qpn;
    p.remote.psn = remote.psn;
    return qp_.ConnectUc(p);
  }

  bool Send(absl::Span<const uint8_t> header,
            absl::Span<const uint8_t> payload) override {
    if (!broken_.ok()) return false;
    return faults_.Apply(
        header, payload,
        [this](absl::Span<const uint8_t> h, absl::Span<const uint8_t> p) {
          return PostSend(h, p);
        });
  }

  absl::Status Receive(FrameTaker take, int max) override {
    int taken = 0;
    while (broken_.ok() && taken < max) {
      if (pending_.empty() && Poll() == 0) break;
      while (!pending_.empty() && broken_.ok() && taken < max) {
        const ibv_wc wc = pending_.front();
        pending_.pop_front();
        if (Complete(wc, take)) ++taken;
      }
    }
    return broken_;
  }

  void AddWaitFds(std::vector<pollfd>* fds) const override {
    fds->push_back({channel_.fd(), POLLIN, 0});
  }

  bool FlushSends() override { return PostChain(); }

  void AwaitSent(absl::Duration max) override {
    if (!PostChain()) return;
    const absl::Time deadline = absl::Now() + max;
    while (broken_.ok() && free_sends_.size() < send_depth_ &&
           absl::Now() < deadline) {
      Poll();
    }
  }

  bool PrepareWait() override {
    if (!broken_.ok() || !pending_.empty()) return false;
    // Acknowledge the events that woke us, arm, then look once more: a
    // completion that arrived before the arming raises no event.
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(channel_.get(), &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
    }
    absl::Status armed =
        VerbsStatus(ibv_req_notify_cq(cq_.get(), 0), "ibv_req_notify_cq");
    if (!armed.ok()) {
      Break(armed);  // Receive reports it; never a busy loop
      return false;
    }
    return Poll() == 0;
  }

 private:
  VerbsUcLink(std::shared_ptr<VerbsUcLinks::State> state, size_t d)
      : reservation_(state, d),
        device_(state->set.devices[d]),
        frame_bytes_(state->options.frame_bytes),
        send_depth_(state->send_depth),
        recv_depth_(state->recv_depth),
        faults_(state->options.faults) {}

  uint8_t* SendFrame(uint32_t i) { return buffer_.data() + i * frame_bytes_; }
  uint8_t* RecvFrame(uint32_t i) {
    return buffer_.data() + (send_depth_ + i) * frame_bytes_;
  }

  absl::Status PostRecv(uint32_t i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(RecvFrame(i)),
                static_cast<uint32_t>(frame_bytes_), mr_.lkey()};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return VerbsStatus(ibv_post_recv(qp_.get(), &wr, &bad), "ibv_post_recv");
  }

  // Copies `header` and `payload` into a free send frame and chains it.
  bool PostSend(absl::Span<const uint8_t> header,
                absl::Span<const uint8_t> payload) {
    if (free_sends_.empty()) {
      // Completions free send frames; chained ones must be posted first.
      if (!PostChain()) return false;
      Poll();
    }
    if (!broken_.ok()) return false;
    if (free_sends_.empty()) return true;  // every frame taken: lost
    const uint32_t i = free_sends_.back();
    free_sends_.pop_back();
    uint8_t* out = SendFrame(i);
    if (!header.empty()) std::memcpy(out, header.data(), header.size());
    if (!payload.empty()) {
      std::memcpy(out + header.size(), payload.data(), payload.size());
    }
    chain_sge_.push_back({reinterpret_cast<uint64_t>(out),
                          static_cast<uint32_t>(header.size() + payload.size()),
                          mr_.lkey()});
    ibv_send_wr& wr = chain_.emplace_back();
    wr = {};
    wr.wr_id = kSendTag | i;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    return chain_.size() < kMaxChain || PostChain();
  }

  // Posts the chained sends with one doorbell.
  bool PostChain() {
    if (!broken_.ok()) return false;
    if (chain_.empty()) return true;
    for (size_t k = 0; k < chain_.size(); ++k) {
      chain_[k].sg_list = &chain_sge_[k];
      chain_[k].next = k + 1 < chain_.size() ? &chain_[k + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    absl::Status posted = VerbsStatus(
        ibv_post_send(qp_.get(), chain_.data(), &bad), "ibv_post_send");
    if (!posted.ok()) {
      // The requests from `bad` on were not posted: their frames are free.
      for (ibv_send_wr* w = bad; w != nullptr; w = w->next) {
        free_sends_.push_back(static_cast<uint32_t>(w->wr_id));
      }
      Break(posted);
    }
    chain_.clear();
    chain_sge_.clear();
    return posted.ok();
  }

  // Polls the CQ: send completions free their frames at once, receive
  // completions wait in pending_. Returns how many receives it queued.
  int Poll() {
    ibv_wc wcs[kPollBatch];
    int queued = 0;
    while (broken_.ok()) {
      const int n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
      if (n < 0) {
        Break(VerbsStatus(-1, "ibv_poll_cq"));
        break;
      }
      for (int k = 0; k < n; ++k) {
        if ((wcs[k].wr_id & kSendTag) != 0) {
          free_sends_.push_back(static_cast<uint32_t>(wcs[k].wr_id));
          if (wcs[k].status != IBV_WC_SUCCESS) Failed(wcs[k]);
        } else {
          pending_.push_back(wcs[k]);
          ++queued;
        }
      }
      if (n < kPollBatch) break;
    }
    return queued;
  }

  // Hands one receive completion up and posts its frame again. False when
  // it carried no frame.
  bool Complete(const ibv_wc& wc, FrameTaker take) {
    const auto i = static_cast<uint32_t>(wc.wr_id);
    if (wc.status != IBV_WC_SUCCESS) {
      Failed(wc);
      return false;
    }
    if (wc.byte_len <= frame_bytes_) take({RecvFrame(i), wc.byte_len});
    absl::Status reposted = PostRecv(i);
    if (!reposted.ok()) Break(reposted);
    return true;
  }

  void Failed(const ibv_wc& wc) {
    Break(absl::UnavailableError(
        absl::StrCat("UC queue pair on ", device_->name,
                     " failed: ", ibv_wc_status_str(wc.status),
                     " (the device went away or was reset; reconnect)")));
  }
  void Break(absl::Status why) {
    if (broken_.ok()) broken_ = absl::UnavailableError(why.message());
  }

  Reservation reservation_;  // first: released last
  std::shared_ptr<const VerbsDevice> device_;
  const size_t frame_bytes_;
  const uint32_t send_depth_;
  const uint32_t recv_depth_;
  // Teardown order: the QP, its registration and memory, then the CQ and
  // its channel.
  CompletionChannel channel_;
  CompletionQueue cq_;
  std::vector<uint8_t> buffer_;
  MemoryRegistration mr_;
  QueuePair qp_;
  uint32_t psn_ = 0;
  std::vector<uint32_t> free_sends_;
  std::vector<ibv_send_wr> chain_;  // sends not yet posted
  std::vector<ibv_sge> chain_sge_;  // their buffers, one each
  std::deque<ibv_wc> pending_;
  absl::Status broken_;
  FrameFaults faults_;
};

absl::StatusOr<std::unique_ptr<VerbsUcLink>> VerbsUcLink::Create(
    std::shared_ptr<VerbsUcLinks::State> state, size_t d) {
  MESHPOOL_RETURN_IF_ERROR(state->Reserve(d));
  std::unique_ptr<VerbsUcLink> link(new VerbsUcLink(state, d));
  ibv_context* context = link->device_->context.get();
  MESHPOOL_ASSIGN_OR_RETURN(link->channel_, CompletionChannel::Create(context));
  const int depth = static_cast<int>(link->send_depth_ + link->recv_depth_);
  MESHPOOL_ASSIGN_OR_RETURN(
      link->cq_, CompletionQueue::Create(context, depth, link->channel_.get()));
  link->buffer_.resize(static_cast<size_t>(depth) * link->frame_bytes_);
  MESHPOOL_ASSIGN_OR_RETURN(
      link->mr_,
      MemoryRegistration::Create(link->device_->pd.get(), link->buffer_.data(),
                                 link->buffer_.size(), IBV_ACCESS_LOCAL_WRITE));
  MESHPOOL_ASSIGN_OR_RETURN(
      link->qp_, QueuePair::CreateUc(link->device_->pd.get(), link->cq_.get(),
                                     link->send_depth_, link->recv_depth_));
  MESHPOOL_RETURN_IF_ERROR(link->qp_.InitUc(link->device_->port));
  for (uint32_t i = 0; i < link->recv_depth_; ++i) {
    MESHPOOL_RETURN_IF_ERROR(link->PostRecv(i));
  }
  for (uint32_t i = link->send_depth_; i > 0; --i) {
    link->free_sends_.push_back(i - 1);
  }
  MESHPOOL_RETURN_IF_ERROR(
      VerbsStatus(ibv_req_notify_cq(link->cq_.get(), 0), "ibv_req_notify_cq"));
  absl::BitGen gen;
  link->psn_ = absl::Uniform<uint32_t>(gen, 0, kMaxQpNumber + 1);
  return link;
}

// The devices of `options` opened, with their budgets.
absl::StatusOr<std::shared_ptr<VerbsUcLinks::State>> OpenState(
    const UcOptions& options) {
  auto state = std::make_shared<VerbsUcLinks::State>();
  state->options = options;
  const bool thunderbolt = options.profile == UcProfile::kThunderbolt;
  MESHPOOL_ASSIGN_OR_RETURN(state->set,
                            DeviceSet::Open(options.verbs, thunderbolt));
  state->live.assign(state->set.devices.size(), 0);
  if (thunderbolt) state->max_qps = kThunderboltMaxQpsPerDevice;
  const uint32_t recv = UcReceiveDepth(options.window_frames);
  const uint32_t send = UcSendDepth(options.window_frames);
  uint32_t max_wr = thunderbolt ? kThunderboltMaxWorkRequests : UINT32_MAX;
  for (const auto& device : state->set.devices) {
    max_wr = std::min(max_wr, static_cast<uint32_t>(device->attr.max_qp_wr));
  }
  if (recv > max_wr || send > max_wr ||
      (thunderbolt && recv + send > kThunderboltMaxWorkRequests)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UcOptions.window_frames ", options.window_frames, " needs ", recv,
        " receives and ", send, " sends per queue pair; the devices (or the ",
        UcProfileName(options.profile), " profile) allow ", max_wr,
        ": use a smaller window"));
  }
  // Room for as many lanes' windows as fit (kUcLanesPerLink at most).
  uint32_t lanes = kUcLanesPerLink;
  while (lanes > 1 && (lanes * recv > max_wr || lanes * send > max_wr ||
                       (thunderbolt &&
                        lanes * (recv + send) > kThunderboltMaxWorkRequests))) {
    --lanes;
  }
  state->recv_depth = lanes * recv;
  state->send_depth = lanes * send;
  return state;
}

}  // namespace

VerbsUcLinks::VerbsUcLinks(std::shared_ptr<State> state)
    : self_name_(state->options.verbs.self_name), state_(std::move(state)) {}
VerbsUcLinks::~VerbsUcLinks() = default;

absl::StatusOr<std::shared_ptr<VerbsUcLinks>> VerbsUcLinks::Open(
    UcOptions options) {
  VerbsOptions& verbs = options.verbs;
  if (verbs.self_name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) {
      return ::meshpool::ErrnoToStatus(errno, "gethostname");
    }
    verbs.self_name = host;
  }
  MESHPOOL_RETURN_IF_ERROR(
      ValidatePeerName(verbs.self_name, "UcOptions.verbs.self_name"));
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<State> state, OpenState(options));
  return std::shared_ptr<VerbsUcLinks>(new VerbsUcLinks(std::move(state)));
}

const std::string& VerbsUcLinks::self_name() const { return self_name_; }

absl::StatusOr<std::unique_ptr<UcLink>> VerbsUcLinks::NewLink(
    absl::string_view peer, QpInfo* local) {
  std::shared_ptr<State> state;
  {
    absl::MutexLock lock(&mu_);
    state = state_;
  }
  absl::StatusOr<std::unique_ptr<VerbsUcLink>> link =
      VerbsUcLink::Create(state, state->set.For(peer));
  if (!link.ok() && !absl::IsResourceExhausted(link.status())) {
    absl::StatusOr<std::shared_ptr<State>> reopened = OpenState(state->options);
    if (!reopened.ok()) {
      return absl::UnavailableError(absl::StrCat(
          link.status().message(), "; opening the devices again failed too (",
          reopened.status().message(), "): is the device there?"));
    }
    {
      absl::MutexLock lock(&mu_);
      if (state_ == state) state_ = *reopened;  // else another thread did
      state = state_;
    }
    link = VerbsUcLink::Create(state, state->set.For(peer));
  }
  if (!link.ok()) return link.status();
  *local = (*link)->Local();
  return std::unique_ptr<UcLink>(*std::move(link));
}

absl::StatusOr<std::unique_ptr<UcLink>> VerbsUcLinks::Connect(
    absl::string_view peer, const Handshake& handshake) {
  MESHPOOL_RETURN_IF_ERROR(ValidatePeerName(peer, "uc peer name"));
  if (!handshake) {
    return absl::InvalidArgumentError(
        "a uc://NAME node is reached through its Handshake RPC; Connect "
        "needs a Handshake callback");
  }
  HandshakeRequest request;
  request.client_name = self_name();
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<UcLink> link,
                            NewLink(peer, &request.qp));
  MESHPOOL_ASSIGN_OR_RETURN(std::string bytes,
                            handshake(EncodeHandshakeRequest(request)));
  MESHPOOL_ASSIGN_OR_RETURN(HandshakeReply reply, DecodeHandshakeReply(bytes));
  if (!reply.regions.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the node ", peer,
        " answered with a verbs RC handshake; it serves verbs://, not uc://"));
  }
  // NewLink made it: a VerbsUcLink.
  MESHPOOL_RETURN_IF_ERROR(
      static_cast<VerbsUcLink*>(link.get())->Connect(reply.qp));
  return link;
}

absl::StatusOr<VerbsUcLinks::Accepted> VerbsUcLinks::Accept(
    absl::string_view bytes) {
  MESHPOOL_ASSIGN_OR_RETURN(HandshakeRequest request,
                            DecodeHandshakeRequest(bytes));
  HandshakeReply reply;
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<UcLink> link,
                            NewLink(request.client_name, &reply.qp));
  MESHPOOL_RETURN_IF_ERROR(
      static_cast<VerbsUcLink*>(link.get())->Connect(request.qp));
  Accepted accepted;
  accepted.reply = EncodeHandshakeReply(reply);
  accepted.link = std::move(link);
  return accepted;
}

}  // namespace meshpool::rdma::internal
