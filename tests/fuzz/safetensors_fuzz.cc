// Fuzzes the safetensors header parser (client/safetensors.h), which reads
// model files a user downloaded. Input: 8 bytes giving the data buffer's
// length (little-endian, cut to 40 bits), then the header's JSON. Checks:
// failures are InvalidArgument; an accepted header keeps every promise of
// SafetensorsFile (tensors sorted, back to back over the whole buffer, each
// as long as its shape and dtype say, names distinct and non-empty).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "client/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshpool::client_internal;
  if (size < 8) return 0;
  uint64_t data_bytes;
  std::memcpy(&data_bytes, data, 8);
  data_bytes &= (uint64_t{1} << 40) - 1;
  const absl::string_view header(reinterpret_cast<const char*>(data) + 8,
                                 size - 8);
  const uint64_t file_bytes =
      kSafetensorsPrefixBytes + header.size() + data_bytes;
  absl::StatusOr<SafetensorsFile> file =
      ParseSafetensorsHeader("fuzz.safetensors", header, file_bytes);
  if (!file.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(file.status()),
                        file.status().ToString());
    return 0;
  }
  MESHPOOL_FUZZ_CHECK(file->file_bytes == file_bytes, "file_bytes");
  MESHPOOL_FUZZ_CHECK(
      file->data_offset == kSafetensorsPrefixBytes + header.size(),
      "data_offset");
  MESHPOOL_FUZZ_CHECK(file->data_bytes == data_bytes, "data_bytes");
  uint64_t next = 0;
  std::set<std::string> names;
  for (const SafetensorsTensor& t : file->tensors) {
    MESHPOOL_FUZZ_CHECK(!t.name.empty() && names.insert(t.name).second, t.name);
    MESHPOOL_FUZZ_CHECK(t.begin == next && t.end >= t.begin, t.name);
    absl::uint128 elements = 1;
    for (uint64_t d : t.shape) elements *= d;
    MESHPOOL_FUZZ_CHECK(elements * DTypeBytes(t.dtype) == t.bytes(),
                        absl::StrCat(t.name, " length"));
    next = t.end;
  }
  MESHPOOL_FUZZ_CHECK(next == data_bytes, "tensors cover the buffer");
  meshpool::testing::FuzzAccepted();
  return 0;
}
