// meshpool/rdma/devices.h: this host's RDMA devices, ports and GIDs as
// `meshpool doctor` reports them (read through libibverbs in
// verbs_devices.cc). Thread-safe.
#ifndef MESHPOOL_RDMA_DEVICES_H_
#define MESHPOOL_RDMA_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace meshpool::rdma {

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
  // A UC queue pair could be created (the uc backend's link; all that
  // Apple's RDMA over Thunderbolt offers).
  bool uc_queue_pairs = false;
  std::vector<RdmaPortInfo> ports;
};
// Lists every RDMA device. An empty list (not an error) when there are none;
// Unavailable when libibverbs itself fails.
absl::StatusOr<std::vector<RdmaDeviceInfo>> ListRdmaDevices();

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_DEVICES_H_
