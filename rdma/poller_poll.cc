// The poll(2) Poller: the set is a vector of (fd, interest, token), rebuilt
// into a pollfd array on each Wait (O(descriptors) per wait, which epoll
// avoids; fine for the tens of connections a Mac's node serves). The first
// pollfd is the read end of a wake pipe. When more descriptors are ready
// than the caller takes, the scan starts further on next time, so that none
// waits behind the others for long.
#include <poll.h>

#include <cerrno>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/common.h"
#include "rdma/poller_impl.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {
namespace {

short ToPoll(uint32_t interest) {
  short events = 0;
  if (interest & Poller::kReadable) events |= POLLIN;
  if (interest & Poller::kWritable) events |= POLLOUT;
  return events;
}

uint32_t FromPoll(short revents) {
  uint32_t events = 0;
  if (revents & POLLIN) events |= Poller::kReadable;
  if (revents & POLLOUT) events |= Poller::kWritable;
  if (revents & POLLHUP) events |= Poller::kHangUp;
  if (revents & (POLLERR | POLLNVAL)) events |= Poller::kError;
  return events;
}

class PollPoller final : public Poller {
 public:
  explicit PollPoller(WakePipe wake) : wake_(std::move(wake)) {}

  absl::Status Add(int fd, uint32_t interest, void* token) override {
    if (index_.contains(fd)) {
      return absl::InternalError("Poller::Add: the descriptor is watched");
    }
    index_[fd] = entries_.size();
    entries_.push_back({fd, interest, token});
    return absl::OkStatus();
  }

  absl::Status Modify(int fd, uint32_t interest, void* token) override {
    auto it = index_.find(fd);
    if (it == index_.end()) {
      return absl::InternalError(
          "Poller::Modify: the descriptor is not watched");
    }
    entries_[it->second].interest = interest;
    entries_[it->second].token = token;
    return absl::OkStatus();
  }

  void Remove(int fd) override {
    auto it = index_.find(fd);
    if (it == index_.end()) return;
    const size_t at = it->second;
    index_.erase(it);
    if (at + 1 != entries_.size()) {
      entries_[at] = entries_.back();
      index_[entries_[at].fd] = at;
    }
    entries_.pop_back();
  }

  size_t Wait(int timeout_ms, absl::Span<Event> events, bool* woken) override {
    *woken = false;
    fds_.resize(entries_.size() + 1);
    fds_[0] = {wake_.read_end.get(), POLLIN, 0};
    for (size_t i = 0; i < entries_.size(); ++i) {
      fds_[i + 1] = {entries_[i].fd, ToPoll(entries_[i].interest), 0};
    }
    const int n = ::poll(fds_.data(), fds_.size(), timeout_ms);
    if (n <= 0) return 0;  // timed out, or EINTR
    if (fds_[0].revents != 0) {
      wake_.Drain();
      *woken = true;
    }
    size_t filled = 0;
    const size_t count = entries_.size();
    for (size_t k = 0; k < count && filled < events.size(); ++k) {
      const size_t i = (start_ + k) % count;
      const uint32_t got = FromPoll(fds_[i + 1].revents);
      if (got != 0) events[filled++] = {entries_[i].token, got};
    }
    if (count > 0) start_ = (start_ + 1) % count;
    return filled;
  }

  void Wake() override { wake_.Wake(); }
  const char* name() const override { return "poll"; }

 private:
  struct Entry {
    int fd;
    uint32_t interest;
    void* token;
  };
  const WakePipe wake_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<int, size_t> index_;  // fd -> its entry
  std::vector<pollfd> fds_;                 // reused by Wait
  size_t start_ = 0;                        // where the next scan begins
};

}  // namespace

absl::StatusOr<std::unique_ptr<Poller>> CreatePollPoller() {
  MESHPOOL_ASSIGN_OR_RETURN(WakePipe wake, WakePipe::Create());
  return std::unique_ptr<Poller>(new PollPoller(std::move(wake)));
}

}  // namespace meshpool::rdma::internal
