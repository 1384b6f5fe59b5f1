// meshpool/rdma internal: the Poller backends' factories (poller.h), one per
// file; poller.cc chooses among them.
#ifndef MESHPOOL_RDMA_POLLER_IMPL_H_
#define MESHPOOL_RDMA_POLLER_IMPL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "rdma/poller.h"

namespace meshpool::rdma::internal {

// poll(2) and a wake pipe; every POSIX system (poller_poll.cc).
absl::StatusOr<std::unique_ptr<Poller>> CreatePollPoller();
#ifdef __linux__
// epoll and an eventfd (poller_epoll_linux.cc).
absl::StatusOr<std::unique_ptr<Poller>> CreateEpollPoller();
#endif

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_POLLER_IMPL_H_
