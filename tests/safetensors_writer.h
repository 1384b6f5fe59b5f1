// For tests and benchmarks: writes safetensors files, sharded-model index
// files, and the deterministic tensor bytes they hold, so a reader can check
// any byte range of any tensor without keeping the file's data in memory.
//
//   ScopedTempDir dir;                       // removed with its contents
//   std::vector<SafetensorsTensor> ts = {{"w", DType::kF32, {2, 3}}};
//   auto f = WriteSafetensorsFile(dir.path() + "/m.safetensors", ts, seed);
//   // f->tensors now carry begin/end; TensorBytes(seed, "w", 0, 24) are
//   // the bytes of "w".
//
// Header-only; every function is stateless and thread-safe.
#ifndef MESHPOOL_TESTS_SAFETENSORS_WRITER_H_
#define MESHPOOL_TESTS_SAFETENSORS_WRITER_H_

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/safetensors.h"
#include "common/common.h"
#include "common/json.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace meshpool::testing {

using client_internal::DType;
using client_internal::SafetensorsTensor;
using Metadata = std::vector<std::pair<std::string, std::string>>;

// splitmix64: a good 64-bit mix, used as a counter-mode generator.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of a tensor name: makes each tensor's bytes differ.
inline uint64_t NameHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  }
  return h;
}

// Bytes [offset, offset + length) of tensor `name` as written with `seed`:
// byte i is byte (i % 8) of Mix64(seed ^ NameHash(name) ^ Mix64(i / 8)),
// so any slice can be produced on its own.
inline std::string TensorBytes(uint64_t seed, absl::string_view name,
                               uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  const uint64_t key = seed ^ NameHash(name);
  for (uint64_t i = 0; i < length; ++i) {
    const uint64_t at = offset + i;
    const uint64_t word = Mix64(key ^ Mix64(at / 8));
    out[i] = static_cast<char>((word >> (8 * (at % 8))) & 0xff);
  }
  return out;
}

// Creates or truncates `path` with exactly `bytes`.
inline absl::Status WriteFileBytes(const std::string& path,
                                   absl::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  const bool wrote =
      std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    return absl::InternalError(absl::StrCat("write ", path, " failed"));
  }
  return absl::OkStatus();
}

struct WrittenSafetensors {
  std::string path;
  // In the order given, with begin/end (relative to the data buffer) set.
  std::vector<SafetensorsTensor> tensors;
  uint64_t data_offset = 0;  // where the data buffer starts in the file
  uint64_t file_bytes = 0;
};

// Writes a complete safetensors file: the header EncodeSafetensorsHeader
// makes (tensors back to back in the given order, metadata first), then each
// tensor's TensorBytes(seed, name, ...), streamed in 1 MiB pieces.
inline absl::StatusOr<WrittenSafetensors> WriteSafetensorsFile(
    const std::string& path, std::vector<SafetensorsTensor> tensors,
    uint64_t seed, const Metadata& metadata = {}) {
  WrittenSafetensors out;
  out.path = path;
  const std::string header =
      client_internal::EncodeSafetensorsHeader(tensors, metadata);
  out.data_offset = header.size();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  for (const SafetensorsTensor& t : tensors) {
    for (uint64_t at = 0; ok && at < t.bytes(); at += kPiece) {
      const std::string piece =
          TensorBytes(seed, t.name, at, std::min(kPiece, t.bytes() - at));
      ok = std::fwrite(piece.data(), 1, piece.size(), f) == piece.size();
    }
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat("write ", path, " failed"));
  out.file_bytes = out.data_offset + (tensors.empty() ? 0 : tensors.back().end);
  out.tensors = std::move(tensors);
  return out;
}

// Writes an index file {"metadata": <metadata_json>, "weight_map": {...}}
// mapping each tensor to a shard file name (relative to the index's
// directory), in the given order.
inline absl::Status WriteSafetensorsIndex(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& weight_map,
    absl::string_view metadata_json = "{}") {
  std::vector<std::string> entries;
  for (const auto& [tensor, file] : weight_map) {
    entries.push_back(
        absl::StrCat("    ", JsonQuote(tensor), ": ", JsonQuote(file)));
  }
  return WriteFileBytes(
      path, absl::StrCat("{\n  \"metadata\": ", metadata_json,
                         ",\n  \"weight_map\": {\n",
                         absl::StrJoin(entries, ",\n"), "\n  }\n}\n"));
}

// The Hugging Face shard name: model-00001-of-00003.safetensors.
inline std::string ShardFileName(int index, int count) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", index + 1, count);
}

struct WrittenModel {
  std::string index_path;  // <dir>/model.safetensors.index.json
  std::vector<WrittenSafetensors> shards;
};

// Writes shards[i] to <dir>/ShardFileName(i, n) and an index naming them all
// (metadata {"total_size": <data bytes>}).
inline absl::StatusOr<WrittenModel> WriteShardedModel(
    const std::string& dir, std::vector<std::vector<SafetensorsTensor>> shards,
    uint64_t seed) {
  WrittenModel model;
  model.index_path = dir + "/model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> weight_map;
  uint64_t total = 0;
  const int count = static_cast<int>(shards.size());
  for (int i = 0; i < count; ++i) {
    const std::string name = ShardFileName(i, count);
    MESHPOOL_ASSIGN_OR_RETURN(
        WrittenSafetensors shard,
        WriteSafetensorsFile(dir + "/" + name, std::move(shards[i]), seed));
    for (const SafetensorsTensor& t : shard.tensors) {
      weight_map.emplace_back(t.name, name);
      total += t.bytes();
    }
    model.shards.push_back(std::move(shard));
  }
  MESHPOOL_RETURN_IF_ERROR(
      WriteSafetensorsIndex(model.index_path, weight_map,
                            absl::StrCat("{\"total_size\": ", total, "}")));
  return model;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_SAFETENSORS_WRITER_H_
