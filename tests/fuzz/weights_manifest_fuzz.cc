// Fuzzes what a reader of a model trusts from the model's region
// (client/weights_manifest.h): the superblock, then the manifest it names.
// Input: 8 bytes giving the region's size (little-endian, cut to 40 bits),
// then the manifest's bytes. The superblock is fuzzed raw (the input's
// first kModelSuperblockEncodedBytes), and then built to name the input's
// manifest, at the region's end, with its true digest, so the manifest
// checks run on every input.
// Checks: failures are DataLoss (FailedPrecondition only for an intact
// superblock of another format version); an accepted superblock encodes back to
// the same bytes; every tensor of an accepted manifest lies inside the region.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/weights_manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace {
uint64_t LoadLe64(absl::string_view bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | static_cast<uint8_t>(bytes[at + static_cast<size_t>(i)]);
  }
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshpool::client_internal;
  if (size < 8) return 0;
  uint64_t region_size;
  std::memcpy(&region_size, data, 8);
  region_size &= (uint64_t{1} << 40) - 1;
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 8,
                               size - 8);

  if (rest.size() >= kModelSuperblockEncodedBytes) {
    const absl::string_view raw = rest.substr(0, kModelSuperblockEncodedBytes);
    absl::StatusOr<ModelSuperblock> sb =
        DecodeSuperblock(raw, region_size, "weights/fuzz");
    if (sb.ok()) {
      MESHPOOL_FUZZ_CHECK(
          EncodeSuperblock(*sb).substr(0, kModelSuperblockEncodedBytes) == raw,
          "superblock round trip");
    } else {
      // An intact superblock of another format version is the one
      // FailedPrecondition; everything else is DataLoss.
      const bool intact = LoadLe64(raw, 40) == XXH3_64bits(raw.data(), 40);
      const uint64_t version = LoadLe64(raw, 8);
      MESHPOOL_FUZZ_CHECK(absl::IsDataLoss(sb.status()) ||
                              (absl::IsFailedPrecondition(sb.status()) &&
                               intact && version != kModelFormatVersion),
                          sb.status().ToString());
    }
  }

  // The manifest ends the region, as a loader writes it.
  const uint64_t need = kModelSuperblockBytes + rest.size();
  if (region_size < need) region_size = need;
  ModelSuperblock made;
  made.manifest_offset = region_size - rest.size();
  made.manifest_length = rest.size();
  made.manifest_digest = XXH3_64bits(rest.data(), rest.size());
  absl::StatusOr<ModelSuperblock> sb =
      DecodeSuperblock(EncodeSuperblock(made), region_size, "weights/fuzz");
  if (!sb.ok()) {
    // Only an empty manifest may be refused here.
    MESHPOOL_FUZZ_CHECK(rest.empty() && absl::IsDataLoss(sb.status()),
                        sb.status().ToString());
    return 0;
  }
  absl::StatusOr<meshpool::proto::WeightManifest> manifest =
      DecodeManifest(rest, *sb, region_size, "weights/fuzz");
  if (!manifest.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsDataLoss(manifest.status()),
                        manifest.status().ToString());
    return 0;
  }
  for (const auto& t : manifest->tensors()) {
    MESHPOOL_FUZZ_CHECK(
        t.offset() <= region_size && t.length() <= region_size - t.offset(),
        absl::StrCat(t.name(), " outside the region"));
    meshpool::TensorInfo info = ToTensorInfo(t, "weights/fuzz");
    MESHPOOL_FUZZ_CHECK(info.length == t.length(), t.name());
  }
  meshpool::testing::FuzzAccepted();
  return 0;
}
