// meshpool/store: a memory node. It maps a pool, lays it out (superblock,
// index, slab table, pin area, slab area; format/layout.h), registers the
// whole pool with a transport as one region and lets clients read and write
// it one-sidedly. Its CPU does no work per GET or PUT: it grants slabs over
// gRPC, sets zero-filled slabs aside for regions when the coordinator asks
// (and seals them when it frees the region), digests region memory when a
// loader asks (DigestRanges), keeps client sessions (pin tables) and
// expires those not renewed, evicts KV objects under memory pressure
// (store/evictor.h), reclaims slabs whose objects are all dead, and
// heartbeats to the coordinator. The pool's pages are faulted in at start,
// so neither region creation nor first writes pay page faults.
//
// Thread-safety: Node is thread-safe.
#ifndef MESHPOOL_STORE_STORE_H_
#define MESHPOOL_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "common/env.h"
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"
#include "store/slab_manager.h"

namespace meshpool::store {

// How much longer than NodeOptions.reclaim_interval an idle node waits
// between reclamation passes.
inline constexpr int kIdleReclaimFactor = 10;
static_assert(kIdleReclaimFactor >= 1);

struct NodeOptions {
  std::string coordinator;      // host:port of the coordinator
  uint64_t capacity_bytes = 0;  // pool size
  uint64_t slab_bytes = 0;      // 0 -> ComputeLayout's default
  uint64_t bucket_count = 0;    // 0 -> ComputeLayout's default
  std::string node_id;          // empty -> the coordinator assigns one
  // The node's gRPC service. Its host is published as-is in
  // NodeInfo.control_address, so it must be one clients can dial.
  std::string control_listen = "127.0.0.1:0";
  std::string transport_bind = "127.0.0.1:0";  // passed to Transport::Listen
  // Host published to clients in place of the host the node bound (both
  // control and transport addresses). Required when binding a wildcard
  // address (0.0.0.0, [::]); Start fails with InvalidArgument otherwise.
  std::string advertise_host;
  // TLS for the control plane (auth/auth.h): the node serves its gRPC
  // service with this certificate (requiring one of each caller, checking
  // its role) and presents it to the coordinator, whose registration binds
  // the node's id to the certificate's name. Not enabled: no TLS, and then
  // control_listen and a tcp transport_bind must be loopback addresses
  // unless `insecure` (protected mode; Start fails FailedPrecondition).
  auth::TlsConfig tls;
  bool insecure = false;
  // Told to clients per granted slab; the node adds kLeaseMargin
  // (format/protocol.h) before it seals the slab.
  absl::Duration slab_lease = absl::Seconds(10);
  // The longest a GET may take; published in NodeInfo. Freed memory is reused
  // only after max_read_lease + kReclaimMargin.
  absl::Duration max_read_lease = format::kDefaultMaxReadLease;
  // Reclamation passes run this often while there is work, and back off to
  // kIdleReclaimFactor times it while there is none.
  absl::Duration reclaim_interval = absl::Milliseconds(200);
  // Eviction under memory pressure (store/evictor.h): when more than
  // evict_high_watermark of the slabs are in use, evict sealed slabs in
  // seal order (second chance for recently read ones, never pinned ones or
  // regions) down to evict_low_watermark; a GrantSlab that finds no free
  // slab evicts at once. Fractions with 0 < low < high <= 1. Off: a full
  // pool answers GrantSlab with ResourceExhausted.
  bool evict = true;
  double evict_high_watermark = 0.90;
  double evict_low_watermark = 0.80;
  // Client sessions (pin tables): one not renewed for this long ends, and
  // its pins, hard ones included, with it. In [1ms, 24h].
  absl::Duration session_lease = absl::Seconds(10);
  // Pin tables and entries per table; 0 -> ComputeLayout's defaults.
  uint32_t pin_sessions = 0;
  uint32_t pins_per_session = 0;
  // At most this many sessions (pin tables) per tenant at once; 0: no cap.
  // A tenant is the one a caller's certificate names; callers without one
  // count per certificate, and without TLS all callers count as one
  // (store/node_service.h).
  uint32_t max_sessions_per_tenant = 0;
  // At most this many slabs leased for writing per tenant at once (counted
  // as sessions are); 0: no cap. Past it GrantSlab is ResourceExhausted,
  // and nothing is evicted for that tenant.
  uint64_t max_granted_slabs_per_tenant = 0;
  // Same-host clients: with a tcp or verbs transport, the pool is a memfd
  // (store/pool.h) served over shared memory too, on a unix socket at
  // shm_socket ("": /tmp/meshpool-<pid>-<n>.sock), advertised as the
  // node's second transport address. Clients on this host then read and
  // write it with plain memory copies (rdma.h, "Shared-memory backend");
  // atomics still go through the node's transport on verbs.
  bool shm = true;
  std::string shm_socket;
  // Whose processes the shm socket hands the pool to, by user id, exactly
  // (rdma::ShmOptions::allowed_uids; empty: this process's user and root,
  // with the socket file 0600; named: the file is 0666 and only the peer
  // check decides, so name the node's own user too if its clients should
  // keep using shared memory; the others fall back to the network).
  std::vector<uint32_t> shm_allowed_uids;
  // Serve Prometheus metrics and a health check over HTTP on this
  // "host:port" (metrics/metrics.h; port 0 picks one), published in
  // NodeInfo.metrics_address. Empty: no metrics server.
  std::string metrics_listen;
  // How long Start waits for the coordinator to answer.
  absl::Duration coordinator_timeout = absl::Seconds(3);
  bool huge_pages = true;  // try 2 MiB pages, fall back to THP / 4 KiB
  // The clock the node's leases, expiries and eviction run on, and where
  // it logs what an operator should know (not owned; must outlive the
  // node). Null: Env::Default() (real clock, log lines dropped).
  Env* env = nullptr;
  // Called once, from a background thread, when the coordinator says it
  // declared this node dead. The node has then already stopped one-sided
  // access to its pool (its keys may have been rewritten elsewhere, so its
  // memory is stale) and stopped heartbeating; the owner should Shutdown()
  // and exit, and a restart rejoins as a new incarnation. It runs on the
  // node's heartbeat thread: it must not call Shutdown() itself (that joins
  // this thread); wake another thread instead.
  std::function<void()> on_declared_dead;
};

class NodeImpl;  // node.cc

// A running memory node.
class Node {
 public:
  // Maps the pool, lays it out (superblock, zeroed index, slab table and pin
  // area), registers it with `transport` as one region, Listen()s on
  // options.transport_bind, opens an endpoint to itself there (the
  // evictor's, when options.evict), starts
  // the gRPC Node service, registers with the coordinator, then heartbeats
  // (registering again when the coordinator answers known=false) and
  // reclaims in background threads until Shutdown.
  // Errors: InvalidArgument (bad options; the message says what to change),
  // ResourceExhausted (the pool cannot be mapped or registered), Unavailable
  // (the coordinator is unreachable: start one with `meshpool coordinator`
  // and point NodeOptions.coordinator at it), or what the transport's
  // Listen or Connect (to itself, for the evictor) returns.
  // REQUIRES: transport != nullptr and not yet listening.
  static absl::StatusOr<std::unique_ptr<Node>> Start(
      NodeOptions options, std::unique_ptr<rdma::Transport> transport);
  ~Node();  // Shutdown()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // As registered, with node_id filled in, and with the pool's address and
  // key, which the registration leaves out (clients get them from the
  // node's DescribePool). Valid for the Node's lifetime.
  const proto::NodeInfo& info() const;

  // Current pool statistics (what heartbeats carry); slabs_region counts
  // slabs held by regions, and used_bytes includes them; slabs_evicted and
  // objects_evicted count since start; pinned_objects/bytes scan the live
  // pin tables; clients_total and sessions are what clients reported.
  proto::NodeStats Stats() const;

  // Stops the gRPC service (in-flight calls get a short deadline), the
  // heartbeat and reclaim threads, then one-sided access (the transport).
  // The pool stays mapped until destruction. Idempotent; a concurrent
  // caller returns once the first one is done.
  void Shutdown();

  // Blocks until Shutdown has completed.
  void Wait();

 private:
  explicit Node(std::unique_ptr<NodeImpl> impl);
  std::unique_ptr<NodeImpl> impl_;
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_STORE_H_
