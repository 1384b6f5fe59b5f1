// meshpool/store/node_service.h: the node's control-plane endpoint, the gRPC
// service meshpool.proto.Node (GrantSlab, ReleaseSlab, Handshake,
// DescribePool, GetStats,
// OpenSession / RenewSession / CloseSession for clients' pin tables, and
// AllocateRegion / FreeRegion for the coordinator).
//
// A thin translation layer: requests go to the SlabManager and the
// Transport, statuses convert with proto/proto.h. It never touches values:
// clients read and write the pool one-sidedly through the transport.
//
// Region calls: a request naming another incarnation is FailedPrecondition
// ("node restarted"). AllocateRegion needs stripe_bytes a positive multiple
// of placement::kStripeAlign, at most the slab size, and stripes > 0
// (InvalidArgument otherwise); it takes ceil(stripes / (slab_bytes /
// stripe_bytes)) slabs (SlabManager::AllocateRegion has the other codes)
// and answers the slab size and the slabs' pool offsets in order.
// FreeRegion of a region this node does not hold is OK.
//
// DescribePool answers the pool's address, key and length to a data user
// (with TLS: a client, node or admin) naming this incarnation
// (FailedPrecondition otherwise): the only place a client learns them.
//
// DigestRanges answers the XXH3-64 of each range, in order, computed on the
// calling gRPC thread. Errors: FailedPrecondition (another incarnation),
// InvalidArgument (a range that is not inside one slab of a region, see
// SlabManager::CheckRegionRange, or more than kMaxDigestBytes in all). The
// node never digests objects or free memory, and does this work only when
// asked, never per GET or PUT.
//
// GrantSlab goes through the Evictor when there is one (a full pool answers
// OK with only retry_after_ms set while eviction can free a slab, and
// ResourceExhausted when nothing can be evicted; see store/evictor.h), else
// straight to the SlabManager.
//
// GrantSlab is ResourceExhausted when the caller's tenant (as for
// sessions, below) leases NodeOptions::max_granted_slabs_per_tenant slabs.
//
// Sessions (store/pin_tables.h): OpenSession names the incarnation
// (FailedPrecondition otherwise) and answers ResourceExhausted when every
// pin table is taken, or the caller's tenant holds its cap of them
// (NodeOptions::max_sessions_per_tenant; the tenant is the one the
// caller's certificate names, else the certificate itself, else without
// TLS one shared key); RenewSession / CloseSession answer NotFound for a
// session that expired, closed or has another token. A server without pin
// tables answers them Unimplemented.
//
// Thread-safety: NodeServer is thread-safe; gRPC calls arrive on its threads.
#ifndef MESHPOOL_STORE_NODE_SERVICE_H_
#define MESHPOOL_STORE_NODE_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/auth.h"
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"
#include "store/evictor.h"
#include "store/pin_tables.h"
#include "store/slab_manager.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace meshpool::store {

class NodeServiceImpl;  // node_service.cc

// What the service serves. Every pointer must outlive the NodeServer.
struct NodeServiceDeps {
  SlabManager* slabs = nullptr;
  char* pool = nullptr;  // the pool slabs->layout() describes
  // The pool's registration, answered by DescribePool (zero length: that
  // call answers FailedPrecondition).
  rdma::RemoteRegion pool_region;
  rdma::Transport* transport = nullptr;
  PinTables* sessions = nullptr;  // optional: session calls Unimplemented
  Evictor* evictor = nullptr;     // optional: GrantSlab asks slabs directly
  uint64_t incarnation = 0;  // GrantSlab, OpenSession, region requests name it
  std::function<proto::NodeStats()> stats;
};

// A running gRPC server with the Node service on it.
class NodeServer {
 public:
  // Binds `listen` ("host:port", port 0 picks one) and starts serving;
  // with `tls` enabled over TLS, requiring client certificates and checking
  // each call's role (auth/auth.h). Errors: InvalidArgument (a dependency
  // is missing, or `listen` cannot be bound: in use or not a local address;
  // pick another), and those reading `tls`'s files.
  static absl::StatusOr<std::unique_ptr<NodeServer>> Start(
      absl::string_view listen, const auth::TlsConfig& tls,
      NodeServiceDeps deps);
  ~NodeServer();  // Shutdown(kDefaultShutdownDeadline)
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  // "<listen host>:<bound port>", what clients dial.
  const std::string& address() const { return address_; }

  // Stops accepting calls; calls still running after `deadline` are
  // cancelled. Returns when every call has finished. Idempotent.
  void Shutdown(absl::Duration deadline);

  static constexpr absl::Duration kDefaultShutdownDeadline = absl::Seconds(1);

 private:
  NodeServer(std::unique_ptr<NodeServiceImpl> service,
             std::unique_ptr<grpc::Server> server, std::string address);

  // The server uses the service: it is declared after it, destroyed first.
  std::unique_ptr<NodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  const std::string address_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_NODE_SERVICE_H_
