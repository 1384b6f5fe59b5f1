// tests/: a whole cluster in one process — a coordinator, nodes and
// clients — with the data path on the simulated fabric (rdma/sim.h), where
// a test can act exactly between two of a client's one-sided operations.
// Shared by the client tests (KV protocols, KV cache, regions, weights).
//
//   auto cluster = SimCluster::Start(seed);          // coordinator + fabric
//   cluster->AddNode(options);                       // as many as needed
//   std::unique_ptr<Client> c = cluster->Connect("client-a");
//
// Teardown: clients the test holds must go before the cluster (declare the
// cluster member first); the cluster stops its nodes before its
// coordinator, and clears the fabric's hook first.
//
// Thread-compatible: set up from the test's thread; the fabric and the
// nodes are thread-safe once running.
#ifndef MESHPOOL_TESTS_SIM_CLUSTER_H_
#define MESHPOOL_TESTS_SIM_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client_test_peer.h"
#include "coordinator/coordinator.h"
#include "meshpool/client.h"
#include "rdma/sim.h"
#include "store/store.h"

namespace meshpool::testing {

class SimCluster {
 public:
  // A fabric seeded with `seed` (its reordering and timing choices) and a
  // coordinator on loopback gRPC.
  static absl::StatusOr<std::unique_ptr<SimCluster>> Start(
      uint64_t seed, coordinator::CoordinatorOptions options = {}) {
    return Start(rdma::SimFabric::Create(seed), std::move(options));
  }
  // The same on a fabric the caller made (and may have handed to the
  // coordinator's options, e.g. for its repair client).
  static absl::StatusOr<std::unique_ptr<SimCluster>> Start(
      std::shared_ptr<rdma::SimFabric> fabric,
      coordinator::CoordinatorOptions options) {
    auto coordinator = coordinator::Coordinator::Start(std::move(options));
    if (!coordinator.ok()) return coordinator.status();
    return std::unique_ptr<SimCluster>(
        new SimCluster(std::move(fabric), *std::move(coordinator)));
  }

  ~SimCluster() {
    fabric_->SetBeforeExecute(nullptr);
    nodes_.clear();
    coordinator_.reset();
  }
  SimCluster(const SimCluster&) = delete;
  SimCluster& operator=(const SimCluster&) = delete;

  // Starts a node registered with this cluster's coordinator, without huge
  // pages. Its fabric endpoint is `endpoint`, else options.node_id, else
  // "node-<index>". Returns the node (owned by the cluster).
  absl::StatusOr<store::Node*> AddNode(store::NodeOptions options,
                                       std::string endpoint = "") {
    options.coordinator = coordinator_->address();
    options.huge_pages = false;
    if (endpoint.empty()) endpoint = options.node_id;
    if (endpoint.empty()) endpoint = absl::StrCat("node-", nodes_.size());
    auto node = store::Node::Start(options, fabric_->CreateTransport(endpoint));
    if (!node.ok()) return node.status();
    nodes_.push_back(*std::move(node));
    return nodes_.back().get();
  }

  // A client reaching the nodes through the fabric as endpoint `name`.
  // options.coordinator is this cluster's; op_timeout defaults to 2 s (a
  // wedged test fails fast instead of waiting out the default).
  absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& name, ClientOptions options = DefaultClientOptions()) {
    options.coordinator = coordinator_->address();
    return ClientTestPeer::ConnectThrough(options,
                                          fabric_->CreateTransport(name));
  }
  static ClientOptions DefaultClientOptions() {
    ClientOptions options;
    options.op_timeout = absl::Seconds(2);
    return options;
  }

  rdma::SimFabric& fabric() { return *fabric_; }
  coordinator::Coordinator& coordinator() { return *coordinator_; }
  std::string address() const { return coordinator_->address(); }
  store::Node& node(size_t i) { return *nodes_.at(i); }
  size_t node_count() const { return nodes_.size(); }
  // Stops node `i` (as if killed: the coordinator finds out by heartbeats);
  // its index stays taken.
  void StopNode(size_t i) { nodes_.at(i).reset(); }

 private:
  SimCluster(std::shared_ptr<rdma::SimFabric> fabric,
             std::unique_ptr<coordinator::Coordinator> coordinator)
      : fabric_(std::move(fabric)), coordinator_(std::move(coordinator)) {}

  std::shared_ptr<rdma::SimFabric> fabric_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::vector<std::unique_ptr<store::Node>> nodes_;
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_SIM_CLUSTER_H_
