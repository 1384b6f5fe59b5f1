// meshpool/rdma internal: the verbs backend's client side and the table of
// registrations it translates keys with.
//
//  * RegionTable: transport-wide handle -> the registration's MR chunks on
//    every opened device. The handles are what MemoryRegion reports as lkey
//    and rkey; they are unique for the transport's lifetime (never reused).
//    Thread-safe.
//  * VerbsEndpoint: one RC QP with its own CQ and completion channel,
//    connected through the Handshake callback. Translates (handle, addr) to
//    device keys (local: a per-endpoint cache in front of the RegionTable;
//    remote: the node's table from the handshake reply), splits requests at
//    MR chunk boundaries, chains a batch into one ibv_post_send, and signals
//    selectively. Not thread-safe (one thread at a time, as rdma.h says).
#ifndef MESHPOOL_RDMA_VERBS_ENDPOINT_H_
#define MESHPOOL_RDMA_VERBS_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/rdma.h"
#include "rdma/verbs_handshake.h"
#include "rdma/verbs_resources.h"

namespace meshpool::rdma::internal {

// One MR of a registration on one device: [addr, addr + length).
struct ChunkKeys {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// A registration's MRs: devices[i] are its ascending, contiguous chunks on
// the transport's i-th device, covering [addr, addr + length).
struct RegionKeys {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::vector<std::vector<ChunkKeys>> devices;
};

class RegionTable {
 public:
  explicit RegionTable(uint32_t seed);
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // Enters `keys` under a new handle (nonzero, never handed out before by
  // this table). ResourceExhausted beyond kMaxRegistrations live entries.
  absl::StatusOr<uint32_t> Add(std::shared_ptr<const RegionKeys> keys);
  void Remove(uint32_t handle);
  // nullptr when `handle` is not registered.
  std::shared_ptr<const RegionKeys> Find(uint32_t handle) const;
  // The live registrations as a handshake reply carries them for the
  // transport's `device`-th device.
  std::vector<HandshakeRegion> Snapshot(size_t device) const;

 private:
  mutable absl::Mutex mu_;
  uint32_t next_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::shared_ptr<const RegionKeys>> regions_
      ABSL_GUARDED_BY(mu_);
};

// What VerbsEndpoint::Connect needs from its transport.
struct EndpointSetup {
  std::shared_ptr<const VerbsDevice> device;
  size_t device_index = 0;  // of `device` in RegionKeys::devices
  std::shared_ptr<const RegionTable> regions;
  std::string self_name;  // the client's name in the handshake
  std::string peer;       // the peer's name, for messages
  absl::Duration busy_poll;
};

// Send queue depth requested per endpoint: room for kMaxOutstanding
// requests even when each splits at MR boundaries into a few pieces.
inline constexpr uint32_t kSendQueueDepth = 4 * kMaxOutstanding;
static_assert(kSendQueueDepth >= 3 * kMaxOutstanding);
inline constexpr uint32_t kRequestedInlineBytes = 256;
// An unsignaled run never grows longer than this many work requests.
inline constexpr uint64_t kSignalInterval = 64;

class VerbsEndpoint : public Endpoint {
 public:
  // Creates the QP, exchanges QP info through `handshake` and brings the QP
  // to RTS. Errors: those of `handshake` (Unavailable when the node cannot
  // be reached), FailedPrecondition for a malformed reply, and verbs
  // failures (ResourceExhausted when out of QPs or memory).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      EndpointSetup setup, const Handshake& handshake);
  ~VerbsEndpoint() override;

  // See rdma.h. A request naming a local range outside the registration of
  // its lkey is InvalidArgument (nothing posted). A request naming a remote
  // range the node's region table does not hold is refused here, as the
  // peer would: it completes PermissionDenied after the requests before it
  // and breaks the endpoint; the requests after it complete Unavailable.
  // InvalidArgument too when the batch needs more work requests after
  // splitting than the send queue holds.
  absl::Status Post(absl::Span<const WorkRequest> batch) override;
  // See rdma.h. Spins up to busy_poll, then sleeps on the completion
  // channel. Only signaled requests complete, plus every failed or flushed
  // one. Once broken, the outstanding requests complete (Unavailable, the
  // failing one PermissionDenied or Unavailable) and then Poll returns
  // Unavailable.
  absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                              absl::Duration timeout) override;
  bool healthy() const override { return broken_.ok(); }

 private:
  // Soft-RoCE (an rxe device): fenced requests go without IBV_SEND_FENCE
  // (verbs_endpoint.cc says why that keeps the contract).
  bool SoftRoce() const { return absl::StartsWith(setup_.device->name, "rxe"); }

  // A fixed-capacity FIFO (no allocation on the data path).
  template <typename T>
  class Ring {
   public:
    explicit Ring(size_t capacity) : slots_(capacity) {}
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T& front() { return slots_[head_]; }
    void push_back(T value) {
      slots_[(head_ + size_) % slots_.size()] = std::move(value);
      ++size_;
    }
    void pop_front() {
      slots_[head_] = T{};
      head_ = (head_ + 1) % slots_.size();
      --size_;
    }

   private:
    std::vector<T> slots_;
    size_t head_ = 0;
    size_t size_ = 0;
  };

  // A posted request, in posting order.
  struct Pending {
    uint64_t last_piece = 0;  // sequence of its last verbs WR
    uint64_t wr_id = 0;
    Opcode opcode = Opcode::kRead;
    bool signaled = false;
    bool synthetic = false;  // never posted; completes with `status`
    absl::Status status;
  };

  VerbsEndpoint(EndpointSetup setup, CompletionChannel channel,
                CompletionQueue cq, QueuePair qp, HandshakeReply reply);

  size_t outstanding() const { return pending_.size() + ready_.size(); }
  // The local chunks of `wr`'s lkey; InvalidArgument when unknown or when
  // `wr`'s local range lies outside it.
  absl::StatusOr<const std::vector<ChunkKeys>*> LocalChunks(
      const WorkRequest& wr);
  // The remote region of `wr`; nullptr (with *why set) when the node's
  // table does not hold its range.
  const HandshakeRegion* FindRemote(const WorkRequest& wr,
                                    absl::Status* why) const;
  // Appends `wr`'s verbs WRs at wrs_[*pieces...]. InvalidArgument when the
  // send queue cannot hold them or an atomic would have to split.
  absl::Status AddPieces(const WorkRequest& wr,
                         const std::vector<ChunkKeys>& local,
                         const HandshakeRegion& remote, size_t* pieces);
  // Chains wrs_[0, pieces) and posts them with one ibv_post_send.
  absl::Status PostPieces(size_t pieces);

  // Polls the CQ, turns CQEs into completions, and copies ready ones out.
  absl::StatusOr<size_t> Deliver(absl::Span<Completion> out);
  void OnCqe(uint64_t piece, int status, uint32_t vendor_err);
  // Completes every pending request (synthetic ones with their status,
  // the others with broken_).
  void FlushPending();
  void Break(absl::Status why);
  // Sleeps on the completion channel up to `timeout` (arming it first).
  absl::Status Wait(absl::Duration timeout);

  const EndpointSetup setup_;
  const uint32_t max_inline_;
  const uint64_t max_piece_bytes_;
  const uint32_t sq_depth_;
  absl::flat_hash_map<uint32_t, HandshakeRegion> remote_;
  absl::flat_hash_map<uint32_t, std::shared_ptr<const RegionKeys>> local_;
  absl::Status broken_;  // OK while healthy, else Unavailable
  Ring<Pending> pending_;
  Ring<Completion> ready_;
  uint64_t next_piece_ = 1;       // sequence of the next verbs WR
  uint64_t completed_piece_ = 0;  // every WR up to this one is done
  bool armed_ = false;
  std::vector<ibv_send_wr> wrs_;  // Post's scratch, sq_depth_ entries
  std::vector<ibv_sge> sges_;
  std::vector<size_t> piece_end_;  // per request of a batch
  // Verbs objects last, in dependency order: destroyed QP first.
  CompletionChannel channel_;
  CompletionQueue cq_;
  QueuePair qp_;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_VERBS_ENDPOINT_H_
