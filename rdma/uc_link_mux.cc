// UcLinkMux: the shared link and its views.
//
// Every view's inbox lives under the mux's lock. A view that receives (or
// prepares to wait) takes what the link holds first and sorts it into the
// inboxes, copying each frame out so that the link's receive buffer is
// posted again at once. A view whose inbox goes from empty to not empty
// while another thread sorted is woken through its own pipe; a waiter
// sleeps on its pipe and on the link's own descriptors, so frames that
// arrive while nobody sorts wake every waiter, and one of them sorts.
//
// No wake-up is lost: before sleeping, a view drains its pipe, then, under
// the lock, checks its inbox and lets the link arm its notification
// (UcLink::PrepareWait). A frame sorted for it after that writes to its
// pipe; a frame still in the link raises the link's descriptor.
#include "rdma/uc_link_mux.h"

#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rdma/socket.h"
#include "rdma/uc_channel.h"

namespace meshpool::rdma::internal {
namespace {

// Where the session id sits in a frame header (rdma/uc_channel.cc).
constexpr size_t kSessionOffset = 8;
// Frames sorted per pass over the link.
constexpr int kMaxSortedPerPass = 256;
// PrepareWait gives up (and lets its caller Receive) after this many
// passes that found frames for other views only.
constexpr int kMaxPreparePasses = 4;
// Spare frame buffers kept for reuse.
constexpr size_t kMaxSpare = 256;

}  // namespace

class MuxView : public UcLink {
 public:
  MuxView(std::shared_ptr<UcLinkMux> mux, WakePipe wake)
      : mux_(std::move(mux)), wake_(std::move(wake)) {}

  ~MuxView() override {
    absl::MutexLock lock(&mux_->mu_);
    if (session_bound_) mux_->by_session_.erase(session_);
    --mux_->views_;
    for (std::vector<uint8_t>& f : inbox_) Recycle(std::move(f));
  }

  void BindSession(uint64_t session) override {
    absl::MutexLock lock(&mux_->mu_);
    if (session_bound_) mux_->by_session_.erase(session_);
    session_ = session;
    session_bound_ = true;
    mux_->by_session_[session] = this;
  }

  bool Send(absl::Span<const uint8_t> header,
            absl::Span<const uint8_t> payload) override {
    absl::MutexLock lock(&mux_->mu_);
    return mux_->broken_.ok() && mux_->link_->Send(header, payload);
  }

  bool FlushSends() override {
    absl::MutexLock lock(&mux_->mu_);
    return mux_->broken_.ok() && mux_->link_->FlushSends();
  }

  absl::Status Receive(FrameTaker take, int max) override {
    std::deque<std::vector<uint8_t>> mine;
    absl::Status broken;
    {
      absl::MutexLock lock(&mux_->mu_);
      mux_->DistributeLocked(this);
      while (!inbox_.empty() && static_cast<int>(mine.size()) < max) {
        mine.push_back(std::move(inbox_.front()));
        inbox_.pop_front();
      }
      // Frames still queued are handed up before the break is reported.
      if (inbox_.empty()) broken = mux_->broken_;
    }
    for (const std::vector<uint8_t>& f : mine) take(f);
    absl::MutexLock lock(&mux_->mu_);
    for (std::vector<uint8_t>& f : mine) Recycle(std::move(f));
    return broken;
  }

  void AddWaitFds(std::vector<pollfd>* fds) const override {
    fds->push_back({wake_.read_end.get(), POLLIN, 0});
    absl::MutexLock lock(&mux_->mu_);
    mux_->link_->AddWaitFds(fds);
  }

  bool PrepareWait() override {
    wake_.Drain();
    absl::MutexLock lock(&mux_->mu_);
    for (int pass = 0; pass < kMaxPreparePasses; ++pass) {
      if (!inbox_.empty() || !mux_->broken_.ok()) return false;
      if (mux_->link_->PrepareWait()) return true;
      mux_->DistributeLocked(this);
    }
    return false;
  }

  void AwaitSent(absl::Duration max) override {
    absl::MutexLock lock(&mux_->mu_);
    if (!mux_->broken_.ok()) return;
    // With other views on it the link lives on, and sends on.
    if (mux_->views_ == 1) {
      mux_->link_->AwaitSent(max);
    } else {
      (void)mux_->link_->FlushSends();
    }
  }

  void Abandon() override {
    absl::MutexLock lock(&mux_->mu_);
    mux_->retired_ = true;
  }

  bool LastUser() override {
    absl::MutexLock lock(&mux_->mu_);
    if (mux_->views_ != 1) return false;
    mux_->retired_ = true;
    return true;
  }

 private:
  friend class UcLinkMux;

  void Recycle(std::vector<uint8_t> f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mux_->mu_) {
    if (mux_->spare_.size() < kMaxSpare) mux_->spare_.push_back(std::move(f));
  }

  const std::shared_ptr<UcLinkMux> mux_;
  WakePipe wake_;
  uint64_t session_ = 0;
  bool session_bound_ = false;
  // Frames sorted for this view, not yet handed up. Guarded by mux_->mu_.
  std::deque<std::vector<uint8_t>> inbox_;
};

std::shared_ptr<UcLinkMux> UcLinkMux::Create(std::unique_ptr<UcLink> link) {
  return std::shared_ptr<UcLinkMux>(new UcLinkMux(std::move(link)));
}

UcLinkMux::~UcLinkMux() = default;

absl::StatusOr<std::unique_ptr<UcLink>> UcLinkMux::Join() {
  absl::StatusOr<WakePipe> wake = WakePipe::Create();
  if (!wake.ok()) return wake.status();
  absl::MutexLock lock(&mu_);
  if (retired_ || !broken_.ok()) {
    return absl::FailedPreconditionError(
        "this uc link takes no more lanes (its peer stopped answering, it "
        "broke, or its last lane closed): make a new link");
  }
  ++views_;
  return std::unique_ptr<UcLink>(
      new MuxView(shared_from_this(), *std::move(wake)));
}

bool UcLinkMux::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_ || !broken_.ok();
}

size_t UcLinkMux::views() const {
  absl::MutexLock lock(&mu_);
  return views_;
}

void UcLinkMux::DistributeLocked(const MuxView* caller) {
  if (!broken_.ok()) return;
  absl::Status received = link_->Receive(
      [this, caller](absl::Span<const uint8_t> frame) {
        if (frame.size() < kUcFrameHeaderBytes) return;
        uint64_t session;
        std::memcpy(&session, frame.data() + kSessionOffset, sizeof(session));
        auto it = by_session_.find(session);
        if (it == by_session_.end()) return;  // a lane that closed
        MuxView* view = it->second;
        std::vector<uint8_t> copy;
        if (!spare_.empty()) {
          copy = std::move(spare_.back());
          spare_.pop_back();
        }
        copy.assign(frame.begin(), frame.end());
        const bool was_empty = view->inbox_.empty();
        view->inbox_.push_back(std::move(copy));
        if (was_empty && view != caller) view->wake_.Wake();
      },
      kMaxSortedPerPass);
  if (!received.ok()) {
    broken_ = received;
    retired_ = true;
    for (auto& [session, view] : by_session_) view->wake_.Wake();
  }
}

}  // namespace meshpool::rdma::internal
