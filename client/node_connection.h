// NodeConnection: everything one client holds for one memory node — the
// node's registration (layout, pool region, incarnation), a pool of data
// lanes (transport endpoints with registered staging buffers), the slab the
// client is currently carving objects out of, and a thin stub of the node's
// control service (slab grants, stats).
//
// Thread-safe. Lanes are used by one thread at a time (LaneLease).
#ifndef MESHPOOL_CLIENT_NODE_CONNECTION_H_
#define MESHPOOL_CLIENT_NODE_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "auth/auth.h"
#include "client/node_session.h"
#include "client/slot_cache.h"
#include "format/layout.h"
#include "proto/proto.h"
#include "rdma/rdma.h"

namespace meshpool::client_internal {

// One endpoint plus a staging buffer registered with the same transport.
class Lane {
 public:
  // `handshake` carries the transport's connection request to the node
  // (verbs exchanges queue-pair attributes this way; tcp and sim need none).
  static absl::StatusOr<std::unique_ptr<Lane>> Create(
      rdma::Transport& transport, absl::string_view address,
      const rdma::Handshake& handshake);

  rdma::Endpoint& endpoint() { return *endpoint_; }
  // A registered staging area of at least `bytes` (grown on demand; earlier
  // spans are invalidated by growth). ResourceExhausted if it cannot grow.
  absl::StatusOr<absl::Span<char>> Staging(size_t bytes);
  uint32_t staging_lkey() const { return region_ ? region_->lkey() : 0; }

 private:
  Lane(rdma::Transport& transport, std::unique_ptr<rdma::Endpoint> endpoint)
      : transport_(transport), endpoint_(std::move(endpoint)) {}
  rdma::Transport& transport_;
  // Destroyed in reverse: the endpoint first (a discarded lane may still
  // have requests in flight into the staging buffer), then the region, then
  // the buffer it covers.
  std::unique_ptr<char[]> buffer_;
  size_t buffer_bytes_ = 0;
  std::unique_ptr<rdma::MemoryRegion> region_;
  std::unique_ptr<rdma::Endpoint> endpoint_;
};

struct ConnectionOptions {
  std::string client_id;
  auth::ChannelSecurity security;  // for the node's gRPC service
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration op_timeout = absl::Seconds(5);
  uint32_t pins = 0;  // pin table entries to ask for (0: the node's default)
};

class NodeConnection {
 public:
  // Lanes connect to `address` (one of info's transport addresses, the
  // one `transport` serves). REQUIRES: `transport` outlives the connection.
  static absl::StatusOr<std::shared_ptr<NodeConnection>> Create(
      const proto::NodeInfo& info, rdma::Transport& transport,
      absl::string_view address, const ConnectionOptions& options);
  ~NodeConnection();

  const proto::NodeInfo& info() const { return info_; }
  // The transport this node is reached by, and the address.
  const rdma::Transport& transport() const { return transport_; }
  const std::string& address() const { return address_; }
  const format::PoolLayout& layout() const { return layout_; }
  uint64_t incarnation() const { return info_.incarnation(); }
  // Where one-sided operations name the node's pool. The cluster map leaves
  // them out: LearnPool, which the first AcquireLane runs, asks the node
  // (DescribePool), so they are valid once LearnPool returned OK or to a
  // caller holding a LaneLease, 0 before.
  uint64_t pool_addr() const { return pool_addr_; }
  uint32_t pool_rkey() const { return pool_rkey_; }
  // Asks the node where its pool is (DescribePool), once: OK at once when
  // known. Errors: AcquireLane's (Unavailable when the node does not
  // answer, PermissionDenied for a certificate that is no data user's,
  // FailedPrecondition for another incarnation or a described length that
  // is not the registered one).
  absl::Status LearnPool();
  absl::Duration read_lease() const { return read_lease_; }
  absl::Duration op_timeout() const { return options_.op_timeout; }
  // Largest object a slab can hold.
  uint64_t max_object_bytes() const { return layout_.slab_bytes; }

  // A lane checked out for one operation; returned to the pool on
  // destruction unless Discard()ed (after a transport error).
  class LaneLease {
   public:
    LaneLease(NodeConnection* owner, std::unique_ptr<Lane> lane)
        : owner_(owner), lane_(std::move(lane)) {}
    LaneLease(LaneLease&&) = default;
    ~LaneLease();
    Lane* operator->() const { return lane_.get(); }
    Lane& operator*() { return *lane_; }
    void Discard() { lane_.reset(); }
    bool valid() const { return lane_ != nullptr; }

   private:
    NodeConnection* owner_;
    std::unique_ptr<Lane> lane_;
  };
  // Region guards (client/region_transfer.h): when this client last saw the
  // guard word of allocation `value` hold it, as the time the request that
  // read it was posted; InfinitePast when never (or forgotten: at most
  // kMaxGuardsRemembered are kept).
  absl::Time GuardSeen(uint64_t value) const;
  void RecordGuard(uint64_t value, absl::Time posted);
  static constexpr size_t kMaxGuardsRemembered = 4096;

  // Unavailable when the node cannot be reached (it may have died, or
  // restarted: a new incarnation); FailedPrecondition when it describes a
  // pool other than the one it registered.
  absl::StatusOr<LaneLease> AcquireLane();

  // Space for one object in a slab leased from this node. While it lives,
  // the slab is not released early (the node would seal it and could reuse
  // it while this object is still to be published): destroy it once the
  // object is published or abandoned.
  class Allocation {
   public:
    Allocation() = default;
    Allocation(NodeConnection* owner, uint64_t grant, uint64_t offset,
               absl::Time deadline)
        : owner_(owner), grant_(grant), offset_(offset), deadline_(deadline) {}
    Allocation(Allocation&& other) noexcept { *this = std::move(other); }
    Allocation& operator=(Allocation&& other) noexcept;
    ~Allocation();
    uint64_t offset() const { return offset_; }  // from the pool start
    // Publish (CAS) only before this.
    absl::Time publish_deadline() const { return deadline_; }

   private:
    NodeConnection* owner_ = nullptr;
    uint64_t grant_ = 0;  // which grant of a slab (slab numbers are reused)
    uint64_t offset_ = 0;
    absl::Time deadline_;
  };
  // Carves `bytes` (a multiple of kObjectAlign) out of the current slab,
  // asking the node for a new slab when it is full or its lease is ending.
  // When the node is full and evicting, waits for a slab to come free, up
  // to op_timeout (then Unavailable). ResourceExhausted when nothing on
  // the node can be evicted (all pinned, or regions); Unavailable when it
  // cannot be reached; FailedPrecondition when it restarted.
  absl::StatusOr<Allocation> Allocate(uint64_t bytes);

  absl::StatusOr<proto::NodeStats> GetStats();

  // A range of pool memory: (pool offset, length).
  struct PoolRange {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  // XXH3-64 of each range, computed by the node (DigestRanges RPC), in
  // order. InvalidArgument when a range is not inside one region slab or
  // the total is over format::kMaxDigestBytes; FailedPrecondition when the
  // node restarted; Unavailable when it cannot be reached.
  absl::StatusOr<std::vector<uint64_t>> DigestRanges(
      absl::Span<const PoolRange> ranges);

  // Session RPCs (NodeSession calls them). FailedPrecondition when the
  // node restarted; ResourceExhausted (open) when it has no free pin
  // table; NotFound (renew) when the session expired; Unavailable.
  absl::StatusOr<proto::OpenSessionReply> OpenSession();
  absl::StatusOr<proto::RenewSessionReply> RenewSession(
      uint32_t session, uint64_t token, const proto::KvClientStats& stats);
  absl::Status CloseSession(uint32_t session, uint64_t token,
                            const proto::KvClientStats& stats);

  // This client's session (pins) on the node, and its counters.
  NodeSession& session() { return session_; }
  NodeKvCounters& counters() { return counters_; }
  const NodeKvCounters& counters() const { return counters_; }

  // Sends a transport's connection request to the node's Handshake RPC.
  absl::StatusOr<std::string> Handshake(const std::string& request);

  // Where `what` failed, for error messages ("node-1 (tcp://...)").
  std::string Describe() const;

  // Where keys' slots were last seen on this node (hints only).
  SlotCache& slot_cache() { return slot_cache_; }

  // True at most once per kTouchInterval for each slab: whether a GET that
  // read from `slab` should mark it read (the WRITE of its slab table
  // "touched" word that earns it the evictor's second chance). Thread-safe.
  bool ShouldTouch(uint64_t slab);
  static constexpr absl::Duration kTouchInterval = absl::Seconds(1);

 private:
  NodeConnection(const proto::NodeInfo& info, rdma::Transport& transport,
                 absl::string_view address, const ConnectionOptions& options);
  void ReturnLane(std::unique_ptr<Lane> lane);
  // Replaces the current slab; the old one is released once no allocation
  // in it is outstanding (at once when that is already so).
  // *retry_after > 0: the node is evicting, no slab yet; ask again then.
  absl::Status GrantSlabLocked(absl::Duration* retry_after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slab_mu_);
  void AllocationDone(uint64_t grant);
  // A slab this client was granted, as ReleaseSlab names it.
  struct HeldSlab {
    uint64_t slab = 0;
    uint64_t token = 0;  // GrantSlabReply.token
  };
  void ReleaseSlabs(const std::vector<HeldSlab>& slabs);
  grpc::ClientContext* NewContext(grpc::ClientContext& ctx) const;

  const proto::NodeInfo info_;
  const std::string address_;  // where lanes connect
  format::PoolLayout layout_;
  rdma::Transport& transport_;
  const ConnectionOptions options_;
  const absl::Duration read_lease_;
  std::unique_ptr<proto::Node::Stub> stub_;

  // Set once by LearnPool, before pool_known_ (release): readers load
  // pool_known_ (acquire) or hold a lane created after it was set.
  absl::Mutex pool_mu_;
  std::atomic<bool> pool_known_{false};
  uint64_t pool_addr_ = 0;
  uint32_t pool_rkey_ = 0;

  mutable absl::Mutex guards_mu_;
  absl::flat_hash_map<uint64_t, absl::Time> guard_seen_
      ABSL_GUARDED_BY(guards_mu_);

  absl::Mutex lanes_mu_;
  std::vector<std::unique_ptr<Lane>> idle_lanes_ ABSL_GUARDED_BY(lanes_mu_);

  absl::Mutex slab_mu_;
  bool has_slab_ ABSL_GUARDED_BY(slab_mu_) = false;
  uint64_t slab_ ABSL_GUARDED_BY(slab_mu_) = 0;
  uint64_t slab_cursor_ ABSL_GUARDED_BY(slab_mu_) = 0;
  uint64_t slab_end_ ABSL_GUARDED_BY(slab_mu_) = 0;
  absl::Time slab_deadline_ ABSL_GUARDED_BY(slab_mu_);
  absl::Duration slab_window_ ABSL_GUARDED_BY(slab_mu_);
  // Per grant (a slab number comes back once the node reclaims it, so grants
  // are counted apart): the slab, its outstanding allocations, and whether
  // it was replaced.
  struct SlabUse {
    HeldSlab held;
    uint64_t outstanding = 0;
    bool retired = false;
  };
  uint64_t grant_ ABSL_GUARDED_BY(slab_mu_) = 0;  // the current slab's grant
  uint64_t grants_ ABSL_GUARDED_BY(slab_mu_) = 0;
  absl::flat_hash_map<uint64_t, SlabUse> slab_uses_ ABSL_GUARDED_BY(slab_mu_);

  SlotCache slot_cache_;
  NodeKvCounters counters_;
  NodeSession session_{*this};
  // Per slab: when this client last marked it read (ms since the epoch).
  std::unique_ptr<std::atomic<int64_t>[]> touched_ms_;
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_NODE_CONNECTION_H_
