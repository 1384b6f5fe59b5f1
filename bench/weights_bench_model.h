// For bench/weights_bench: generates a sharded safetensors model shaped
// like a real one (an embedding, per-layer 32-128 MiB MLP matrices, 1-4 MiB
// attention matrices, many small norms and biases, an lm_head), writes it as
// N shard files plus model.safetensors.index.json, and records every
// tensor's XXH3-64 so a reader can check what it got back.
//
// Tensor bytes are a pure function of (seed, name, position): 8-byte word w
// of a tensor is Mix64(key + w), key = Mix64(seed ^ hash(name)).
//
// Stateless functions; thread-safe.
#ifndef MESHPOOL_BENCH_WEIGHTS_BENCH_MODEL_H_
#define MESHPOOL_BENCH_WEIGHTS_BENCH_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/safetensors.h"

namespace meshpool::bench {

// A generated model's largest tensors are at most this big...
inline constexpr uint64_t kMaxBigTensorBytes = uint64_t{128} << 20;
// ...and at least this big (both shrink for models under 4 x the maximum,
// so small models still get a mix of sizes).
inline constexpr uint64_t kMinBigTensorBytes = uint64_t{32} << 20;
inline constexpr uint64_t kMinMediumTensorBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMediumTensorBytes = uint64_t{4} << 20;
static_assert(kMinBigTensorBytes <= kMaxBigTensorBytes &&
              kMaxMediumTensorBytes <= kMinBigTensorBytes);

struct GeneratedTensor {
  client_internal::SafetensorsTensor tensor;  // begin/end within its file
  int file = 0;                               // shard index
  uint64_t digest = 0;                        // XXH3-64 of its bytes
};

struct GeneratedModel {
  std::string index_path;  // <dir>/model.safetensors.index.json
  std::vector<std::string> files;
  std::vector<GeneratedTensor> tensors;  // in file order, then data order
  uint64_t tensor_bytes = 0;
  // How many tensors fell in each size class.
  size_t big = 0, medium = 0, small = 0;
};

// Plans `total_bytes` of tensors over `files` shards and writes them into
// `dir` (which must exist), one thread per shard up to the cores available.
// InvalidArgument when total_bytes is 0 or too small to give every shard a
// tensor (the message says what to change); file errors from ErrnoToStatus.
absl::StatusOr<GeneratedModel> WriteModel(const std::string& dir,
                                          uint64_t total_bytes, int files,
                                          uint64_t seed);

// Fills `out` with bytes [offset, offset + out.size()) of tensor `name`.
// REQUIRES: offset % 8 == 0.
void FillTensorBytes(uint64_t seed, const std::string& name, uint64_t offset,
                     char* out, size_t length);

// A piece of one shard file (whole file, header included).
struct FilePiece {
  size_t file = 0;  // index into GeneratedModel::files
  uint64_t at = 0, n = 0;
};
// The model's shard files cut into pieces of at most `piece_bytes`, as a
// loader reads them; *bytes = the files' total size. NotFound when a file
// is gone.
absl::StatusOr<std::vector<FilePiece>> ShardPieces(const GeneratedModel& model,
                                                   uint64_t piece_bytes,
                                                   uint64_t* bytes);
// preads piece `p` into `out` (p.n bytes). DataLoss on a short read.
absl::Status ReadPiece(const GeneratedModel& model, const FilePiece& p,
                       char* out);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_WEIGHTS_BENCH_MODEL_H_
