// meshpool/rdma internal: what the shm backend's node and client share.
//
//  * The hello: the one message (shm_socket.h) a node sends each client
//    that connects to its unix socket: ShmHelloHeader, then region_count
//    ShmWireRegion, with SCM_RIGHTS carrying the control page first and
//    then one memory file per export (export_index i is descriptor i + 1).
//  * The refusal: what the node sends instead, with no descriptor, to a
//    peer whose user it does not admit (ShmRefusal).
//  * The control page: a small memory file the node writes and clients map
//    read-only. `closed` turns nonzero when the node's transport is
//    destroyed; slot_rkey[s] holds the rkey of the region in slot s while it
//    is registered and 0 after, so a client refuses a deregistered region at
//    once. Words are accessed with std::atomic_ref (lock-free, so atomic
//    across processes).
//
// Structs travel as-is (same host, same build); magic and version still
// guard against a different binary on the other side.
#ifndef MESHPOOL_RDMA_SHM_WIRE_H_
#define MESHPOOL_RDMA_SHM_WIRE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"

namespace meshpool::rdma::internal {

inline constexpr uint64_t kShmHelloMagic = 0x4f4c4c454853504dull;    // MPSHELLO
inline constexpr uint64_t kShmControlMagic = 0x4c5254434853504dull;  // MPSHCTRL
inline constexpr uint64_t kShmRefusedMagic = 0x45504f4e4853504dull;  // MPSHNOPE
inline constexpr uint32_t kShmWireVersion = 1;

struct ShmHelloHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t export_count;  // memory files after the control page
  uint32_t region_count;  // ShmWireRegion entries that follow
  uint32_t reserved;
};
static_assert(sizeof(ShmHelloHeader) == 24);

struct ShmRefusal {
  uint64_t magic;  // kShmRefusedMagic
  uint32_t uid;    // the peer's user id, as the node's kernel saw it
  uint32_t reserved;
};
static_assert(sizeof(ShmRefusal) < sizeof(ShmHelloHeader),
              "a refusal is told apart from a hello by its length");

struct ShmWireRegion {
  uint64_t addr;  // in the node's address space (what WRs name)
  uint64_t length;
  uint64_t fd_offset;  // where addr lies in its export's memory file
  uint32_t rkey;
  uint16_t export_index;
  uint16_t slot;  // its word in ShmControl::slot_rkey
};
static_assert(sizeof(ShmWireRegion) == 32);

inline constexpr size_t kShmHelloMaxBytes =
    sizeof(ShmHelloHeader) + kMaxShmRegions * sizeof(ShmWireRegion);
// Descriptors one hello carries: the control page and the exports..
inline constexpr size_t kShmHelloMaxFds = 1 + kMaxShmExports;
static_assert(kShmHelloMaxFds <= 253, "SCM_RIGHTS carries at most 253 fds");
static_assert(kMaxShmRegions <= 65536, "slots are 16-bit");

struct ShmControl {
  uint64_t magic;
  uint32_t closed;
  uint32_t reserved;
  uint32_t slot_rkey[kMaxShmRegions];
};
inline constexpr size_t kShmControlBytes = 4096;
static_assert(sizeof(ShmControl) <= kShmControlBytes);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
              "shm atomics rely on lock-free 8-byte atomics across processes");

// A client's checks of a hello, split where it must map the memory files
// between them (stateless; the client wraps the message with the socket's
// path).
//
// The fixed part, against the message (`bytes`) and the `fds_received`:
// magic and version, counts within the limits, the message exactly as long
// as its regions, one descriptor per export plus the control page's.
// InvalidArgument saying which does not hold.
absl::StatusOr<ShmHelloHeader> DecodeShmHello(absl::Span<const uint8_t> bytes,
                                              size_t fds_received);
// The regions of a hello whose header passed DecodeShmHello, against the
// lengths of the exports mapped (`export_bytes`, one per export): a nonzero
// rkey, each at most once, a known export, a slot within kMaxShmRegions, a
// non-empty range that does not wrap and lies inside its export.
// InvalidArgument naming the first region that does not hold.
// REQUIRES: DecodeShmHello(bytes, ...) returned `header`;
// export_bytes.size() == header.export_count.
absl::StatusOr<std::vector<ShmWireRegion>> DecodeShmHelloRegions(
    absl::Span<const uint8_t> bytes, const ShmHelloHeader& header,
    absl::Span<const uint64_t> export_bytes);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SHM_WIRE_H_
