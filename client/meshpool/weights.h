// <meshpool/weights.h>: model weights in a meshpool cluster.
//
// A model is loaded once from safetensors files into one region striped
// across the memory nodes (hard-pinned: KV-cache pressure never evicts it);
// then any worker reads a tensor, or the rows of one it needs, straight into
// its own buffer with one-sided reads, instead of every machine holding its
// own copy.
//
//   auto client = meshpool::Client::Connect({});
//   auto model = meshpool::WeightStore::Open(**client, "llama-3-70b");
//   const meshpool::TensorInfo* t = *(*model)->Find("lm_head.weight");
//   // tensor-parallel rank r of n takes rows [r*rows/n, (r+1)*rows/n):
//   std::vector<char> buf(rows_per_rank * t->row_bytes());
//   (*model)->ReadTensorSlice(t->name, begin, end, absl::MakeSpan(buf));
//
// How a model is stored: region "weights/<model>" holds a manifest (every
// tensor's name, dtype, shape, offset, length and XXH3-64 digests, one per
// kWeightChunkBytes) and the tensors' bytes. A load writes a staging region
// and renames it to that name only once every byte is written and
// verified, so a reader sees the whole model or none of it.
//
// Thread-safety: a WeightStore is immutable after Open and thread-safe;
// reads proceed in parallel. The free functions are thread-safe.
#ifndef MESHPOOL_WEIGHTS_H_
#define MESHPOOL_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "meshpool/client.h"
#include "meshpool/region.h"

namespace meshpool {

// Tensors are digested in chunks of this many bytes (from the tensor's
// start), so a slice can be verified by reading only the chunks it touches.
inline constexpr uint64_t kWeightChunkBytes = uint64_t{1} << 20;
// Model names: 1..kMaxModelNameBytes of letters, digits and "._-/:@+="
// (no '#', no spaces).
inline constexpr size_t kMaxModelNameBytes = 128;

// Element types, as safetensors names them.
enum class DType {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kI64, kU64, kF64,
};
// "F32", "BF16", ...
absl::string_view DTypeName(DType dtype);
// Bytes per element.
size_t DTypeBytes(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty: a scalar
  std::string region;           // the region holding its bytes
  uint64_t offset = 0;          // in that region
  uint64_t length = 0;          // bytes
  // XXH3-64 of its chunk digests (XXH3-64 of each kWeightChunkBytes piece
  // from its start, the last one short) laid end to end as little-endian
  // uint64s; chunk digests can be computed in parallel, so loads are.
  uint64_t digest = 0;

  // Bytes per index of the first dimension (the unit of a slice); the whole
  // length for a scalar; 0 for a tensor whose first dimension is 0.
  uint64_t row_bytes() const;
  // shape[0], or 1 for a scalar.
  uint64_t rows() const;
};

struct ModelInfo {
  std::string name;
  std::string region;               // "weights/<name>"
  size_t tensors = 0;
  uint64_t tensor_bytes = 0;        // sum of tensor lengths
  std::vector<std::string> files;   // what it was loaded from (base names)
  absl::Time loaded;
  // Its region's health (ListModels fills it; WeightStore::info leaves it
  // kUnknown).
  RegionHealth health;
};

struct ReadOptions {
  // Check the bytes read against the digests recorded at load time
  // (DataLoss on a mismatch). A slice is checked by reading the whole
  // chunks it touches, so verified slices read up to 2 chunks more.
  bool verify = false;
};

class WeightStore {
 public:
  // Opens a loaded model: reads and checks its manifest. NotFound when no
  // model of that name is loaded (`meshpool weights ls` lists them);
  // InvalidArgument for a bad model name; DataLoss for a corrupt manifest.
  // REQUIRES: `client` outlives the store.
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(
      Client& client, absl::string_view model);
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const ModelInfo& info() const;
  // Every tensor, in the order they lie in the region.
  const std::vector<TensorInfo>& Tensors() const;
  // NotFound naming the tensor.
  absl::StatusOr<const TensorInfo*> Find(absl::string_view tensor) const;

  // Reads a whole tensor into `out` (registered memory is read zero-copy)
  // and returns its length. OutOfRange (saying the size needed) when `out`
  // is too small; NotFound; DataLoss on a digest mismatch with verify;
  // otherwise the Region::Read errors.
  absl::StatusOr<size_t> ReadTensor(absl::string_view tensor,
                                    absl::Span<char> out,
                                    const ReadOptions& options = {}) const;
  // Reads rows [row_begin, row_end) of the first dimension (row_bytes()
  // each) into `out`; returns the bytes read. OutOfRange when the rows are
  // past rows() or reversed, or `out` is too small; InvalidArgument for a
  // scalar.
  absl::StatusOr<size_t> ReadTensorSlice(absl::string_view tensor,
                                         uint64_t row_begin, uint64_t row_end,
                                         absl::Span<char> out,
                                         const ReadOptions& options = {}) const;

 private:
  class Impl;
  explicit WeightStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Loaded models, sorted by name (models still loading are not listed).
absl::StatusOr<std::vector<ModelInfo>> ListModels(Client& client);

// Deletes a model and any of its interrupted loads' staging regions (a
// staging region whose loader is still alive — its heartbeat moves within
// about a second — is left alone). NotFound when there was neither;
// FailedPrecondition when the only thing found is a load still running.
absl::Status RemoveModel(Client& client, absl::string_view model);

struct LoadProgress {
  uint64_t bytes_done = 0;   // written and verified
  uint64_t bytes_total = 0;
  size_t files_done = 0;
  size_t files_total = 0;
};

struct LoadOptions {
  // Replace a loaded model of the same name (atomically: WeightStore::Open
  // finds the old model or the new one). The old model's memory is freed:
  // a WeightStore opened on it before reads reused bytes once the nodes'
  // grace has passed (DataLoss with ReadOptions.verify, garbage without);
  // reopen after a replace. Without it, an existing name is AlreadyExists.
  bool replace = false;
  RegionOptions region;      // stripe size and replicas of the model region
  int parallel_files = 4;    // files read and written at once
  // Called from the loading threads (serialised), at most every ~100 ms and
  // once at the end.
  std::function<void(const LoadProgress&)> progress;
};

// Loads safetensors files (or one sharded model's
// model.safetensors.index.json, which names its files) as model `model`.
// Every file's header is parsed and checked before anything is allocated;
// then every tensor is streamed into a staging region, each piece checked
// on every copy by the nodes' XXH3 digests (Region::Verify: nothing is read
// back over the network), and the model is published only when all of it
// is in. An interrupted or failed load leaves no model under that
// name (its staging region is deleted, or removed by RemoveModel when the
// loader died). Errors: InvalidArgument naming the file, tensor and reason
// for malformed input (truncated file, header past the end, bad JSON,
// overlapping or out-of-range offsets, unknown dtype, duplicate tensor names
// across files); NotFound for a missing file; AlreadyExists (see replace);
// DataLoss when a node's copy differs from what was written; the
// CreateRegion and Region::Write errors otherwise.
absl::StatusOr<ModelInfo> LoadSafetensors(Client& client,
                                          absl::string_view model,
                                          absl::Span<const std::string> paths,
                                          const LoadOptions& options = {});

}  // namespace meshpool

#endif  // MESHPOOL_WEIGHTS_H_
