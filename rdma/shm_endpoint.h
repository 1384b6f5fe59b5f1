// meshpool/rdma internal: the shm backend's client side. One ShmEndpoint
// is one connection to a node's unix socket (held open to learn of the
// node's death) plus the node's memory mapped into this process. Post
// executes each request at once (memcpy / atomic, or forwarded to an
// atomics endpoint) and queues its completion; Poll hands them out.
// Not thread-safe (an Endpoint is used by one thread at a time).
#ifndef MESHPOOL_RDMA_SHM_ENDPOINT_H_
#define MESHPOOL_RDMA_SHM_ENDPOINT_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"
#include "rdma/shm_mapping.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {

class ShmEndpoint : public Endpoint {
 public:
  // Connects to the node's socket at `path`, receives its region table and
  // memory files and maps them through `cache`. Errors: Unavailable (nobody
  // listens there, no table within `timeout`), PermissionDenied (the
  // socket's permissions refuse this user), FailedPrecondition (a malformed
  // table or a resizable file: another meshpool version or not a node),
  // ResourceExhausted (mmap).
  static absl::StatusOr<std::unique_ptr<ShmEndpoint>> Connect(
      const std::string& path, ShmMappingCache& cache, absl::Duration timeout);

  // From now on CAS/FAA go to `atomics` (see rdma.h), each run of them
  // waited for up to `timeout` inside Post. REQUIRES: before the first Post.
  void ForwardAtomicsTo(std::unique_ptr<Endpoint> atomics,
                        absl::Duration timeout);

  // See rdma.h. Executes the batch before returning.
  absl::Status Post(absl::Span<const WorkRequest> batch) override;
  // See rdma.h. Never waits: every completion was queued by Post.
  absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                              absl::Duration timeout) override;
  bool healthy() const override { return broken_.ok(); }

 private:
  struct Region {
    uint64_t addr;  // the node's address of the region
    uint64_t length;
    uint8_t* local;  // where addr is mapped here
    uint16_t slot;
  };
  using Clock = std::chrono::steady_clock;

  ShmEndpoint(UniqueFd socket, std::shared_ptr<const ShmMapping> control,
              std::vector<std::shared_ptr<const ShmMapping>> exports,
              absl::flat_hash_map<uint32_t, Region> regions)
      : socket_(std::move(socket)),
        control_(std::move(control)),
        exports_(std::move(exports)),
        regions_(std::move(regions)) {}

  // Breaks the endpoint when the node closed or (checked at most every
  // kShmLivenessCheckMs) its socket hung up, or the atomics endpoint broke.
  void CheckPeer();
  void Break(absl::string_view why);
  // Where `wr`'s remote range is mapped; PermissionDenied when its rkey is
  // unknown or deregistered or the range leaves the region.
  absl::StatusOr<uint8_t*> Resolve(const WorkRequest& wr) const;
  void Execute(const WorkRequest& wr, uint8_t* target);
  void Complete(const WorkRequest& wr, absl::Status status);
  // Posts the pending run of atomics to atomics_, waits for them, and
  // completes them in order.
  void FlushAtomics();

  UniqueFd socket_;
  const std::shared_ptr<const ShmMapping> control_;
  const std::vector<std::shared_ptr<const ShmMapping>> exports_;
  const absl::flat_hash_map<uint32_t, Region> regions_;
  std::unique_ptr<Endpoint> atomics_;
  absl::Duration atomics_timeout_;
  std::vector<WorkRequest> atomics_run_;
  std::vector<Completion> atomics_done_;
  Clock::time_point next_check_{};
  bool unfenced_write_ = false;  // a WRITE ran since the last full fence
  absl::Status broken_;          // OK while healthy, else Unavailable
  std::deque<Completion> done_;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SHM_ENDPOINT_H_
