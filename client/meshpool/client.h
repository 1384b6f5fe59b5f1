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
  // Threads that run batches: the async calls' work, and the per-node
  // parts of a synchronous batch spanning several nodes (1..64).
  int batch_threads = 4;
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

// ---- KV cache for LLM inference ------------------------------------------
//
// An inference engine keys a KV-cache block by the tokens that produced it:
// block i's key is a chained hash over the token ids of blocks 0..i, so
// equal prefixes give equal keys and the first differing token changes
// every later key. The chain starts from a namespace (model, parallel
// ranks, tenant salt, block size), so engines serving the same model and
// ranks share blocks and different models never collide.

struct BlockKeyOptions {
  std::string model;     // required: the model's name or checksum
  uint32_t tp_rank = 0;  // tensor-parallel rank / size
  uint32_t tp_size = 1;
  uint32_t pp_rank = 0;  // pipeline-parallel rank / size
  uint32_t pp_size = 1;
  std::string salt;            // per tenant; empty: shared by all tenants
  uint32_t block_tokens = 16;  // tokens per block (1..kMaxBlockTokens)
};
inline constexpr uint32_t kMaxBlockTokens = 1u << 16;

// Derives block keys incrementally as tokens arrive (prefill, then decode).
// Keys are "kv1:" followed by 32 hex digits (XXH3-128 of the previous
// block's hash and this block's token ids, little-endian int32).
// Thread-compatible: one chain per sequence.
class BlockKeyChain {
 public:
  // InvalidArgument for an empty model, a rank not below its size, or a
  // block size of 0 or over kMaxBlockTokens.
  static absl::StatusOr<BlockKeyChain> Create(const BlockKeyOptions& options);

  // Appends `tokens`; returns the keys of the blocks they completed (a
  // partial block waits for more tokens and has no key).
  std::vector<std::string> Append(absl::Span<const int32_t> tokens);
  // Every full block's key so far, in order.
  const std::vector<std::string>& keys() const { return keys_; }
  // Tokens of the partial block not yet keyed.
  size_t pending_tokens() const { return pending_.size(); }

 private:
  BlockKeyChain(uint32_t block_tokens, uint64_t lo, uint64_t hi)
      : block_tokens_(block_tokens), lo_(lo), hi_(hi) {}
  uint32_t block_tokens_;
  uint64_t lo_, hi_;  // the chain's last hash
  std::vector<int32_t> pending_;
  std::vector<std::string> keys_;
};

// The keys of every full block of `tokens` (BlockKeyChain in one call).
absl::StatusOr<std::vector<std::string>> BlockKeys(
    const BlockKeyOptions& options, absl::Span<const int32_t> tokens);

// Pins: a pinned block is never evicted. `ttl` bounds a pin in time;
// kHardPin never expires. Either kind lasts at most as long as the client
// that made it: nodes drop a client's pins one session lease (10 s by
// default) after it stops renewing (crash, exit, partition). A pin holds
// the key's value as it was when pinned: replacing or deleting the key
// ends its protection.
inline constexpr absl::Duration kHardPin = absl::InfiniteDuration();

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

// Stripe size of a region created with RegionOptions.stripe_bytes = 0 (the
// coordinator caps it at the smallest slab of the nodes it places on).
inline constexpr uint64_t kDefaultStripeBytes = uint64_t{4} << 20;
// Longest region name, in bytes.
inline constexpr size_t kMaxRegionNameBytes = 256;

struct RegionOptions {
  // Bytes per stripe: a multiple of 4 KiB, at most the nodes' slab size.
  // 0: kDefaultStripeBytes, capped at the smallest slab.
  uint64_t stripe_bytes = 0;
  // Copies of every stripe, each on a different node (1..8).
  uint32_t replicas = 1;
};

// A region as ListRegions describes it.
struct RegionDescription {
  std::string name;
  uint64_t size = 0;
  uint64_t stripe_bytes = 0;
  uint32_t replicas = 1;
  std::vector<std::string> nodes;  // node ids holding any of its stripes
  absl::Time created;
};

// Regions: named, fixed-size memory striped across the memory nodes (the
// shared-memory face of meshpool; model weights live in them). Stripes are
// placed by the coordinator in proportion to the nodes' free memory, each
// with `replicas` copies on distinct nodes. Region memory is hard-pinned:
// never evicted, never reclaimed until the region is deleted. It starts
// zero-filled. Reads and writes are one-sided, split over stripes and nodes
// and issued in parallel; no control-plane call per operation.
//
// Consistency: a Write is not atomic as a whole (a concurrent Read may see
// part of it); the 8-byte atomics are atomic with each other on the same
// word. With replicas, a Write goes to every live copy and a Read is served
// by the first live copy of each stripe.
//
// Error codes of Region operations:
//   OutOfRange         - offset + length past the region's size.
//   InvalidArgument    - an atomic's offset is not 8-byte aligned.
//   FailedPrecondition - an atomic on a region with more than one replica
//                        (copies would diverge): use replicas = 1.
//   DataLoss           - every node holding some stripe's copies died: the
//                        bytes are gone; delete and recreate the region.
//   Unavailable        - a node failed mid-operation: retry.
//   NotFound           - (Open/Delete/Rename) no region of that name; also
//                        from operations on a Region deleted meanwhile when
//                        the client notices (it may not: see below).
//
// Lifetime: a Region handle stays usable while its Client lives. Deleting a
// region (from any client) while others still read it is the caller's
// race: their reads may return bytes of whatever reuses the memory after a
// grace period. Publish new contents under a new name and RenameRegion
// instead of rewriting a region others read.
//
// Thread-safety: a Region is thread-safe; calls proceed in parallel.
class Region {
 public:
  virtual ~Region() = default;

  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  virtual uint64_t stripe_bytes() const = 0;
  virtual uint32_t replicas() const = 0;

  // Copies [offset, offset + out.size()) into `out`. When `out` lies inside
  // a buffer registered with Client::RegisterBuffer the bytes move straight
  // from the nodes into it; otherwise they are staged.
  virtual absl::Status Read(uint64_t offset, absl::Span<char> out) = 0;

  // Writes `data` at `offset` (every live copy). Registered memory moves
  // without staging, like Read.
  virtual absl::Status Write(uint64_t offset, absl::Span<const char> data) = 0;

  // Checks that every live copy of [offset, offset + data.size()) holds
  // exactly `data`: each node hashes its copies (XXH3-64) and this client
  // compares with the hash of `data`, so nothing is read back over the
  // network (the nodes' CPUs do this work, only when asked). DataLoss
  // naming the stripe and node on a mismatch; otherwise the Read errors.
  // For writers that must know their bytes landed, on every copy.
  virtual absl::Status Verify(uint64_t offset, absl::Span<const char> data) = 0;

  // Atomically: if the 8-byte word at `offset` equals `expected`, set it to
  // `desired`. Returns the old value either way (success: old == expected).
  // Words are host byte order. REQUIRES: offset % 8 == 0.
  virtual absl::StatusOr<uint64_t> CompareAndSwap(uint64_t offset,
                                                  uint64_t expected,
                                                  uint64_t desired) = 0;
  // Atomically adds `delta` to the word at `offset`; returns the old value.
  virtual absl::StatusOr<uint64_t> FetchAdd(uint64_t offset,
                                            uint64_t delta) = 0;
};

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

  // ---- KV cache (see BlockKeyChain, kHardPin, BatchHandle above) ----
  //
  // Memory pressure: nodes evict whole slabs of blocks, oldest first,
  // giving recently read ones a second chance and never evicting pinned
  // blocks or regions; a PUT into a full node waits (within op_timeout)
  // for eviction instead of failing, and fails ResourceExhausted only when
  // everything left is pinned. An evicted key reads as NotFound (a miss).
  // A GET holds a read lease: memory of an evicted or replaced block is
  // reused only after the longest GET may take, so a GET in flight never
  // returns reused bytes.

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

  // How many leading keys are present: the longest prefix of `keys` the
  // pool holds (a later key present after a gap does not count). With a
  // nonzero `pin_ttl` the matched keys are also pinned in the same call
  // (kHardPin: until Unpin), so they are not evicted before the engine
  // reads them; a key whose pin does not hold (it was being evicted) ends
  // the prefix there. Unavailable only when the first key's node cannot
  // be reached (a node failing later in the chain ends the prefix there);
  // InvalidArgument for a bad key.
  absl::StatusOr<size_t> PrefixMatch(
      absl::Span<const absl::string_view> keys,
      absl::Duration pin_ttl = absl::ZeroDuration());

  // Pins each key's current value for `ttl` (kHardPin: until Unpin or this
  // client ends). A client holds at most one pin per key: pinning a key it
  // already pinned moves the pin to the key's current value and keeps the
  // later expiry (a hard pin stays hard). One status per key: NotFound
  // (absent, or being evicted), ResourceExhausted (this client's pin table
  // on that node is full: unpin some; or the node has no free session),
  // InvalidArgument (bad key or ttl <= 0), Unavailable (node unreachable).
  std::vector<absl::Status> Pin(absl::Span<const absl::string_view> keys,
                                absl::Duration ttl);
  // Drops this client's pins of `keys`. NotFound for a key it had not
  // pinned (or whose pin already lapsed).
  std::vector<absl::Status> Unpin(absl::Span<const absl::string_view> keys);

  // What this client counted, in total and per node id.
  struct KvCounters {
    KvStats total;
    std::map<std::string, KvStats> per_node;
  };
  KvCounters KvStatistics() const;

  // Creates a region of `size` bytes (> 0), zero-filled. Errors:
  // InvalidArgument (empty or over-long name, bad stripe size or replica
  // count; the message says what to use), AlreadyExists (the name is
  // taken), ResourceExhausted (the nodes' free memory cannot hold it; it
  // says how much is free), FailedPrecondition (fewer live nodes than
  // replicas), Unavailable (coordinator or a node unreachable: retry; when
  // the coordinator did not answer within 60 s the create may still have
  // completed, which OpenRegion tells).
  absl::StatusOr<std::unique_ptr<Region>> CreateRegion(
      absl::string_view name, uint64_t size, const RegionOptions& options = {});
  // Opens an existing region. NotFound if there is none of that name.
  absl::StatusOr<std::unique_ptr<Region>> OpenRegion(absl::string_view name);
  // Deletes a region and frees its memory on the nodes (after a grace
  // period, so reads in flight finish). NotFound if absent.
  absl::Status DeleteRegion(absl::string_view name);
  // Atomically renames `from` to `to`: a reader opening `to` sees the old
  // region or the new one, never neither (with replace) nor a mix. When `to`
  // exists: AlreadyExists, unless `replace`, which deletes the region `to`
  // named. NotFound when `from` is absent.
  absl::Status RenameRegion(absl::string_view from, absl::string_view to,
                            bool replace = false);
  // Regions whose name starts with `prefix`, sorted by name.
  absl::StatusOr<std::vector<RegionDescription>> ListRegions(
      absl::string_view prefix = "");

  // The cluster map with fresh per-node statistics (a control-plane call per
  // node; for tools, not the data path).
  absl::StatusOr<ClusterStatus> Status();

  // Epoch of the cluster map this client currently uses.
  uint64_t map_epoch() const;

 private:
  class Impl;
  friend class ClientTestPeer;  // tests: client/client_test_peer.h
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_H_
