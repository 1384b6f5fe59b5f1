// meshpool/rdma: the transport. One interface shaped like verbs, with no verbs
// types in it, and the backends that implement it:
//
//   tcp  - a responder on the memory node emulates one-sided READ/WRITE/CAS/FAA
//          over TCP, several lanes (connections) per peer, pipelined.
//   sim  - in-process, deterministic (seeded) fabric with injectable faults,
//          for tests that must reach rare interleavings.
//   verbs - libibverbs RC queue pairs: native one-sided READ/WRITE/CAS/FAA
//          (InfiniBand, RoCE, iWARP, Soft-RoCE). Only rdma/verbs_* include
//          <infiniband/verbs.h>.
//   shm  - same host: the node's pool is a memfd the client maps; READ/WRITE
//          are memcpy, atomics CPU atomics or forwarded to the node's verbs
//          device (see "Shared-memory backend" below).
//   (the Thunderbolt UC profile arrives later behind the same interface.)
//
// Model (the verbs model):
//   * Memory is registered with a Transport -> MemoryRegion: a local handle
//     (lkey) and an exportable RemoteRegion {addr, rkey, length} that peers
//     name in their work requests.
//   * A client Connect()s an Endpoint to a peer (one endpoint = one QP or one
//     TCP lane). It Post()s batches of WorkRequests and Poll()s completions.
//   * Every signaled request yields exactly one Completion, in posting order
//     per endpoint; so does every failed one. TCP and sim also complete
//     unsignaled requests, verbs does not: callers rely on signaled ones.
//   * READ copies remote -> local, WRITE local -> remote, CAS/FAA operate on
//     one 8-byte aligned remote word and store its previous value into the
//     8-byte local buffer, as verbs does.
//   * Ordering: on one endpoint, a READ posted after a WRITE observes that
//     WRITE (the PUT protocol's flush-before-publish relies on this). Across
//     endpoints there is no ordering.
//
// Thread-safety: Transport and MemoryRegion are thread-safe. An Endpoint is
// used by one thread at a time (callers pool endpoints as lanes).
#ifndef MESHPOOL_RDMA_RDMA_H_
#define MESHPOOL_RDMA_RDMA_H_

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

namespace meshpool::rdma {

// Largest single READ/WRITE; bigger transfers are split by the caller.
inline constexpr uint32_t kMaxTransferBytes = 1u << 30;
// Most work requests one Post() accepts (one doorbell).
inline constexpr size_t kMaxBatch = 512;
// Most work requests posted on one endpoint and not yet polled (a verbs send
// queue's depth). Responders rely on it to bound what one connection can
// make them hold.
inline constexpr size_t kMaxOutstanding = 2 * kMaxBatch;
static_assert(kMaxOutstanding >= kMaxBatch);
// Atomics operate on this many bytes, aligned to it.
inline constexpr uint32_t kAtomicBytes = 8;
static_assert(kMaxTransferBytes % kAtomicBytes == 0);

// What a peer needs to name registered memory in its work requests.
struct RemoteRegion {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
};

enum class Opcode : uint8_t {
  kRead = 1,
  kWrite = 2,
  kCompareSwap = 3,
  kFetchAdd = 4,
};
absl::string_view OpcodeName(Opcode op);

struct WorkRequest {
  uint64_t wr_id = 0;  // echoed in the completion
  Opcode opcode = Opcode::kRead;
  void* local = nullptr;  // READ: destination; WRITE: source;
                          // CAS/FAA: receives the old 8-byte value
  uint32_t length = 0;    // bytes; must be kAtomicBytes for CAS/FAA
  uint32_t lkey = 0;      // of the MemoryRegion holding `local` (0 when
                          // the backend needs none, e.g. tcp/sim)
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // CAS: expected value; FAA: addend
  uint64_t swap = 0;         // CAS: new value
  bool signaled = true;
};

struct Completion {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kRead;
  // OK, or: PermissionDenied (bad rkey / out of bounds at the responder; the
  // endpoint is closed after it), Unavailable (peer gone, endpoint broken:
  // reconnect and retry), DeadlineExceeded (never came back).
  absl::Status status;
};

// A registration. Deregisters on destruction.
// REQUIRES: destroyed only after every work request naming it completed.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  void* addr() const { return addr_; }
  size_t length() const { return length_; }
  uint32_t lkey() const { return lkey_; }
  RemoteRegion remote() const {
    return {reinterpret_cast<uint64_t>(addr_), rkey_, length_};
  }

 protected:
  MemoryRegion(void* addr, size_t length, uint32_t lkey, uint32_t rkey)
      : addr_(addr), length_(length), lkey_(lkey), rkey_(rkey) {}

 private:
  void* addr_;
  size_t length_;
  uint32_t lkey_;
  uint32_t rkey_;
};

// One connection to a peer (a QP, a TCP lane). Not thread-safe.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // Posts `batch` as one unit. Returns InvalidArgument for a malformed request
  // (nothing is posted then), ResourceExhausted when more than
  // kMaxOutstanding requests would be outstanding (poll first), Unavailable
  // when the endpoint is broken (drop it and Connect() again). REQUIRES:
  // batch.size() <= kMaxBatch; local buffers stay valid until their
  // completions are polled.
  virtual absl::Status Post(absl::Span<const WorkRequest> batch) = 0;

  // Waits up to `timeout` for completions and writes up to out.size() of
  // them. Returns how many (0 on timeout). Unavailable when broken.
  virtual absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                                      absl::Duration timeout) = 0;

  // False once the endpoint has failed; it never recovers.
  virtual bool healthy() const = 0;
};

// Carries an opaque connection request to the peer node over the control
// plane and returns its reply (verbs exchanges QPN/GID/PSN this way). TCP and
// sim never call it.
using Handshake =
    std::function<absl::StatusOr<std::string>(const std::string& request)>;

// A backend instance in one process. Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual absl::string_view name() const = 0;  // "tcp", "sim", "shm"

  // Registers [addr, addr+length) for local use and remote access.
  // Errors: InvalidArgument (null/empty), ResourceExhausted.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) = 0;

  // Node side: starts serving one-sided access to this transport's
  // registered memory. `bind` is backend specific ("127.0.0.1:0" for tcp).
  // Returns the address peers pass to Connect (e.g. "tcp://127.0.0.1:40123").
  // FailedPrecondition if already listening.
  virtual absl::StatusOr<std::string> Listen(absl::string_view bind) = 0;

  // Node side: answers a client's Handshake request. Default: Unimplemented.
  virtual absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request) {
    return absl::UnimplementedError("transport needs no handshake");
  }

  // Client side: opens one endpoint to `peer_address`. Unavailable when the
  // peer cannot be reached; InvalidArgument for a malformed address.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) = 0;
};

// ---- TCP backend ----------------------------------------------------------
struct TcpOptions {
  // Responder: the most bytes a single request may carry or ask for.
  uint32_t max_request_bytes = kMaxTransferBytes;
  // Client: how long Connect waits for the TCP handshake.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Client: a Post whose sending stalls this long (peer hung, link black-
  // holed) breaks the endpoint with Unavailable instead of blocking.
  absl::Duration send_timeout = absl::Seconds(10);
};
absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(
    const TcpOptions& options = {});

// ---- Verbs RC backend (libibverbs) ----------------------------------------
// Addresses are "verbs://NAME", NAME being the node's VerbsOptions.self_name;
// Listen() ignores `bind` and returns that address. Connecting exchanges QP
// number, PSN, GID, LID and MTU through the Handshake callback (the node's
// gRPC service); no rdma_cm. Every Connect() makes one RC QP with its own
// CQ. Memory is registered on every device the transport opened, split into
// MRs no larger than the device's max_mr_size (registered in parallel); the
// lkey/rkey a MemoryRegion reports are transport-wide handles that endpoints
// translate to the device's keys, so callers never see per-device keys.
// Completions: only signaled requests complete (errors always do); the
// endpoint signals selectively underneath. Local buffers must lie in a
// registration of the connecting transport, named by its lkey (else Post
// is InvalidArgument); a remote range outside the node's regions as of the
// handshake completes PermissionDenied without reaching the wire.
// A node registers all memory it serves before Listen(); the handshake
// reply carries its region table.
struct VerbsOptions {
  // Devices to open, by name ("rxe0", "mlx5_0"). Empty: every device with an
  // active port. The first is the default for peers not in peer_devices.
  std::vector<std::string> devices;
  uint8_t port = 1;
  // GID table index; -1 picks the port's first RoCE v2 IPv4-mapped GID, else
  // index 0 (InfiniBand).
  int gid_index = -1;
  // This host's name: the node's address, the client's name in handshakes,
  // and its row in a device matrix. Empty: the host name.
  std::string self_name;
  // Which local device reaches which peer (by the peer's self_name): one
  // row of the N x N device matrix (see ParseDeviceMatrix).
  std::map<std::string, std::string> peer_devices;
  // Client: spin this long on a CQ before sleeping on its completion channel
  // (keep pollers <= cores: spinning beyond that costs milliseconds).
  absl::Duration busy_poll = absl::Microseconds(20);
  // Node: most QPs served at once; the oldest is destroyed beyond this (its
  // client sees Unavailable and reconnects).
  size_t max_peer_qps = 1024;
  // Tests: caps every MR below the device's max_mr_size (rounded down to
  // 4 KiB pages), so small regions split into several MRs. 0: no cap.
  uint64_t max_mr_bytes = 0;
};

// Opens the devices and a protection domain on each. NotFound when a named
// device does not exist or none has an active port (run `meshpool doctor`);
// FailedPrecondition for a port that is down or a GID index that is empty.
absl::StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(
    VerbsOptions options);

// Parses a device matrix: the first non-comment line names the hosts, then
// one line per host: its name and, per column, the device that reaches that
// host ("-" on the diagonal or where no link exists). '#' starts a comment.
// Returns `self`'s row as peer -> device. InvalidArgument (with the line)
// when malformed; NotFound when `self` has no row.
//     hosts    mac1      mac2      mac3
//     mac1     -         rdma_en2  rdma_en3
//     mac2     rdma_en2  -         rdma_en4
absl::StatusOr<std::map<std::string, std::string>> ParseDeviceMatrix(
    absl::string_view text, absl::string_view self);

// What `meshpool doctor` reports about this host's RDMA devices.
struct RdmaGidInfo {
  int index = 0;
  std::string gid;     // "fe80::...", "::ffff:10.0.0.1"
  std::string type;    // "IB/RoCE v1", "RoCE v2"
  std::string netdev;  // the network device it belongs to, if any
};
struct RdmaPortInfo {
  int port = 1;
  std::string state;  // "ACTIVE", "DOWN", ...
  bool active = false;
  std::string link_layer;         // "InfiniBand", "Ethernet"
  int active_mtu = 0;             // bytes
  std::vector<RdmaGidInfo> gids;  // non-empty entries only
};
struct RdmaDeviceInfo {
  std::string name;
  std::string transport;  // "InfiniBand", "iWARP", ...
  uint64_t max_mr_size = 0;
  int max_qp_rd_atom = 0;
  int max_qp_wr = 0;
  int max_inline_data = 0;  // probed by creating a QP; 0 if that failed
  bool atomics = false;     // device supports RDMA CAS/FAA
  std::vector<RdmaPortInfo> ports;
};
// Lists every RDMA device. An empty list (not an error) when there are none;
// Unavailable when libibverbs itself fails.
absl::StatusOr<std::vector<RdmaDeviceInfo>> ListRdmaDevices();

// ---- Shared-memory backend (same host) ------------------------------------
// For a client on the same host as its memory node: the node's pool is a
// memfd (store::Pool created shared) that the client maps MAP_SHARED, so
// READ/WRITE are a memcpy in the client's own thread: no socket, no kernel,
// and no work for the node's CPU per operation. Requests are still checked
// against the regions the node registered (rkey, bounds; deregistration
// takes effect at once through a control page the node shares read-only).
//
// Addresses: "shm://<socket path>[?host=<HostIdentity>][&atomics=<address>]"
// (ShmAddress). The node listens on a unix-domain socket at that path; a
// client connecting receives the region table and the memfds (SCM_RIGHTS),
// maps each memfd once per transport (shared by that transport's endpoints,
// unmapped with the last), and keeps the connection open: its hang-up says
// the node died. Socket file permissions (ShmOptions.socket_mode) decide who
// may map the pool.
//   Listen(bind): `bind` is an absolute socket path, or empty for
//     $XDG_RUNTIME_DIR (else /tmp) /meshpool-<pid>-<n>.sock; a dead node's
//     stale socket file there is replaced, anything else is AlreadyExists;
//     the file is removed when the transport is destroyed. Returns the
//     address to advertise, with host= and atomics= filled in.
//   Connect: InvalidArgument (malformed address), FailedPrecondition (the
//     address names another host identity, or atomics= without
//     atomics_transport, or the node speaks another version), PermissionDenied
//     (socket permissions), Unavailable (no node listens there). The
//     handshake is only used to connect the atomics endpoint.
//
// Endpoints execute every request inside Post(), in posting order, and queue
// its completion (unsignaled ones too, as tcp and sim); Poll() only hands
// queued completions out and never waits. A bad rkey, a range outside the
// region or a deregistered region completes PermissionDenied and breaks the
// endpoint (later requests of the batch complete Unavailable), as verbs.
// A READ that follows a WRITE on the endpoint is preceded by a full fence,
// so, as at a responder executing in order, every agent sees the WRITE
// before the READ loads (the pin protocol's "WRITE my entry, then READ the
// evicting flag" relies on that); CAS/FAA are sequentially consistent.
//
// Atomics. CAS/FAA must be atomic with every other agent's atomics on the
// same word:
//   * node served by tcp (its responder runs std::atomic_ref on the pool) or
//     by shm alone: the client runs std::atomic_ref on its mapping (the same
//     physical word, lock-free, so atomic across processes);
//   * node served by a verbs device: NIC atomics are not atomic with CPU
//     atomics (DESIGN section 3), so the node advertises
//     "&atomics=verbs://<node>" and the client forwards CAS/FAA to an
//     endpoint of ShmOptions.atomics_transport connected to that address
//     (the handshake passed to Connect is used for it). Post waits for a
//     forwarded run of atomics before executing the next request, so
//     completions and effects stay in posting order; Post then blocks for a
//     round trip on the node's device (at most atomics_timeout, after which
//     the atomics complete DeadlineExceeded and the endpoint breaks).
//     Forwarded requests keep their remote_addr, rkey and lkey: the node
//     must register each exported region with the same rkey on both
//     transports (ShmExport.rkey), and `local` must lie in memory
//     registered with the shm client transport, which registers it with
//     atomics_transport too and reports that registration's lkey.
//
// Liveness: a node that exits cleanly (transport destroyed) sets a flag the
// next Post sees. A node that crashes leaves its pages mapped; Post checks the
// socket for hang-up at most every kShmLivenessCheckMs, so for up to that
// long after a crash requests still "succeed" on the dead node's memory, as
// if they had executed just before it died (nobody will read them again).
// After that the endpoint breaks with Unavailable.
//
// Integration (node and client):
//   node:  Pool::Create(bytes, huge, populate, /*shared=*/true); register the
//          pool with the main transport (tcp or verbs) -> region; create the
//          shm transport with exports = {{pool.data(), pool.size(),
//          pool.fd(), 0, region->remote().rkey}} and, when the main
//          transport is verbs, atomics_address = its Listen() address;
//          shm->RegisterMemory(pool.data(), pool.size()) (same rkey, so one
//          advertised RemoteRegion serves both); advertise both Listen()
//          addresses (shm's already carries ?host=...&atomics=...).
//   client: for a node advertising an shm address with IsLocalShmAddress()
//          true, connect lanes with an shm transport (created with
//          atomics_transport = the client's verbs transport when there is
//          one) and register its buffers with that shm transport; else (or
//          when that Connect fails) use the main address as before.
inline constexpr int kShmLivenessCheckMs = 10;
// Most memfds one node exports, and regions it registers at once.
inline constexpr size_t kMaxShmExports = 16;
inline constexpr size_t kMaxShmRegions = 256;

// Node side: memory [addr, addr+length) is the MAP_SHARED mapping of `fd`
// from byte `offset`. REQUIRES: that is true, and stays true while the
// transport lives.
struct ShmExport {
  void* addr = nullptr;
  uint64_t length = 0;
  int fd = -1;  // a memfd sealed with F_SEAL_SHRINK; the transport
                // keeps a duplicate, the caller keeps its own
  uint64_t offset = 0;
  uint32_t rkey = 0;  // the rkey of a registration of exactly this export
                      // (0: random); pass the main transport's rkey
};

struct ShmOptions {
  // Node side: the shared memory that RegisterMemory accepts. Empty: a
  // client-only transport (RegisterMemory accepts any local memory, Listen
  // is FailedPrecondition).
  std::vector<ShmExport> exports;
  // Node side: appended to Listen's address as "&atomics=": where clients
  // must send CAS/FAA (the node's verbs address). Empty for tcp nodes.
  std::string atomics_address;
  // Node side: permissions of the socket file (0600: only this user).
  uint32_t socket_mode = 0600;
  // Client side: the transport forwarded atomics go through (not owned;
  // REQUIRES: outlives this transport and its endpoints). Connecting to an
  // address with "atomics=" without one is FailedPrecondition.
  Transport* atomics_transport = nullptr;
  // Client side: how long Connect waits for the node's socket and table.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Client side: how long Post waits for forwarded atomics.
  absl::Duration atomics_timeout = absl::Seconds(10);
};

// InvalidArgument for a bad export (fd not a sealed memfd, range beyond the
// fd, overlapping exports, duplicate rkeys, atomics_address set but an export
// without rkey) or option.
absl::StatusOr<std::unique_ptr<Transport>> CreateShmTransport(
    ShmOptions options);

// The parts of an "shm://" address. Parse/Format percent-encode '%', '?',
// '&', '=', '#', spaces and non-printable bytes in each part.
struct ShmAddress {
  std::string path;     // absolute; the unix socket
  std::string host;     // HostIdentity() of the node's host ("": unknown)
  std::string atomics;  // where CAS/FAA go ("": CPU atomics on the mapping)
};
// InvalidArgument when malformed: other scheme, relative or empty path,
// path longer than a unix socket allows, unknown or repeated key, bad escape.
absl::StatusOr<ShmAddress> ParseShmAddress(absl::string_view address);
std::string FormatShmAddress(const ShmAddress& address);

// This host's identity as far as shared memory is concerned: the kernel's
// boot id and this process's mount namespace (same kernel + same mount
// namespace = the socket path names the same socket). "" when /proc cannot
// tell; an empty identity never matches.
std::string HostIdentity();
// True when `address` is a well-formed shm address whose host is
// HostIdentity() (and not empty).
bool IsLocalShmAddress(absl::string_view address);

// ---- Simulated backend ----------------------------------------------------
// Faults a test can inject into the simulated fabric.
struct SimFaults {
  double drop_probability = 0;   // request lost: completes DeadlineExceeded
  double delay_probability = 0;  // request held back, executed later
  uint32_t max_delay_polls = 4;  // how many Poll() rounds a delay lasts
};

// A deterministic in-process fabric. Transports created from it reach each
// other by name ("sim://<name>"). All memory operations execute under one
// fabric lock, in an order chosen by a PRNG seeded with `seed`.
class SimFabric {
 public:
  static std::shared_ptr<SimFabric> Create(uint64_t seed);
  virtual ~SimFabric() = default;
  virtual uint64_t seed() const = 0;
  // A transport whose Listen() makes it reachable as "sim://<name>".
  virtual std::unique_ptr<Transport> CreateTransport(std::string name) = 0;
  virtual void SetFaults(const SimFaults& faults) = 0;
  // Every endpoint to `name` fails (Unavailable) from now on; new Connects
  // are refused; its memory is no longer reachable. Models node death.
  virtual void KillNode(absl::string_view name) = 0;
  // Breaks every endpoint currently open to `name` (QP error); reconnecting
  // works.
  virtual void BreakEndpoints(absl::string_view name) = 0;
  // Test hook: `hook` runs right before each request executes (after its
  // faults were applied), with no fabric lock held, naming the target node
  // and the request. It may change that node's memory, e.g. replace an object
  // exactly between a client's index READ and its object READ. Pass nullptr
  // to remove it. The hook must not Post/Poll on the endpoint being polled.
  virtual void SetBeforeExecute(
      std::function<void(absl::string_view node, const WorkRequest&)> hook) = 0;
};

// Waits until every request of a just-posted batch of `count` requests has
// completed, copying them to `out` (size >= count). The first non-OK status
// among them is returned; DeadlineExceeded if `timeout` passes first (the
// endpoint must then be discarded).
absl::Status PostAndWait(Endpoint& endpoint,
                         absl::Span<const WorkRequest> batch,
                         absl::Span<Completion> out, absl::Duration timeout);

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_RDMA_H_
