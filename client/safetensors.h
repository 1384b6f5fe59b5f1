// meshpool/client internal: strict parsing of safetensors files and of the
// sharded-model index (model.safetensors.index.json), for the weights loader.
//
// A safetensors file is: an 8-byte little-endian u64 N, N bytes of UTF-8
// JSON (the header), then the data buffer. The header is an object mapping
// each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets":
// [begin, end]} (offsets relative to the data buffer), plus an optional
// "__metadata__" object of string -> string. Valid files index the whole
// buffer: no holes, no overlaps, and end - begin == product(shape) * dtype
// size for every tensor (0 elements -> begin == end; shape [] is a scalar).
//
// Everything here is stateless and thread-safe. Errors are InvalidArgument
// "<path>: tensor 'NAME': <reason>" or "<path>: <reason>" for malformed
// input; file access errors come from ErrnoToStatus (NotFound,
// PermissionDenied, ...) and name the path.
#ifndef MESHPOOL_CLIENT_SAFETENSORS_H_
#define MESHPOOL_CLIENT_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshpool/weights.h"

namespace meshpool::client_internal {

// Element types are meshpool::DType (<meshpool/weights.h>), whose
// DTypeName spells them as safetensors headers do ("BF16", "F8_E4M3").
using ::meshpool::DType;
inline constexpr int kNumDTypes = static_cast<int>(DType::kF64) + 1;

// The inverse of DTypeName (case sensitive). InvalidArgument naming `name`
// and listing the known dtypes otherwise.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// Headers longer than this are rejected before they are read (the limit of
// the reference implementation).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;
// Index files longer than this are rejected before they are read.
inline constexpr uint64_t kMaxSafetensorsIndexBytes = uint64_t{64} << 20;
// The 8-byte header length that starts every file.
inline constexpr uint64_t kSafetensorsPrefixBytes = 8;

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty: a scalar (1 element)
  uint64_t begin = 0;           // relative to the data buffer
  uint64_t end = 0;             // exclusive

  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsFile {
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t data_offset = 0;  // kSafetensorsPrefixBytes + header length
  uint64_t data_bytes = 0;   // file_bytes - data_offset
  // Sorted by (begin, end, name); back to back, covering [0, data_bytes).
  std::vector<SafetensorsTensor> tensors;
  // "__metadata__" in header order.
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Validates a header (the N bytes after the length prefix) of a file of
// `file_bytes` bytes in total; `path_for_messages` only labels errors.
// InvalidArgument naming the file, the tensor (where one is involved) and
// the reason: the file too short for the header, a header over
// kMaxSafetensorsHeaderBytes, malformed JSON (with its byte offset),
// missing/extra/mistyped fields, unknown dtypes, shapes whose size
// overflows 64 bits, reversed/out-of-range/overlapping offsets, holes,
// size mismatches, duplicate or empty names.
absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(
    absl::string_view path_for_messages, absl::string_view header_json,
    uint64_t file_bytes);

// Opens `path`, reads the length prefix and the header with pread (never
// the data) and validates them as ParseSafetensorsHeader does. Errors as
// above, plus NotFound / PermissionDenied / ... when the file cannot be
// opened or read, and InvalidArgument for a non-regular file or one shorter
// than the length prefix.
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path);

// A sharded model's index: {"metadata": {...}, "weight_map": {"tensor":
// "model-00001-of-00002.safetensors", ...}}.
struct SafetensorsIndex {
  std::string path;
  // Tensor name -> shard path (joined with the index file's directory), in
  // index order.
  std::vector<std::pair<std::string, std::string>> weight_map;
  // Distinct shard paths in first-seen order.
  std::vector<std::string> files;
};

// Reads and validates an index file. InvalidArgument "<path>: <reason>" for
// malformed JSON, a missing or mistyped "weight_map", keys other than
// "metadata" and "weight_map", an empty map, empty tensor names, and shard
// names that are empty, absolute or contain a ".." component (they must
// stay in the index's directory tree); file errors as ReadSafetensorsFile.
absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path);

// For tests and benchmarks that generate files: the 8-byte length prefix
// plus a JSON header for `tensors` laid out back to back in the given order
// (fills each tensor's begin and end), the header padded with spaces so the
// data starts at a multiple of 8, as the reference writer does.
// REQUIRES: names distinct and not "__metadata__"; sizes fit 64 bits.
std::string EncodeSafetensorsHeader(
    std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_SAFETENSORS_H_
