// Fuzzes what the coordinator checks in a registration and every client
// checks in the map before sizing anything by it (ValidateNodeInfo, which
// includes placement::ValidateNodeLayout and format::ValidateLayout). Input:
// a serialized proto::NodeInfo, as it arrives in RegisterNode. Checks:
// failures are InvalidArgument; an accepted layout has every area inside
// the registered pool region, with no 64-bit overflow, and at least two
// slabs; the capacity placement weighs by is within the pool.
#include <cstddef>
#include <cstdint>

#include "absl/numeric/int128.h"
#include "coordinator/membership.h"
#include "format/layout.h"
#include "placement/placement.h"
#include "proto/meshpool.pb.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using absl::uint128;
  meshpool::proto::NodeInfo info;
  if (!info.ParseFromArray(data, static_cast<int>(size))) return 0;
  constexpr uint64_t kMaxNodeBytes = uint64_t{1} << 40;
  absl::Status status =
      meshpool::coordinator::ValidateNodeInfo(info, kMaxNodeBytes);
  if (!status.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(status), status.ToString());
    return 0;
  }
  const meshpool::format::PoolLayout l = meshpool::placement::NodeLayout(info);
  const uint128 pool = l.pool_bytes;
  MESHPOOL_FUZZ_CHECK(pool <= info.pool().length(), "pool past its region");
  MESHPOOL_FUZZ_CHECK(info.capacity_bytes() <= l.pool_bytes &&
                          info.capacity_bytes() <= kMaxNodeBytes,
                      "capacity");
  MESHPOOL_FUZZ_CHECK(
      uint128(l.index_offset) +
              uint128(l.bucket_count) * meshpool::format::kBucketBytes <=
          pool,
      "index");
  MESHPOOL_FUZZ_CHECK(l.slab_count >= 2 && l.slab_bytes > 0, "slabs");
  MESHPOOL_FUZZ_CHECK(
      uint128(l.slab_area_offset) + uint128(l.slab_count) * l.slab_bytes <=
          pool,
      "slab area");
  MESHPOOL_FUZZ_CHECK(
      uint128(l.slab_meta_offset) +
              uint128(l.slab_count) * meshpool::format::kSlabMetaBytes <=
          pool,
      "slab table");
  MESHPOOL_FUZZ_CHECK(uint128(l.pin_area_offset) +
                              uint128(l.pin_sessions) * l.pins_per_session *
                                  meshpool::format::kPinEntryBytes <=
                          pool,
                      "pin area");
  meshpool::testing::FuzzAccepted();
  return 0;
}
