// Fuzzes a shm client's checks of the hello a node sends when it connects
// (rdma/shm_wire.h): the region table that says which memfd bytes a
// client may touch. Input: one byte (odd: it gives the count of descriptors
// received; even: the count the header asks for), then the message. Export
// i is taken to be (i + 1) MiB long. Checks: failures are InvalidArgument;
// every accepted region lies inside its export, with a distinct rkey.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rdma/shm_wire.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshpool::rdma::internal;
  if (size < 1) return 0;
  const absl::Span<const uint8_t> bytes(data + 1, size - 1);
  size_t fds = data[0];
  if (fds % 2 == 0 && bytes.size() >= sizeof(ShmHelloHeader)) {
    ShmHelloHeader h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    fds = 1 + size_t{h.export_count};
  }
  auto header = DecodeShmHello(bytes, fds);
  if (!header.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(header.status()),
                        header.status().ToString());
    return 0;
  }
  std::vector<uint64_t> export_bytes;
  for (uint32_t i = 0; i < header->export_count; ++i) {
    export_bytes.push_back(uint64_t{i + 1} << 20);
  }
  auto regions = DecodeShmHelloRegions(bytes, *header, export_bytes);
  if (!regions.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(regions.status()),
                        regions.status().ToString());
    return 0;
  }
  std::set<uint32_t> rkeys;
  for (const ShmWireRegion& r : *regions) {
    MESHPOOL_FUZZ_CHECK(rkeys.insert(r.rkey).second && r.rkey != 0,
                        absl::StrCat("rkey ", r.rkey));
    MESHPOOL_FUZZ_CHECK(r.export_index < export_bytes.size(), "export");
    MESHPOOL_FUZZ_CHECK(
        r.length > 0 && r.fd_offset + r.length >= r.fd_offset &&
            r.fd_offset + r.length <= export_bytes[r.export_index],
        absl::StrCat("region of rkey ", r.rkey));
  }
  meshpool::testing::FuzzAccepted();
  return 0;
}
