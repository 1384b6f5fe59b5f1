// <meshpool/client.h>: the meshpool C++ client library.
//
// A Client joins a meshpool cluster through its coordinator, caches the
// cluster map (and watches it for joins and deaths), and then reads and
// writes memory nodes' pools with one-sided operations: no control-plane call
// and no work by the node's CPU per GET or PUT.
//
//   auto client = meshpool::Client::Connect({.coordinator = "127.0.0.1:7000"});
//   if (!client.ok()) return client.status();
//   absl::Status put = (*client)->Put("user:42", "hello");
//   absl::StatusOr<std::string> v = (*client)->Get("user:42");
//
// Error codes:
//   InvalidArgument    - bad key (empty or over kMaxKeyBytes) or value (larger
//                        than the largest object a slab holds).
//   NotFound           - no such key (also: its node died and the map moved it).
//   Unavailable        - retryable: a node or the coordinator is unreachable,
//                        or died mid-operation. Retry after a short wait.
//   ResourceExhausted  - the key's home node is full (pool or index buckets).
//   DataLoss           - the object never verified after repeated re-reads.
//   OutOfRange         - Get into a buffer too small for the value.
//
// Thread-safety: a Client is thread-safe; share one per process. Calls from
// many threads proceed in parallel on separate connections (lanes).
#ifndef MESHPOOL_CLIENT_H_
#define MESHPOOL_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshpool {

namespace rdma {
class Transport;
}

// Longest key, in bytes. Keys are arbitrary bytes, at least one.
inline constexpr size_t kMaxKeyBytes = 4096;

// Default deadline for one data operation's round trip. Memory nodes keep a
// slab's lease alive longer than this past the client's own deadline, so a
// publish that lands late still lands in a live slab.
inline constexpr absl::Duration kDefaultOpTimeout = absl::Seconds(5);

struct ClientOptions {
  // Coordinator "host:port". Empty: the MESHPOOL_COORDINATOR environment
  // variable.
  std::string coordinator;
  // How long Connect and each control-plane call wait.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Deadline for one data operation's round trip. Keep it at or below
  // kDefaultOpTimeout unless the nodes' lease margin is raised to match.
  absl::Duration op_timeout = kDefaultOpTimeout;
  // Re-reads of an object that fails verification before DataLoss.
  int max_verify_retries = 16;
  // RDMA (verbs) settings, used for nodes whose transport address is
  // "verbs://..."; nodes at "tcp://..." addresses are reached over TCP.
  struct Rdma {
    // Devices this client may use ("rxe0", "mlx5_0"). Empty: every device
    // with an active port; the first reaches peers not in peer_devices.
    std::vector<std::string> devices;
    // GID table index; -1: the port's first RoCE v2 IPv4 GID (else 0).
    int gid_index = -1;
    // This host's name in a device matrix (empty: the host name).
    std::string self_name;
    // Which local device reaches which node host: this host's row of the
    // N x N device matrix (meshpool::rdma::ParseDeviceMatrix reads one).
    std::map<std::string, std::string> peer_devices;
  };
  Rdma rdma;
  // Tests: reach every node through this transport (e.g. a simulated
  // fabric) instead of choosing one by the node's address scheme.
  std::shared_ptr<rdma::Transport> transport;
};

// One node as the client sees it (for `meshpool stat`).
struct NodeStatus {
  std::string node_id;
  bool alive = false;
  std::string control_address;
  std::string transport_address;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t objects = 0;
  uint64_t slabs_total = 0;
  uint64_t slabs_free = 0;
  uint64_t slabs_reclaimed = 0;  // freed for reuse since the node started
  std::string error;  // why fresh stats could not be fetched, if so
};

struct ClusterStatus {
  uint64_t epoch = 0;
  std::vector<NodeStatus> nodes;
};

class Client {
 public:
  // Fetches the cluster map and starts watching it.
  // Unavailable: the coordinator cannot be reached (start it with
  // `meshpool coordinator` or `meshpool up`, or fix --coordinator).
  // InvalidArgument: no coordinator given and MESHPOOL_COORDINATOR unset.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A buffer registered for zero-copy transfers; unregisters when destroyed.
  // REQUIRES: destroyed before the Client and after the last operation
  // using it returned.
  class RegisteredBuffer {
   public:
    virtual ~RegisteredBuffer() = default;
    virtual absl::Span<char> span() const = 0;
  };
  // Registers [addr, addr + length) with the transport the cluster's nodes
  // are reached by (verbs or tcp, from their addresses; a registration helps
  // only operations on nodes of that transport). Afterwards, a Put
  // whose value lies inside it and a Get whose output buffer lies inside it
  // move values of at least 64 KiB straight between this memory and the
  // node's pool, with no staging copy (a Get then takes one more round trip:
  // header first, then the value). Smaller values are staged either way.
  // InvalidArgument for a null or empty range. REQUIRES: registered ranges
  // do not overlap.
  absl::StatusOr<std::unique_ptr<RegisteredBuffer>> RegisterBuffer(
      void* addr, size_t length);

  // Stores `value` under `key`, replacing any previous value. Atomic: a
  // concurrent Get sees the old or the new value, never a mix.
  absl::Status Put(absl::string_view key, absl::string_view value);

  // Copies the value into `out` and returns its length. OutOfRange (with
  // the needed size) when `out` is too small. On any error the contents of
  // `out` are unspecified.
  absl::StatusOr<size_t> Get(absl::string_view key, absl::Span<char> out);
  absl::StatusOr<std::string> Get(absl::string_view key);

  // Removes `key`. NotFound if it was absent.
  absl::Status Delete(absl::string_view key);
  absl::StatusOr<bool> Exists(absl::string_view key);

  // Batched forms: one status per key, in order. Requests to the same node
  // are posted together. REQUIRES: keys.size() == values.size() (resp.
  // outs.size()); a mismatch yields InvalidArgument for every key.
  std::vector<absl::Status> BatchPut(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> values);
  std::vector<absl::StatusOr<size_t>> BatchGet(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);
  std::vector<absl::StatusOr<bool>> BatchExists(
      absl::Span<const absl::string_view> keys);

  // The cluster map with fresh per-node statistics (a control-plane call per
  // node; for tools, not the data path).
  absl::StatusOr<ClusterStatus> Status();

  // Epoch of the cluster map this client currently uses.
  uint64_t map_epoch() const;

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_H_
