// Block keys from token ids (<meshpool/kv_cache.h>, BlockKeyChain).
//
// The chain starts from XXH3-128 of the namespace, encoded field by field
// with lengths so no two namespaces encode alike; block i's hash is
// XXH3-128 of (hash of block i-1, 16 bytes little-endian) followed by its
// token ids as little-endian int32. Byte order is fixed so every engine,
// on any host, derives the same keys.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/meshpool/kv_cache.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace meshpool {
namespace {

constexpr absl::string_view kKeyPrefix = "kv1:";
constexpr absl::string_view kNamespaceTag = "meshpool-kv-blocks-v1";

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutString(std::string& out, absl::string_view s) {
  PutU64(out, s.size());
  out.append(s.data(), s.size());
}

absl::Status CheckRank(absl::string_view what, uint32_t rank, uint32_t size) {
  if (size == 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " rank ", rank, " of size ", size,
                     ": the size must be at least 1 and the rank below it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlockKeyChain> BlockKeyChain::Create(
    const BlockKeyOptions& options) {
  if (options.model.empty()) {
    return absl::InvalidArgumentError(
        "BlockKeyOptions.model is empty: name the model (or its checksum) so "
        "different models never share blocks");
  }
  if (options.block_tokens == 0 || options.block_tokens > kMaxBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens ", options.block_tokens, " must be in 1..",
                     kMaxBlockTokens, " (engines use 16 to 256)"));
  }
  if (absl::Status s =
          CheckRank("tensor-parallel", options.tp_rank, options.tp_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRank("pipeline-parallel", options.pp_rank, options.pp_size);
      !s.ok()) {
    return s;
  }
  std::string ns;
  PutString(ns, kNamespaceTag);
  PutString(ns, options.model);
  PutU32(ns, options.tp_rank);
  PutU32(ns, options.tp_size);
  PutU32(ns, options.pp_rank);
  PutU32(ns, options.pp_size);
  PutString(ns, options.salt);
  PutU32(ns, options.block_tokens);
  XXH128_hash_t h = XXH3_128bits(ns.data(), ns.size());
  return BlockKeyChain(options.block_tokens, h.low64, h.high64);
}

std::vector<std::string> BlockKeyChain::Append(
    absl::Span<const int32_t> tokens) {
  std::vector<std::string> completed;
  std::string block;
  for (int32_t t : tokens) {
    pending_.push_back(t);
    if (pending_.size() < block_tokens_) continue;
    block.clear();
    PutU64(block, lo_);
    PutU64(block, hi_);
    for (int32_t p : pending_) PutU32(block, static_cast<uint32_t>(p));
    XXH128_hash_t h = XXH3_128bits(block.data(), block.size());
    lo_ = h.low64;
    hi_ = h.high64;
    pending_.clear();
    completed.push_back(absl::StrFormat("%s%016x%016x", kKeyPrefix, hi_, lo_));
    keys_.push_back(completed.back());
  }
  return completed;
}

absl::StatusOr<std::vector<std::string>> BlockKeys(
    const BlockKeyOptions& options, absl::Span<const int32_t> tokens) {
  absl::StatusOr<BlockKeyChain> chain = BlockKeyChain::Create(options);
  if (!chain.ok()) return chain.status();
  return chain->Append(tokens);
}

}  // namespace meshpool
