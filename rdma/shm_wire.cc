// The client's checks of a shm hello (shm_wire.h).
#include "rdma/shm_wire.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace meshpool::rdma::internal {

absl::StatusOr<ShmHelloHeader> DecodeShmHello(absl::Span<const uint8_t> bytes,
                                              size_t fds_received) {
  ShmHelloHeader h{};
  if (bytes.size() < sizeof(h)) return absl::InvalidArgumentError("short");
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kShmHelloMagic || h.version != kShmWireVersion) {
    return absl::InvalidArgumentError("magic or version");
  }
  if (h.export_count > kMaxShmExports || h.region_count > kMaxShmRegions ||
      bytes.size() !=
          sizeof(h) + size_t{h.region_count} * sizeof(ShmWireRegion) ||
      fds_received != 1 + size_t{h.export_count}) {
    return absl::InvalidArgumentError("counts");
  }
  return h;
}

absl::StatusOr<std::vector<ShmWireRegion>> DecodeShmHelloRegions(
    absl::Span<const uint8_t> bytes, const ShmHelloHeader& header,
    absl::Span<const uint64_t> export_bytes) {
  std::vector<ShmWireRegion> regions(header.region_count);
  absl::flat_hash_set<uint32_t> rkeys;
  for (uint32_t i = 0; i < header.region_count; ++i) {
    ShmWireRegion& r = regions[i];
    std::memcpy(&r, bytes.data() + sizeof(header) + i * sizeof(r), sizeof(r));
    if (r.rkey == 0 || r.export_index >= export_bytes.size() ||
        r.slot >= kMaxShmRegions || r.length == 0 ||
        r.addr + r.length < r.addr) {
      return absl::InvalidArgumentError(absl::StrCat("region ", i));
    }
    const uint64_t size = export_bytes[r.export_index];
    if (r.fd_offset > size || r.length > size - r.fd_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("region ", i, " passes its memory file"));
    }
    if (!rkeys.insert(r.rkey).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("rkey ", r.rkey, " twice"));
    }
  }
  return regions;
}

}  // namespace meshpool::rdma::internal
