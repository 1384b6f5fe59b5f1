// The epoll Poller (Linux): one epoll set, level-triggered, and an eventfd
// registered with a null token as the wake-up.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/common.h"
#include "rdma/poller_impl.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {
namespace {

// Events taken per epoll_wait at most (the caller's span may be larger).
constexpr size_t kMaxEventsPerWait = 256;

uint32_t ToEpoll(uint32_t interest) {
  uint32_t events = 0;
  if (interest & Poller::kReadable) events |= EPOLLIN;
  if (interest & Poller::kWritable) events |= EPOLLOUT;
  return events;
}

uint32_t FromEpoll(uint32_t got) {
  uint32_t events = 0;
  if (got & EPOLLIN) events |= Poller::kReadable;
  if (got & EPOLLOUT) events |= Poller::kWritable;
  if (got & EPOLLHUP) events |= Poller::kHangUp;
  if (got & EPOLLERR) events |= Poller::kError;
  return events;
}

class EpollPoller final : public Poller {
 public:
  EpollPoller(UniqueFd epoll_fd, UniqueFd wake_fd)
      : epoll_fd_(std::move(epoll_fd)), wake_fd_(std::move(wake_fd)) {}

  absl::Status Add(int fd, uint32_t interest, void* token) override {
    return Control(EPOLL_CTL_ADD, fd, interest, token);
  }
  absl::Status Modify(int fd, uint32_t interest, void* token) override {
    return Control(EPOLL_CTL_MOD, fd, interest, token);
  }
  void Remove(int fd) override {
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  }

  size_t Wait(int timeout_ms, absl::Span<Event> events, bool* woken) override {
    *woken = false;
    epoll_event got[kMaxEventsPerWait];
    const int want = static_cast<int>(
        std::min(events.size() + 1, kMaxEventsPerWait));  // + the wake-up
    const int n = ::epoll_wait(epoll_fd_.get(), got, want, timeout_ms);
    size_t filled = 0;
    for (int i = 0; i < n; ++i) {
      if (got[i].data.ptr == nullptr) {
        uint64_t count;
        (void)!::read(wake_fd_.get(), &count, sizeof(count));
        *woken = true;
      } else if (filled < events.size()) {
        events[filled++] = {got[i].data.ptr, FromEpoll(got[i].events)};
      }
    }
    return filled;
  }

  void Wake() override {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof(one));
  }
  const char* name() const override { return "epoll"; }

 private:
  absl::Status Control(int op, int fd, uint32_t interest, void* token) {
    epoll_event ev{};
    ev.events = ToEpoll(interest);
    ev.data.ptr = token;
    if (::epoll_ctl(epoll_fd_.get(), op, fd, &ev) != 0) {
      return ErrnoToStatus(errno, "epoll_ctl");
    }
    return absl::OkStatus();
  }

  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // an eventfd; its token is nullptr
};

}  // namespace

absl::StatusOr<std::unique_ptr<Poller>> CreateEpollPoller() {
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return ErrnoToStatus(errno, "epoll_create1");
  UniqueFd wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd.valid()) return ErrnoToStatus(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd.get(), &ev) != 0) {
    return ErrnoToStatus(errno, "epoll_ctl(eventfd)");
  }
  return std::unique_ptr<Poller>(
      new EpollPoller(std::move(epoll_fd), std::move(wake_fd)));
}

}  // namespace meshpool::rdma::internal
