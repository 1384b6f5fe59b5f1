// Internal to client/: how a model is laid out in its region, shared by the
// loader (weights_load.cc) and the reader (weights.cc).
//
//   region "weights/<model>" =
//     [ superblock: kModelSuperblockBytes | each source file's data buffer,
//       copied whole, at a kModelFileAlign boundary | manifest ]
//
// The superblock (written last) names the manifest's offset, length and
// XXH3-64 and carries its own XXH3-64; the manifest (proto::WeightManifest)
// lists every tensor. A loader writes into a staging region
// "weights-loading/<model>#<id>" and renames it to the model's name when
// done, so a model region whose superblock does not verify is corrupt, not
// partly loaded.
//
// Pure functions; thread-safe.
#ifndef MESHPOOL_CLIENT_WEIGHTS_MANIFEST_H_
#define MESHPOOL_CLIENT_WEIGHTS_MANIFEST_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshpool/weights.h"
#include "proto/weights.pb.h"

namespace meshpool::client_internal {

inline constexpr uint64_t kModelSuperblockBytes = 4096;
// The superblock's encoded bytes (the rest of its 4 KiB is zero).
inline constexpr uint64_t kModelSuperblockEncodedBytes = 48;
// Where each source file's data starts in the region.
inline constexpr uint64_t kModelFileAlign = 4096;
inline constexpr uint32_t kModelFormatVersion = 1;
// A manifest larger than this is refused as corrupt (about 10 M tensors'
// worth, or 30 M chunk digests: 30 TiB of weights).
inline constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
// A running loader bumps the 8-byte counter here, in its staging region's
// superblock area, every kLoadHeartbeatInterval; RemoveModel spares staging
// regions whose counter moves within kLoadLivenessWait (a live load: freeing
// its region under it would let its next writes land in reused memory).
inline constexpr uint64_t kLoadHeartbeatOffset = 2048;
inline constexpr int64_t kLoadHeartbeatIntervalMs = 200;
inline constexpr int64_t kLoadLivenessWaitMs = 1000;
inline constexpr absl::Duration kLoadHeartbeatInterval =
    absl::Milliseconds(kLoadHeartbeatIntervalMs);
inline constexpr absl::Duration kLoadLivenessWait =
    absl::Milliseconds(kLoadLivenessWaitMs);
static_assert(kModelSuperblockEncodedBytes <= kModelSuperblockBytes);
static_assert(kLoadHeartbeatOffset >= kModelSuperblockEncodedBytes &&
              kLoadHeartbeatOffset + 8 <= kModelSuperblockBytes &&
              kLoadHeartbeatOffset % 8 == 0);
static_assert(kLoadLivenessWaitMs >= 3 * kLoadHeartbeatIntervalMs,
              "a live loader beats several times while RemoveModel waits");
static_assert(kModelFileAlign % 8 == 0);

inline constexpr absl::string_view kModelRegionPrefix = "weights/";
inline constexpr absl::string_view kStagingRegionPrefix = "weights-loading/";
// Separates a model name from a staging id; never part of a model name.
inline constexpr char kStagingSeparator = '#';

// InvalidArgument unless 1..kMaxModelNameBytes of letters, digits and
// "._-/:@+=", saying what is wrong.
absl::Status ValidateModelName(absl::string_view model);
std::string ModelRegionName(absl::string_view model);
// Every staging region of `model` starts with this.
std::string StagingRegionPrefix(absl::string_view model);

struct ModelSuperblock {
  uint64_t manifest_offset = 0;
  uint64_t manifest_length = 0;
  uint64_t manifest_digest = 0;  // XXH3-64 of the manifest bytes
};
// kModelSuperblockEncodedBytes bytes.
std::string EncodeSuperblock(const ModelSuperblock& superblock);
// DataLoss (naming `region`) when the bytes are not an intact superblock,
// or name a manifest outside [kModelSuperblockBytes, region_size) or over
// kMaxManifestBytes. FailedPrecondition when an intact superblock carries
// another format version than kModelFormatVersion (upgrade the client or
// reload the model).
absl::StatusOr<ModelSuperblock> DecodeSuperblock(absl::string_view bytes,
                                                 uint64_t region_size,
                                                 absl::string_view region);

// Parses and checks a manifest read from `region` (of `region_size`
// bytes): digest, tensors inside the data area, lengths matching dtype and
// shape, chunk digests counted right, names unique. DataLoss otherwise.
absl::StatusOr<proto::WeightManifest> DecodeManifest(
    absl::string_view bytes, const ModelSuperblock& superblock,
    uint64_t region_size, absl::string_view region);

// The public view of one manifest entry.
// REQUIRES: `tensor` passed DecodeManifest.
TensorInfo ToTensorInfo(const proto::WeightTensor& tensor,
                        absl::string_view region);

// Number of kWeightChunkBytes chunks of a tensor of `length` bytes.
inline uint64_t ChunkCount(uint64_t length) {
  return (length + kWeightChunkBytes - 1) / kWeightChunkBytes;
}

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_WEIGHTS_MANIFEST_H_
