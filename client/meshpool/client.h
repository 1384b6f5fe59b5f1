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
//   NotFound           - no such key (also: its node died and the map
//                        moved it, or memory pressure evicted it).
//   Unavailable        - retryable: a node or the coordinator is
//                        unreachable, or died mid-operation. Retry after a
//                        short wait.
//   ResourceExhausted  - the key's home node is full (everything pinned,
//                        eviction off, or index buckets full).
//   DataLoss           - the object never verified after repeated re-reads.
//   OutOfRange         - Get into a buffer too small for the value.
//
// Thread-safety: a Client is thread-safe; share one per process. Calls from
// many threads proceed in parallel on separate connections (lanes).
//
// Keys: with TLS, a client whose certificate names a tenant reads and
// writes its tenant's keys only (the same name in another tenant is another
// key); see docs/security.md.
//
// Speed: Debian's abseil checks every absl::Mutex acquisition for lock-order
// cycles, about 1,500 instructions of a 4 KiB GET. The meshpool binaries
// and the Python module turn that off; a program of yours can too, once at
// start: absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore).
#ifndef MESHPOOL_CLIENT_H_
#define MESHPOOL_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
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

// Longest key, in bytes. Keys are arbitrary bytes, at least one.
inline constexpr size_t kMaxKeyBytes = 4096;

// Default deadline for one data operation's round trip. Memory nodes keep a
// slab's lease alive longer than this past the client's own deadline, so a
// publish that lands late still lands in a live slab.
inline constexpr absl::Duration kDefaultOpTimeout = absl::Seconds(5);

// ClientOptions::Rdma::busy_poll's default and bound.
inline constexpr absl::Duration kDefaultBusyPoll = absl::Microseconds(20);
inline constexpr absl::Duration kMaxBusyPoll = absl::Milliseconds(10);

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
  // Threads that run batches: the async calls' work, and the per-node
  // parts of a synchronous batch spanning several nodes (1..64).
  int batch_threads = 4;
  // Pins (kv_cache.h) this client may hold at once on each node: the size
  // of its pin table there, 0..16384; 0: the node's default (1 GiB / 64 /
  // 64 KiB = 256 on a 1 GiB node, up to 16384 on 64 GiB). A node short of
  // free entries grants fewer (a power of two, at least 64); a node with
  // none left refuses the session, and pins on it fail ResourceExhausted.
  uint32_t pins_per_node = 0;
  // TLS for the control plane (the coordinator's and the nodes' gRPC
  // services): PEM files of the cluster's CA and of this client's
  // certificate and key; `meshpool certs init DIR` writes DIR/ca.pem,
  // DIR/client.pem and DIR/client.key. Give all three or none. None: the
  // files in the MESHPOOL_TLS_DIR environment variable's directory when it
  // is set (ca.pem, and NAME.pem / NAME.key with NAME from MESHPOOL_TLS_NAME,
  // default "client"), else no TLS. A cluster serving TLS refuses clients
  // without a certificate from its CA.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
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
    // N x N device matrix (DeviceMatrixRow below reads one).
    std::map<std::string, std::string> peer_devices;
    // verbs:// and uc:// nodes: how long a thread waiting for completions
    // polls before it sleeps (0..kMaxBusyPoll; 0: sleep at once). An
    // answer that comes within it saves a wake-up; it costs a core while
    // it lasts.
    absl::Duration busy_poll = kDefaultBusyPoll;
  };
  Rdma rdma;
};

// A host's row of an N x N device matrix (for ClientOptions::Rdma's
// peer_devices; nodes take the same file as --device-matrix): the first
// non-comment line names the hosts, then one line per host: its name and,
// per column, the local device that reaches that host ("-" on the diagonal
// or where there is no link); '#' starts a comment.
//     hosts    mac1      mac2      mac3
//     mac1     -         rdma_en2  rdma_en3
//     mac2     rdma_en2  -         rdma_en4
// Returns `host`'s row as peer host -> device. InvalidArgument (naming the
// line) when malformed; NotFound when `host` has no row.
absl::StatusOr<std::map<std::string, std::string>> DeviceMatrixRow(
    absl::string_view matrix_text, absl::string_view host);

// KV-cache counters: what a client counted against the nodes (its own view:
// a node's CPU never sees a GET or PUT), and, per node, the sum of what
// every client reported to it.
struct KvStats {
  uint64_t hits = 0;       // GET keys that found a value
  uint64_t misses = 0;     // GET keys that found none
  uint64_t puts = 0;       // values stored
  uint64_t bytes_in = 0;   // value bytes written into nodes
  uint64_t bytes_out = 0;  // value bytes read from nodes
  uint64_t pins = 0;       // pins that held (Pin, PrefixMatch)
};

// One client session on a node, as the node reports it.
struct SessionStatus {
  std::string client_id;
  KvStats stats;
  uint64_t pinned_objects = 0;
  uint64_t pinned_bytes = 0;
};

// One node as the client sees it (for `meshpool stat`).
struct NodeStatus {
  std::string node_id;
  bool alive = false;
  std::string control_address;
  std::string transport_address;
  std::string metrics_address;  // "http://host:port/metrics"; empty: none
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t objects = 0;
  uint64_t slabs_total = 0;
  uint64_t slabs_free = 0;
  uint64_t slabs_reclaimed = 0;  // freed for reuse since the node started
  uint64_t slabs_region = 0;     // held by regions (hard-pinned)
  uint64_t slabs_evicted = 0;    // evicted under memory pressure, since start
  uint64_t objects_evicted = 0;  // index entries those evictions removed
  uint64_t pinned_objects = 0;   // pinned now by live sessions
  uint64_t pinned_bytes = 0;
  KvStats clients;                      // summed over every client's reports
  std::vector<SessionStatus> sessions;  // clients with a session now
  std::string error;  // why fresh stats could not be fetched, if so
};

struct ClusterStatus {
  uint64_t epoch = 0;
  std::vector<NodeStatus> nodes;
};

// An asynchronous batch: the Async calls return at once with one of these;
// the batch completes in the background. Poll done(), Wait(), or pass a
// callback. Results are valid once done() is true.
// Thread-safe. Destroying a handle does not cancel the batch (the client
// finishes it; its buffers must stay valid until then).
class BatchHandle {
 public:
  virtual ~BatchHandle() = default;
  virtual bool done() const = 0;
  virtual void Wait() const = 0;
  // False when `timeout` passed first.
  virtual bool WaitFor(absl::Duration timeout) const = 0;
  // One status per key, in order. REQUIRES: done(), or inside the
  // batch's callback.
  virtual const std::vector<absl::Status>& statuses() const = 0;
  // GET: each value's length (0 where the status is not OK); PUT: the
  // value sizes stored. REQUIRES: as statuses().
  virtual const std::vector<size_t>& lengths() const = 0;
};
// Runs once, on a client thread, when every key of the batch has its
// result: statuses() and lengths() are final and may be read. done() turns
// true (and waiters wake) only after it returns, so a waiter may free what
// the callback uses; do not Wait() on the batch inside its own callback. It
// must not block for long (it holds up other completions) and may start
// new batches.
using BatchCallback = std::function<void(const BatchHandle&)>;

class Client {
 public:
  // Fetches the cluster map and starts watching it.
  // Unavailable: the coordinator cannot be reached (start it with
  // `meshpool coordinator` or `meshpool up`, or fix --coordinator).
  // InvalidArgument: no coordinator given and MESHPOOL_COORDINATOR unset.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
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
  // Registers [addr, addr + length) with every transport the cluster's
  // live nodes are reached by (verbs, tcp, or shared memory for nodes on
  // this host; a node that joins later over another transport gets staged
  // transfers). Afterwards, batched puts and gets whose values or output
  // buffers lie inside it move them straight between this memory and the
  // nodes' pools at any size; single-key Put and Get do so for values of at
  // least 64 KiB (a Get then takes one more round trip: header first).
  // Over tcp, batched gets of values under 64 KiB are staged (one request
  // instead of three). InvalidArgument for a null or empty range.
  // REQUIRES: registered ranges do not overlap.
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

  // Batched forms: one status per key, in order. Each node's keys are
  // posted together (one doorbell per phase: a batch of new keys is two
  // round trips, a batch GET one or two), and the nodes are served in
  // parallel. Values and output buffers inside memory registered with
  // RegisterBuffer move with no staging copy at any size. REQUIRES:
  // keys.size() == values.size() (resp. outs.size()); a mismatch yields
  // InvalidArgument for every key.
  std::vector<absl::Status> BatchPut(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> values);
  std::vector<absl::StatusOr<size_t>> BatchGet(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);
  std::vector<absl::StatusOr<bool>> BatchExists(
      absl::Span<const absl::string_view> keys);

  // Asynchronous BatchPut / BatchGet: return at once; the per-node parts
  // run in parallel on client threads, each node's phases posted as one
  // batch (one doorbell). Keys are copied; `values` / `outs` must stay
  // valid (and `outs` untouched) until the handle is done. Statuses as for
  // BatchPut / BatchGet. Batches complete in any order.
  std::unique_ptr<BatchHandle> BatchPutAsync(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> values,
      BatchCallback on_done = nullptr);
  std::unique_ptr<BatchHandle> BatchGetAsync(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs, BatchCallback on_done = nullptr);

  // The cluster map with fresh per-node statistics (a control-plane call per
  // node; for tools, not the data path).
  absl::StatusOr<ClusterStatus> Status();

  // Epoch of the cluster map this client currently uses.
  uint64_t map_epoch() const;

 private:
  class Impl;
  friend class ClientAccess;    // <meshpool/kv_cache.h>, <meshpool/region.h>
  friend class ClientTestPeer;  // tests: client/client_test_peer.h
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_H_
