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
  uint64_t slabs_region = 0;     // held by regions (hard-pinned)
  std::string error;  // why fresh stats could not be fetched, if so
};

struct ClusterStatus {
  uint64_t epoch = 0;
  std::vector<NodeStatus> nodes;
};

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
  virtual absl::Status Write(uint64_t offset,
                             absl::Span<const char> data) = 0;

  // Checks that every live copy of [offset, offset + data.size()) holds
  // exactly `data`: each node hashes its copies (XXH3-64) and this client
  // compares with the hash of `data`, so nothing is read back over the
  // network (the nodes' CPUs do this work, only when asked). DataLoss
  // naming the stripe and node on a mismatch; otherwise the Read errors.
  // For writers that must know their bytes landed, on every copy.
  virtual absl::Status Verify(uint64_t offset,
                              absl::Span<const char> data) = 0;

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
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_H_
