// Fuzzes the device-matrix parser (rdma/device_matrix.h), which reads the
// operator's N x N table of which device reaches which host. Input: the
// host to look up, a newline, then the matrix text. Checks: failures are
// InvalidArgument or NotFound; an accepted row names no device "-", no
// empty peer or device, and not `self` as its own peer.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rdma/device_matrix.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == absl::string_view::npos) return 0;
  const absl::string_view self = input.substr(0, newline);
  const absl::string_view text = input.substr(newline + 1);
  auto row = meshpool::rdma::ParseDeviceMatrix(text, self);
  if (!row.ok()) {
    MESHPOOL_FUZZ_CHECK(
        absl::IsInvalidArgument(row.status()) || absl::IsNotFound(row.status()),
        row.status().ToString());
    return 0;
  }
  for (const auto& [peer, device] : *row) {
    MESHPOOL_FUZZ_CHECK(!peer.empty() && !device.empty(), peer);
    MESHPOOL_FUZZ_CHECK(device != "-", peer);
    MESHPOOL_FUZZ_CHECK(peer != self, peer);
  }
  meshpool::testing::FuzzAccepted();
  return 0;
}
