// meshpool/rdma internal: one uc link shared by the lanes (endpoints) of a
// client to one node. A Thunderbolt controller serves 10 UC queue pairs
// (../shared/DESIGN.md §3), so a client's lanes to a node share one QP per
// device instead of taking one each; on UDP they share a socket.
//
// UcLinkMux owns the link; each lane gets a view (a UcLink of its own) that
// sends on the shared link and receives only the frames naming its channel's
// session (bound with BindSession before its first frame). Whichever view's
// thread takes frames from the link hands each to the view it names and
// wakes that view's waiter; frames for no bound session are dropped.
//
// A mux is retired (no view joins it any more; UcLinkMux::Join fails) once
// a view Abandons it (its peer stopped answering), the link broke, or its
// last view said LastUser(). The mux, and its link, go with its last view.
//
// Thread-safety: UcLinkMux and its views are thread-safe across views; each
// view is used by one thread at a time, as any UcLink.
#ifndef MESHPOOL_RDMA_UC_LINK_MUX_H_
#define MESHPOOL_RDMA_UC_LINK_MUX_H_

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rdma/uc_link.h"

namespace meshpool::rdma::internal {

class MuxView;

class UcLinkMux : public std::enable_shared_from_this<UcLinkMux> {
 public:
  // Shares `link` (not yet used by anyone).
  static std::shared_ptr<UcLinkMux> Create(std::unique_ptr<UcLink> link);
  ~UcLinkMux();

  // A view for one more lane. FailedPrecondition once the mux is retired
  // (make a new link); Internal when the view's wake-up pipe cannot be had.
  absl::StatusOr<std::unique_ptr<UcLink>> Join();

  bool retired() const;
  size_t views() const;

 private:
  friend class MuxView;
  explicit UcLinkMux(std::unique_ptr<UcLink> link) : link_(std::move(link)) {}

  // Takes what the link holds and hands each frame to its view, waking
  // the views other than `caller` that had nothing waiting.
  void DistributeLocked(const MuxView* caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::unique_ptr<UcLink> link_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // OK while the link works
  bool retired_ ABSL_GUARDED_BY(mu_) = false;
  size_t views_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, MuxView*> by_session_ ABSL_GUARDED_BY(mu_);
  // Frame buffers handed back by views, reused for the next frames.
  std::vector<std::vector<uint8_t>> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_LINK_MUX_H_
