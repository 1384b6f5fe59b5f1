// meshpool/store/node_service.h: the node's control-plane endpoint, the gRPC
// service meshpool.proto.Node (GrantSlab, ReleaseSlab, Handshake, GetStats).
//
// A thin translation layer: requests go to the SlabManager and the
// Transport, statuses convert with proto/proto.h. It never touches values:
// clients read and write the pool one-sidedly through the transport.
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
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"
#include "store/slab_manager.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace meshpool::store {

class NodeServiceImpl;  // node_service.cc

// What the service serves. Every pointer must outlive the NodeServer.
struct NodeServiceDeps {
  SlabManager* slabs = nullptr;
  rdma::Transport* transport = nullptr;
  uint64_t incarnation = 0;  // GrantSlab requests must name it
  std::function<proto::NodeStats()> stats;
};

// A running gRPC server with the Node service on it.
class NodeServer {
 public:
  // Binds `listen` ("host:port", port 0 picks one) and starts serving.
  // Errors: InvalidArgument (a dependency is missing, or `listen` cannot be
  // bound: in use or not a local address; pick another).
  static absl::StatusOr<std::unique_ptr<NodeServer>> Start(
      absl::string_view listen, NodeServiceDeps deps);
  ~NodeServer();  // Shutdown(kDefaultShutdownDeadline)
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  // "<listen host>:<bound port>", what clients dial.
  const std::string& address() const { return address_; }

  // Stops accepting calls; calls still running after `deadline` are
  // cancelled. Returns when every call has finished. Idempotent.
  void Shutdown(absl::Duration deadline);

  static constexpr absl::Duration kDefaultShutdownDeadline =
      absl::Seconds(1);

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
