#include "bench/weights_bench_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "common/json.h"
#include "meshpool/weights.h"
#include "xxhash.h"

namespace meshpool::bench {
namespace {

using client_internal::SafetensorsTensor;

// Hidden size of the generated model: matrices are [rows, kHidden] BF16.
constexpr uint64_t kHidden = 4096;
constexpr uint64_t kRowBytes = kHidden * 2;
// Files are written in pieces of this size.
constexpr size_t kWritePieceBytes = size_t{4} << 20;
static_assert(kWritePieceBytes % 8 == 0);

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

enum class SizeClass { kBig, kMedium, kSmall };

struct Planned {
  SafetensorsTensor tensor;
  uint64_t bytes = 0;
  SizeClass size_class = SizeClass::kSmall;
};

// Cuts a byte budget into a model-like sequence of tensors.
class Planner {
 public:
  Planner(uint64_t total, uint64_t seed) : rng_(seed), left_(total) {
    big_max_ = std::clamp(total / 4, kMinMediumTensorBytes, kMaxBigTensorBytes);
    big_min_ = std::min(kMinBigTensorBytes, big_max_ / 2);
    medium_max_ = std::min(kMaxMediumTensorBytes, big_min_);
    medium_min_ = std::min(kMinMediumTensorBytes, medium_max_ / 2);
  }

  std::vector<Planned> Plan() {
    bool fits = Matrix("model.embed_tokens.weight", SizeClass::kBig);
    for (int layer = 0; fits; ++layer) fits = Layer(layer);
    Vector("model.norm.weight", kHidden);
    Rest("lm_head.weight");
    return std::move(out_);
  }

 private:
  bool Layer(int layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    return Vector(p + "input_layernorm.weight", kHidden) &&
           Matrix(p + "self_attn.q_proj.weight", SizeClass::kMedium) &&
           Vector(p + "self_attn.q_proj.bias", Uniform(64, 2048)) &&
           Matrix(p + "self_attn.k_proj.weight", SizeClass::kMedium) &&
           Vector(p + "self_attn.k_proj.bias", Uniform(64, 2048)) &&
           Matrix(p + "self_attn.v_proj.weight", SizeClass::kMedium) &&
           Vector(p + "self_attn.v_proj.bias", Uniform(64, 2048)) &&
           Matrix(p + "self_attn.o_proj.weight", SizeClass::kMedium) &&
           Vector(p + "post_attention_layernorm.weight", kHidden) &&
           Matrix(p + "mlp.up_proj.weight", SizeClass::kBig) &&
           Matrix(p + "mlp.down_proj.weight", SizeClass::kMedium);
  }

  uint64_t Uniform(uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_);
  }

  // False (nothing added) when it would not fit in what is left.
  bool Add(const std::string& name, DType dtype, std::vector<uint64_t> shape,
           uint64_t bytes, SizeClass size_class) {
    if (bytes == 0 || bytes > left_) return false;
    Planned p;
    p.tensor.name = name;
    p.tensor.dtype = dtype;
    p.tensor.shape = std::move(shape);
    p.bytes = bytes;
    p.size_class = size_class;
    out_.push_back(std::move(p));
    left_ -= bytes;
    return true;
  }

  bool Matrix(const std::string& name, SizeClass size_class) {
    uint64_t want = size_class == SizeClass::kBig
                        ? Uniform(big_min_, big_max_)
                        : Uniform(medium_min_, medium_max_);
    uint64_t rows = std::max<uint64_t>(1, want / kRowBytes);
    return Add(name, DType::kBF16, {rows, kHidden}, rows * kRowBytes,
               size_class);
  }

  bool Vector(const std::string& name, uint64_t elements) {
    return Add(name, DType::kBF16, {elements}, elements * 2, SizeClass::kSmall);
  }

  // The last tensor takes exactly what is left.
  void Rest(const std::string& name) {
    const uint64_t n = left_;
    const SizeClass c = n >= big_min_      ? SizeClass::kBig
                        : n >= medium_min_ ? SizeClass::kMedium
                                           : SizeClass::kSmall;
    if (n % kRowBytes == 0) {
      Add(name, DType::kBF16, {n / kRowBytes, kHidden}, n, c);
    } else if (n % 2 == 0) {
      Add(name, DType::kBF16, {n / 2}, n, c);
    } else {
      Add(name, DType::kU8, {n}, n, c);
    }
  }

  std::mt19937_64 rng_;
  uint64_t left_;
  uint64_t big_min_ = 0, big_max_ = 0, medium_min_ = 0, medium_max_ = 0;
  std::vector<Planned> out_;
};

class File {
 public:
  static absl::StatusOr<File> Create(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr)
      return ErrnoToStatus(errno, absl::StrCat("create ", path));
    return File(f, path);
  }
  File(File&& o) noexcept : f_(std::exchange(o.f_, nullptr)), path_(o.path_) {}
  File& operator=(File&&) = delete;
  ~File() {
    if (f_ != nullptr) std::fclose(f_);
  }
  absl::Status Write(const char* data, size_t n) {
    if (std::fwrite(data, 1, n, f_) == n) return absl::OkStatus();
    return ErrnoToStatus(errno, absl::StrCat("write ", path_, " (disk full?)"));
  }
  absl::Status Close() {
    FILE* f = std::exchange(f_, nullptr);
    if (std::fclose(f) == 0) return absl::OkStatus();
    return ErrnoToStatus(errno, absl::StrCat("close ", path_));
  }

 private:
  File(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  FILE* f_;
  std::string path_;
};

struct StateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

// Writes one shard: header, then each tensor's bytes; sets their digests.
absl::Status WriteShard(const std::string& path, uint64_t seed,
                        std::vector<GeneratedTensor*> tensors) {
  std::vector<SafetensorsTensor> header_tensors;
  for (GeneratedTensor* t : tensors) header_tensors.push_back(t->tensor);
  const std::string header = client_internal::EncodeSafetensorsHeader(
      header_tensors, {{"format", "pt"}});
  MESHPOOL_ASSIGN_OR_RETURN(File file, File::Create(path));
  MESHPOOL_RETURN_IF_ERROR(file.Write(header.data(), header.size()));
  std::unique_ptr<char[]> piece(new char[kWritePieceBytes]);
  std::unique_ptr<XXH3_state_t, StateFree> state(XXH3_createState());
  for (size_t i = 0; i < tensors.size(); ++i) {
    GeneratedTensor& t = *tensors[i];
    t.tensor.begin = header_tensors[i].begin;
    t.tensor.end = header_tensors[i].end;
    XXH3_64bits_reset(state.get());
    for (uint64_t at = 0; at < t.tensor.bytes(); at += kWritePieceBytes) {
      const size_t n =
          std::min<uint64_t>(kWritePieceBytes, t.tensor.bytes() - at);
      FillTensorBytes(seed, t.tensor.name, at, piece.get(), n);
      XXH3_64bits_update(state.get(), piece.get(), n);
      MESHPOOL_RETURN_IF_ERROR(file.Write(piece.get(), n));
    }
    t.digest = XXH3_64bits_digest(state.get());
  }
  return file.Close();
}

absl::Status WriteIndex(const GeneratedModel& model) {
  std::vector<std::string> entries;
  for (const GeneratedTensor& t : model.tensors) {
    const std::string& file = model.files[t.file];
    entries.push_back(
        absl::StrCat("    ", JsonQuote(t.tensor.name), ": ",
                     JsonQuote(file.substr(file.rfind('/') + 1))));
  }
  const std::string text = absl::StrCat(
      "{\n  \"metadata\": {\"total_size\": ", model.tensor_bytes,
      "},\n  \"weight_map\": {\n", absl::StrJoin(entries, ",\n"), "\n  }\n}\n");
  MESHPOOL_ASSIGN_OR_RETURN(File file, File::Create(model.index_path));
  MESHPOOL_RETURN_IF_ERROR(file.Write(text.data(), text.size()));
  return file.Close();
}

}  // namespace

void FillTensorBytes(uint64_t seed, const std::string& name, uint64_t offset,
                     char* out, size_t length) {
  const uint64_t key = Mix64(seed ^ NameHash(name));
  uint64_t word = offset / 8;
  size_t i = 0;
  for (; i + 8 <= length; i += 8, ++word) {
    const uint64_t v = Mix64(key + word);
    std::memcpy(out + i, &v, 8);
  }
  if (i < length) {
    const uint64_t v = Mix64(key + word);
    std::memcpy(out + i, &v, length - i);
  }
}

absl::StatusOr<GeneratedModel> WriteModel(const std::string& dir,
                                          uint64_t total_bytes, int files,
                                          uint64_t seed) {
  if (total_bytes == 0 || files < 1) {
    return absl::InvalidArgumentError(
        "the model needs --model-bytes > 0 and --files >= 1");
  }
  std::vector<Planned> plan = Planner(total_bytes, seed).Plan();
  GeneratedModel model;
  model.index_path = dir + "/model.safetensors.index.json";
  for (int i = 0; i < files; ++i) {
    model.files.push_back(absl::StrFormat("%s/model-%05d-of-%05d.safetensors",
                                          dir, i + 1, files));
  }
  // Contiguous shards of about total/files bytes each, by tensor midpoint.
  std::vector<std::vector<size_t>> members(files);
  uint64_t at = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    const unsigned __int128 mid = at + p.bytes / 2;
    const int file = static_cast<int>(std::min<unsigned __int128>(
        files - 1, mid * static_cast<unsigned>(files) / total_bytes));
    GeneratedTensor t;
    t.tensor = p.tensor;
    t.tensor.begin = 0;
    t.tensor.end = p.bytes;
    t.file = file;
    model.tensors.push_back(std::move(t));
    members[file].push_back(i);
    (p.size_class == SizeClass::kBig      ? model.big
     : p.size_class == SizeClass::kMedium ? model.medium
                                          : model.small)++;
    at += p.bytes;
  }
  model.tensor_bytes = at;
  for (int f = 0; f < files; ++f) {
    if (members[f].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", FormatSize(total_bytes), " model has ",
                       plan.size(), " tensors, too few to fill ", files,
                       " files: raise --model-bytes or lower --files"));
    }
  }
  // One writer per shard, as many at once as there are cores.
  const int workers = std::clamp<int>(
      static_cast<int>(std::thread::hardware_concurrency()), 1, files);
  std::atomic<int> next{0};
  absl::Mutex mu;
  absl::Status status;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int f = next++; f < files; f = next++) {
        std::vector<GeneratedTensor*> ts;
        for (size_t i : members[f]) ts.push_back(&model.tensors[i]);
        absl::Status s = WriteShard(model.files[f], seed, std::move(ts));
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (status.ok()) status = s;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MESHPOOL_RETURN_IF_ERROR(status);
  MESHPOOL_RETURN_IF_ERROR(WriteIndex(model));
  return model;
}

absl::StatusOr<std::vector<FilePiece>> ShardPieces(const GeneratedModel& model,
                                                   uint64_t piece_bytes,
                                                   uint64_t* bytes) {
  std::vector<FilePiece> pieces;
  *bytes = 0;
  for (size_t f = 0; f < model.files.size(); ++f) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(model.files[f], ec);
    if (ec) {
      return absl::NotFoundError(
          absl::StrCat(model.files[f], ": ", ec.message()));
    }
    for (uint64_t at = 0; at < size; at += piece_bytes) {
      pieces.push_back({f, at, std::min(piece_bytes, size - at)});
    }
    *bytes += size;
  }
  return pieces;
}

absl::Status ReadPiece(const GeneratedModel& model, const FilePiece& p,
                       char* out) {
  const int fd = ::open(model.files[p.file].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, model.files[p.file]);
  const bool ok = ::pread(fd, out, p.n, static_cast<off_t>(p.at)) ==
                  static_cast<ssize_t>(p.n);
  ::close(fd);
  return ok ? absl::OkStatus()
            : absl::DataLossError(
                  absl::StrCat("short read of ", model.files[p.file]));
}

}  // namespace meshpool::bench
