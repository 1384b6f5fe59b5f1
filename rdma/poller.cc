// Which Poller backend: epoll where the OS has it, unless MESHPOOL_POLLER
// asks for poll (the backend of every other platform, so that Linux tests
// can run it).
#include "rdma/poller.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "rdma/poller_impl.h"

namespace meshpool::rdma::internal {

absl::StatusOr<std::unique_ptr<Poller>> Poller::Create(Backend backend) {
  const char* forced = std::getenv("MESHPOOL_POLLER");
  bool epoll = false;
  if (forced != nullptr && std::strcmp(forced, "poll") == 0) {
    backend = Backend::kPoll;
  } else if (forced != nullptr && std::strcmp(forced, "epoll") == 0) {
    epoll = true;
  } else if (forced != nullptr && forced[0] != '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat("MESHPOOL_POLLER=", forced,
                     " names no event backend; set it to poll, or epoll on "
                     "Linux, or unset it"));
  }
#ifdef __linux__
  if (backend == Backend::kDefault || epoll) return CreateEpollPoller();
#else
  if (epoll) {
    return absl::InvalidArgumentError(
        "MESHPOOL_POLLER=epoll: epoll is Linux-only; unset it, or set poll");
  }
#endif
  (void)epoll;
  return CreatePollPoller();
}

}  // namespace meshpool::rdma::internal
