// meshpool/rdma/rdma.h: the transport contract. One interface shaped like
// verbs, with no verbs types in it; each backend that implements it has its
// own header with its options and factory:
//
//   tcp   (rdma/tcp.h)   - a responder on the memory node emulates one-sided
//                          READ/WRITE/CAS/FAA over TCP, several lanes per
//                          peer, pipelined.
//   verbs (rdma/verbs.h) - libibverbs RC queue pairs: native one-sided
//                          READ/WRITE/CAS/FAA (InfiniBand, RoCE, iWARP,
//                          Soft-RoCE). Only rdma/verbs_* include
//                          <infiniband/verbs.h>. Multi-device hosts:
//                          rdma/device_matrix.h; diagnostics: rdma/devices.h.
//   shm   (rdma/shm.h)   - same host: the node's pool is a memory file the
//   client
//                          maps; READ/WRITE are memcpy, atomics CPU atomics or
//                          forwarded to the node's verbs device.
//   sim   (rdma/sim.h)   - in-process, deterministic (seeded) fabric with
//                          injectable faults, for tests that must reach rare
//                          interleavings.
//   uc    (rdma/uc.h)    - a responder on the memory node over a software-
//                          reliable message channel, for links with only
//                          unreliable messages: UC queue pairs (Thunderbolt
//                          5's SEND/RECV; Soft-RoCE) or UDP.
//
// Callers that must treat backends differently ask Transport::kind(), never
// the name.
//
// Model (the verbs model):
//   * Memory is registered with a Transport -> MemoryRegion: a local handle
//     (lkey) and an exportable RemoteRegion {addr, rkey, length} that peers
//     name in their work requests.
//   * A client Connect()s an Endpoint to a peer (one endpoint = one QP or one
//     TCP lane; uc endpoints to one peer share their transport's link). It
//     Post()s batches of WorkRequests and Poll()s completions.
//   * Every signaled request yields exactly one Completion, in posting order
//     per endpoint; so does every failed one. TCP and sim also complete
//     unsignaled requests, verbs does not: callers rely on signaled ones.
//   * READ copies remote -> local, WRITE local -> remote, CAS/FAA operate on
//     one 8-byte aligned remote word and store its previous value into the
//     8-byte local buffer, as verbs does.
//   * Ordering, on one endpoint (across endpoints there is none):
//       - a READ posted after a WRITE observes that WRITE (the PUT
//         protocol's flush-before-publish relies on this); a READ may also
//         observe requests posted after it (tcp copies a READ's bytes from
//         memory when it sends the response, after executing what followed
//         in the same pipeline), so callers never infer from a READ that a
//         later request has not run;
//       - a request marked `fence` executes only after every READ and
//         atomic posted before it on the endpoint has completed at the peer
//         (its result taken), and never once a request before it failed
//         (it then completes with an error too). A WRITE followed by a READ
//         of its bytes (the flush) is therefore placed, visible to every
//         other endpoint, before a fenced request behind that READ: the
//         one-round-trip PUT posts WRITE, flush READ and a fenced CAS that
//         publishes the object together. What each backend does for it:
//           tcp, uc: the responder executes one connection's requests in
//                    order, each to the end before the next, and stops at
//                    the first refused one (the rest are never executed);
//           shm:     Post executes in order on the caller's thread; a
//                    failed request breaks the endpoint before the next;
//           verbs:   IBV_SEND_FENCE on the request (the NIC holds it until
//                    every earlier READ and atomic has completed); an error
//                    moves the QP to the error state, flushing the rest.
//                    Soft-RoCE (rxe) gets no flag: its responder executes
//                    in order, placing WRITEs first, and its requester's
//                    fence can stall (rdma/verbs_endpoint.cc);
//           sim:     executes in order at Poll; a fenced request behind a
//                    dropped one completes Aborted, unexecuted.
//         Without `fence`, verbs may start an atomic or READ before an
//         earlier READ's response is back.
//
// Thread-safety: Transport and MemoryRegion are thread-safe. An Endpoint is
// used by one thread at a time (callers pool endpoints as lanes).
#ifndef MESHPOOL_RDMA_RDMA_H_
#define MESHPOOL_RDMA_RDMA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
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
  // Runs only after every earlier READ and atomic on the endpoint completed,
  // and never once an earlier request failed (see "Ordering" above).
  bool fence = false;
};
// The requests of one post, built per operation: a KV operation posts a
// handful, so the first kInlineWorkRequests live inline and building them
// allocates nothing.
inline constexpr size_t kInlineWorkRequests = 8;
using WorkRequests = absl::InlinedVector<WorkRequest, kInlineWorkRequests>;

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
// plane and returns its reply (verbs exchanges QPN/GID/PSN this way; tcp
// asks for a connection token, rdma/tcp.h). Sim never calls it.
using Handshake =
    std::function<absl::StatusOr<std::string>(const std::string& request)>;

// Whom a node's authenticated control plane admitted a data-plane caller
// as (node side, set when the caller's handshake is answered): what it may
// touch of memory reserved for a tenant (Transport::ReserveForTenant).
struct DataAccess {
  // Every registered byte: callers of a node without TLS, coordinators,
  // admins without a tenant, the node itself.
  bool unrestricted = true;
  // Otherwise: of reserved memory, only this tenant's ("" = the callers
  // without a tenant); unreserved memory as any caller.
  std::string tenant;

  static DataAccess Unrestricted() { return {}; }
  static DataAccess ForTenant(std::string tenant) {
    return {false, std::move(tenant)};
  }
};

// Which backend a Transport is.
enum class TransportKind : uint8_t { kTcp, kVerbs, kShm, kSim, kUc };
// Its name: the scheme of its addresses ("tcp" for "tcp://...") and what
// handshakes and messages call it.
absl::string_view TransportKindName(TransportKind kind);

// A backend instance in one process. Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportKind kind() const = 0;
  absl::string_view name() const { return TransportKindName(kind()); }

  // Registers [addr, addr+length) for local use and remote access.
  // Errors: InvalidArgument (null/empty), ResourceExhausted.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) = 0;

  // Node side: starts serving one-sided access to this transport's
  // registered memory. `bind` is backend specific ("127.0.0.1:0" for tcp).
  // Returns the address peers pass to Connect (e.g. "tcp://127.0.0.1:40123").
  // FailedPrecondition if already listening.
  virtual absl::StatusOr<std::string> Listen(absl::string_view bind) = 0;

  // Node side: answers a client's Handshake request; what the connection
  // it sets up may touch is `access` (on backends that enforce
  // reservations). Default: Unimplemented.
  virtual absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request, const DataAccess& access) {
    return absl::UnimplementedError("transport needs no handshake");
  }

  // Node side: reserves [addr, addr+length) of registered memory for
  // `tenant` until EndReservation(addr) or another reservation over those
  // bytes (which takes them over; what it does not cover stays reserved as
  // it was): a request that touches it from a connection admitted for
  // another tenant is refused (PermissionDenied at the client) before any
  // byte moves. Enforced by tcp and uc, whose responders see every request
  // (enforces_reservations()); verbs, shm and sim accept and ignore it
  // (their peers reach the memory without the node's CPU; docs/security.md
  // says what each transport isolates). Errors: InvalidArgument (empty or
  // wrapping range).
  virtual absl::Status ReserveForTenant(const void* addr, size_t length,
                                        absl::string_view tenant) {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError(
          "ReserveForTenant needs a non-null address and a non-zero length");
    }
    return absl::OkStatus();
  }
  virtual void EndReservation(const void* addr) {}
  virtual bool enforces_reservations() const { return false; }

  // Client side: opens one endpoint to `peer_address`. Unavailable when the
  // peer cannot be reached; InvalidArgument for a malformed address.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) = 0;
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
