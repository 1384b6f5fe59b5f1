// ClientCore: what a Client shares with the Regions it opened — the
// coordinator stub, the cluster map (fetched, then watched), one
// NodeConnection per node process, the transports those use, and the caller
// buffers registered for zero-copy transfers.
//
// Held by shared_ptr: the Client owns one reference and every Region it
// opened another, so a Region never points into a destroyed client.
// Thread-safe.
#ifndef MESHPOOL_CLIENT_CLIENT_CORE_H_
#define MESHPOOL_CLIENT_CLIENT_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/buffer_registry.h"
#include "client/kv_protocol.h"
#include "client/meshpool/client.h"
#include "client/node_connection.h"
#include "placement/coordinator_client.h"
#include "placement/placement.h"
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"

namespace meshpool::client_internal {

class ClientCore {
 public:
  // Connects to the coordinator, fetches the cluster map and starts
  // watching it. Unavailable when the coordinator cannot be reached.
  // `fixed_transport` (tests: client_test_peer.h) reaches every node in
  // place of the transport its address names; null in production.
  // REQUIRES: options.coordinator is set.
  static absl::StatusOr<std::shared_ptr<ClientCore>> Start(
      ClientOptions options,
      std::shared_ptr<rdma::Transport> fixed_transport = nullptr);
  // Stops the session keeper and closes this client's sessions (its pins
  // on the nodes go with them).
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  const ClientOptions& options() const { return options_; }
  // `key` in this client's key space (its tenant's; KeyRef is routed by
  // Route). REQUIRES: `key` outlives the ref.
  KeyRef MakeKeyRef(absl::string_view key) const {
    return client_internal::MakeKeyRef(key, key_space_);
  }
  placement::CoordinatorClient& coordinator() { return *coordinator_; }

  // The map this client routes by now (never null after Start).
  std::shared_ptr<const proto::ClusterMap> CurrentMap();
  // Fetches the map from the coordinator now (Unavailable if it cannot).
  absl::Status RefreshMap();

  // The connection to the node process `info` describes, made on first use
  // (lanes connect lazily). Connections to nodes that died or restarted are
  // dropped when a map without them arrives. FailedPrecondition when the
  // node's transport is one this client cannot use.
  absl::StatusOr<std::shared_ptr<NodeConnection>> Connection(
      const proto::NodeInfo& info);
  // The connection to `key`'s home node, setting key.map_epoch and
  // key.oldest_epoch from the map that chose it; Unavailable when no node
  // is alive.
  absl::StatusOr<std::shared_ptr<NodeConnection>> Route(KeyRef& key);

  // Client::RegisterBuffer.
  absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>> Register(
      void* addr, size_t length);
  // The lkey when [data, data + size) lies in a buffer registered with the
  // transport `node` is reached by.
  std::optional<uint32_t> RegisteredLkey(const void* data, size_t size,
                                         const NodeConnection& node) const {
    if (size == 0) return std::nullopt;
    return buffers_->Find(data, size, &node.transport());
  }

  uint64_t NextSequence(uint64_t n = 1) { return sequence_.fetch_add(n); }

  // Tests: behave as if this process died — stop renewing sessions and
  // never close them, so the nodes expire them (and drop their pins).
  void AbandonSessions();

  // Tests: maps the watch delivers are dropped from now on, as if the
  // watch stream were slow; RefreshMap still fetches the current map.
  void IgnoreMapWatch() { map_watch_ignored_ = true; }

  // Calls fn on every connection this client holds now.
  void ForEachConnection(const std::function<void(NodeConnection&)>& fn);

  // How often the keeper looks at sessions (each renews every quarter of
  // its lease).
  static constexpr absl::Duration kKeeperInterval = absl::Milliseconds(250);

 private:
  ClientCore(ClientOptions options,
             std::shared_ptr<rdma::Transport> fixed_transport);
  absl::Status Init();
  // Renews sessions (and opens one where a connection has counters to
  // report) until Stop.
  void KeeperLoop();
  std::vector<std::shared_ptr<NodeConnection>> Connections();
  // Adopts `map` when it is newer (see client_core.cc).
  void OnMap(const proto::ClusterMap& map, bool from_watch = false);
  static std::string ConnKey(const proto::NodeInfo& info);
  // The transport serving `address` (made on first use). FailedPrecondition
  // for a scheme this client cannot use (verbs without a device).
  absl::StatusOr<rdma::Transport*> TransportFor(absl::string_view address);
  absl::StatusOr<rdma::Transport*> VerbsLocked(absl::string_view address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Addresses to reach a node by, best first (same-host shm, then main).
  std::vector<std::string> CandidateAddresses(
      const proto::NodeInfo& info) const;
  // Every transport the live nodes are reached by (RegisterBuffer
  // registers with each).
  std::vector<rdma::Transport*> TransportsInUse();

  const ClientOptions options_;
  const std::shared_ptr<rdma::Transport> fixed_transport_;
  const std::string client_id_;
  const std::shared_ptr<BufferRegistry> buffers_ =
      std::make_shared<BufferRegistry>();
  // Object headers carry it, so it starts at random: two clients' objects
  // of the same key and size never have identical headers (and digest
  // seeds).
  std::atomic<uint64_t> sequence_;
  // Set by Init: what the client presents to the coordinator and nodes.
  auth::ChannelSecurity security_;
  // Set by Init: the key space of this client's tenant (0: none).
  uint64_t key_space_ = 0;
  std::unique_ptr<placement::CoordinatorClient> coordinator_;
  absl::Mutex mu_;
  std::unique_ptr<rdma::Transport> tcp_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<rdma::Transport> uc_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<rdma::Transport> verbs_ ABSL_GUARDED_BY(mu_);
  // After verbs_: its forwarded atomics use verbs_.
  std::unique_ptr<rdma::Transport> shm_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const proto::ClusterMap> map_ ABSL_GUARDED_BY(mu_);
  // Every bucket's home in map_ (set with it).
  std::shared_ptr<const placement::BucketTable> table_ ABSL_GUARDED_BY(mu_);
  // Route's cache: the connection of map_->nodes(i) at [i] once a key was
  // routed there (null before). Cleared with every new map_.
  std::vector<std::shared_ptr<NodeConnection>> routed_ ABSL_GUARDED_BY(mu_);
  uint64_t last_watch_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> map_watch_ignored_{false};  // IgnoreMapWatch
  // Connections go before the transport they use.
  absl::flat_hash_map<std::string, std::shared_ptr<NodeConnection>> connections_
      ABSL_GUARDED_BY(mu_);
  // Stops first: no map callback runs into a half-destroyed core.
  std::unique_ptr<placement::CoordinatorClient::Watch> watch_;
  absl::Mutex keeper_mu_;
  bool keeper_stop_ ABSL_GUARDED_BY(keeper_mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(keeper_mu_) = false;
  std::thread keeper_;  // joined in the destructor
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_CLIENT_CORE_H_
