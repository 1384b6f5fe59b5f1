#include "client/weights_manifest.h"

#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/safetensors.h"
#include "xxhash.h"

namespace meshpool {

uint64_t TensorInfo::rows() const { return shape.empty() ? 1 : shape[0]; }

uint64_t TensorInfo::row_bytes() const {
  uint64_t r = rows();
  return r == 0 ? 0 : length / r;
}

namespace client_internal {

namespace {

constexpr char kSuperblockMagic[8] = {'M', 'P', 'W', 'E', 'I', 'G', 'H', 'T'};

void PutU64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only (x86-64, arm64)
  out.append(b, 8);
}
uint64_t GetU64(absl::string_view in, size_t at) {
  uint64_t v;
  std::memcpy(&v, in.data() + at, 8);
  return v;
}

bool ModelNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
         c == '/' || c == ':' || c == '@' || c == '+' || c == '=';
}

absl::Status Corrupt(absl::string_view region, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(
      "model region ", region, " is corrupt: ", what,
      "; remove it (meshpool weights rm) and load the model again"));
}

}  // namespace

absl::Status ValidateModelName(absl::string_view model) {
  if (model.empty() || model.size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name must be 1 to ", kMaxModelNameBytes,
                     " bytes, got ", model.size()));
  }
  for (char c : model) {
    if (!ModelNameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model name \"", model, "\" has '", std::string(1, c),
                       "': use letters, digits and ._-/:@+="));
    }
  }
  return absl::OkStatus();
}

std::string ModelRegionName(absl::string_view model) {
  return absl::StrCat(kModelRegionPrefix, model);
}

std::string StagingRegionPrefix(absl::string_view model) {
  return absl::StrCat(kStagingRegionPrefix, model,
                      std::string(1, kStagingSeparator));
}

std::string EncodeSuperblock(const ModelSuperblock& superblock) {
  std::string out(kSuperblockMagic, sizeof(kSuperblockMagic));
  PutU64(out, kModelFormatVersion);
  PutU64(out, superblock.manifest_offset);
  PutU64(out, superblock.manifest_length);
  PutU64(out, superblock.manifest_digest);
  PutU64(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

absl::StatusOr<ModelSuperblock> DecodeSuperblock(absl::string_view bytes,
                                                 uint64_t region_size,
                                                 absl::string_view region) {
  static_assert(kModelSuperblockEncodedBytes == 6 * 8);
  if (bytes.size() < kModelSuperblockEncodedBytes ||
      std::memcmp(bytes.data(), kSuperblockMagic, 8) != 0) {
    return Corrupt(region,
                   "no model superblock (not a model region, or a "
                   "load that never finished)");
  }
  if (GetU64(bytes, 40) != XXH3_64bits(bytes.data(), 40)) {
    return Corrupt(region, "superblock checksum mismatch");
  }
  if (GetU64(bytes, 8) != kModelFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model region ", region, " has format version ", GetU64(bytes, 8),
        "; this client reads version ", kModelFormatVersion,
        ": upgrade the client or reload the model"));
  }
  ModelSuperblock sb;
  sb.manifest_offset = GetU64(bytes, 16);
  sb.manifest_length = GetU64(bytes, 24);
  sb.manifest_digest = GetU64(bytes, 32);
  if (sb.manifest_offset < kModelSuperblockBytes ||
      sb.manifest_offset > region_size ||
      sb.manifest_length > region_size - sb.manifest_offset ||
      sb.manifest_length > kMaxManifestBytes) {
    return Corrupt(
        region, absl::StrCat("manifest at ", sb.manifest_offset, " + ",
                             sb.manifest_length, " lies outside the region of ",
                             region_size, " bytes"));
  }
  return sb;
}

absl::StatusOr<proto::WeightManifest> DecodeManifest(
    absl::string_view bytes, const ModelSuperblock& superblock,
    uint64_t region_size, absl::string_view region) {
  (void)region_size;
  if (bytes.size() != superblock.manifest_length ||
      XXH3_64bits(bytes.data(), bytes.size()) != superblock.manifest_digest) {
    return Corrupt(region, "manifest digest mismatch");
  }
  proto::WeightManifest m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Corrupt(region, "manifest does not parse");
  }
  if (m.chunk_bytes() != kWeightChunkBytes) {
    return Corrupt(region, absl::StrCat("chunk size ", m.chunk_bytes(),
                                        " is not ", kWeightChunkBytes));
  }
  absl::flat_hash_set<absl::string_view> names;
  uint64_t total = 0;
  for (const proto::WeightTensor& t : m.tensors()) {
    const std::string what = absl::StrCat("tensor '", t.name(), "'");
    if (t.name().empty() || !names.insert(t.name()).second) {
      return Corrupt(region, absl::StrCat(what, " is unnamed or repeated"));
    }
    absl::StatusOr<DType> dtype = ParseSafetensorsDType(t.dtype());
    if (!dtype.ok())
      return Corrupt(region,
                     absl::StrCat(what, ": ", dtype.status().message()));
    uint64_t elements = 1;
    for (uint64_t d : t.shape()) {
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / d) {
        return Corrupt(region, absl::StrCat(what, ": shape overflows"));
      }
      elements *= d;
    }
    if (elements > std::numeric_limits<uint64_t>::max() / DTypeBytes(*dtype) ||
        elements * DTypeBytes(*dtype) != t.length()) {
      return Corrupt(region, absl::StrCat(what, ": length ", t.length(),
                                          " does not match dtype and shape"));
    }
    if (t.offset() < kModelSuperblockBytes ||
        t.offset() > superblock.manifest_offset ||
        t.length() > superblock.manifest_offset - t.offset()) {
      return Corrupt(region, absl::StrCat(what, " lies outside the data"));
    }
    if (static_cast<uint64_t>(t.chunk_digests_size()) !=
        ChunkCount(t.length())) {
      return Corrupt(region, absl::StrCat(what, ": wrong chunk digest count"));
    }
    if (t.file() >= static_cast<uint32_t>(m.files_size())) {
      return Corrupt(region, absl::StrCat(what, ": no such source file"));
    }
    total += t.length();
  }
  if (total != m.tensor_bytes()) {
    return Corrupt(region, "tensor byte total mismatch");
  }
  return m;
}

TensorInfo ToTensorInfo(const proto::WeightTensor& tensor,
                        absl::string_view region) {
  TensorInfo info;
  info.name = tensor.name();
  info.dtype = *ParseSafetensorsDType(tensor.dtype());
  info.shape.assign(tensor.shape().begin(), tensor.shape().end());
  info.region = std::string(region);
  info.offset = tensor.offset();
  info.length = tensor.length();
  info.digest = tensor.digest();
  return info;
}

}  // namespace client_internal
}  // namespace meshpool
