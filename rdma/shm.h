// meshpool/rdma/shm.h: the shared-memory backend (same host). Thread-safety:
// as rdma.h; the address helpers are pure.
//
// For a client on the same host as its memory node: the node's pool is a
// memory file (common/memory_file.h; store::Pool created shared) that the
// client maps MAP_SHARED, so
// READ/WRITE are a memcpy in the client's own thread: no socket, no kernel,
// and no work for the node's CPU per operation. Requests are still checked
// against the regions the node registered (rkey, bounds; deregistration
// takes effect at once through a control page the node shares read-only).
//
// Addresses: "shm://<socket path>[?host=<HostIdentity>][&atomics=<address>]"
// (ShmAddress). The node listens on a unix-domain socket at that path; a
// client connecting receives the region table and the memory files'
// descriptors (SCM_RIGHTS), maps each once per transport (shared by that
// transport's endpoints,
// unmapped with the last), and keeps the connection open: its hang-up says
// the node died. Socket file permissions (ShmOptions.socket_mode) decide who
// may connect, and the peer's user id (ShmOptions.allowed_uids) who is
// handed the pool.
//   Listen(bind): `bind` is an absolute socket path, or empty for
//     $XDG_RUNTIME_DIR (else /tmp) /meshpool-<pid>-<n>.sock; a dead node's
//     stale socket file there is replaced, anything else is AlreadyExists;
//     the file is removed when the transport is destroyed. Returns the
//     address to advertise, with host= and atomics= filled in.
//   Connect: InvalidArgument (malformed address), FailedPrecondition (the
//     address names another host identity, or atomics= without
//     atomics_transport, or the node speaks another version), PermissionDenied
//     (socket permissions, or the node's allowed_uids leave this user out),
//     Unavailable (no node listens there). The
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
#ifndef MESHPOOL_RDMA_SHM_H_
#define MESHPOOL_RDMA_SHM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

inline constexpr int kShmLivenessCheckMs = 10;
// Most memory files one node exports, and regions it registers at once.
inline constexpr size_t kMaxShmExports = 16;
inline constexpr size_t kMaxShmRegions = 256;
// Most user ids ShmOptions.allowed_uids names.
inline constexpr size_t kMaxShmAllowedUids = 64;

// Node side: memory [addr, addr+length) is the MAP_SHARED mapping of `fd`
// from byte `offset`. REQUIRES: that is true, and stays true while the
// transport lives.
struct ShmExport {
  void* addr = nullptr;
  uint64_t length = 0;
  int fd = -1;  // a memory file whose size cannot change
                // (CreateMemoryFile); the transport keeps a duplicate, the
                // caller keeps its own
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
  // Node side: the user ids whose processes are handed the pool, checked
  // on each connection by the kernel's record of the peer (PeerUid);
  // others are refused (their Connect: PermissionDenied). Empty: this
  // process's effective user and root (who can read any process's memory
  // anyway). At most kMaxShmAllowedUids.
  std::vector<uint32_t> allowed_uids;
  // Client side: the transport forwarded atomics go through (not owned;
  // REQUIRES: outlives this transport and its endpoints). Connecting to an
  // address with "atomics=" without one is FailedPrecondition.
  Transport* atomics_transport = nullptr;
  // Client side: how long Connect waits for the node's socket and table.
  absl::Duration connect_timeout = absl::Seconds(3);
  // Client side: how long Post waits for forwarded atomics.
  absl::Duration atomics_timeout = absl::Seconds(10);
};

// InvalidArgument for a bad export (fd not a fixed-size memory file, range
// beyond the fd, overlapping exports, duplicate rkeys, atomics_address set
// but an export without rkey) or option.
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

// This host's identity as far as shared memory is concerned: on Linux the
// kernel's boot id and this process's mount namespace (same kernel + same
// mount namespace = the socket path names the same socket), on macOS the
// boot session's UUID (shm_host_*.cc). "" when the OS cannot tell; an
// empty identity never matches.
std::string HostIdentity();
// True when `address` is a well-formed shm address whose host is
// HostIdentity() (and not empty).
bool IsLocalShmAddress(absl::string_view address);

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_SHM_H_
