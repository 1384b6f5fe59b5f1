// meshpool/rdma/verbs.h: the verbs RC backend (libibverbs): native one-sided
// READ/WRITE/CAS/FAA over InfiniBand, RoCE, iWARP and Soft-RoCE. This header
// names no verbs type; only rdma/verbs_*.cc include <infiniband/verbs.h>.
// Thread-safety: as rdma.h.
//
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
#ifndef MESHPOOL_RDMA_VERBS_H_
#define MESHPOOL_RDMA_VERBS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

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

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_VERBS_H_
