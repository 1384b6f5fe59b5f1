// <meshpool/kv_cache.h>: the KV-cache side of the meshpool client, for LLM
// inference engines: block keys derived from token ids, prefix lookup, pins
// against eviction, and the client's KV counters. Blocks themselves move with
// the Client's batches (<meshpool/client.h>: BatchPut/BatchGet and their
// Async forms, into buffers from Client::RegisterBuffer).
//
// An inference engine keys a KV-cache block by the tokens that produced it:
// block i's key is a chained hash over the token ids of blocks 0..i, so
// equal prefixes give equal keys and the first differing token changes
// every later key. The chain starts from a namespace (model, parallel
// ranks, tenant salt, block size), so engines serving the same model and
// ranks share blocks and different models never collide.
//
// Memory pressure: nodes evict whole slabs of blocks, oldest first,
// giving recently read ones a second chance and never evicting pinned
// blocks or regions; a PUT into a full node waits (within op_timeout)
// for eviction instead of failing, and fails ResourceExhausted only when
// everything left is pinned. An evicted key reads as NotFound (a miss).
// A GET holds a read lease: memory of an evicted or replaced block is
// reused only after the longest GET may take, so a GET in flight never
// returns reused bytes.
//
// Thread-safety: the functions below are thread-safe (as the Client is);
// BlockKeyChain is thread-compatible.
#ifndef MESHPOOL_KV_CACHE_H_
#define MESHPOOL_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "meshpool/client.h"

namespace meshpool {

struct BlockKeyOptions {
  std::string model;     // required: the model's name or checksum
  uint32_t tp_rank = 0;  // tensor-parallel rank / size
  uint32_t tp_size = 1;
  uint32_t pp_rank = 0;  // pipeline-parallel rank / size
  uint32_t pp_size = 1;
  std::string salt = {};       // per tenant; empty: shared by all tenants
  uint32_t block_tokens = 16;  // tokens per block (1..kMaxBlockTokens)
};
inline constexpr uint32_t kMaxBlockTokens = 1u << 16;

// Derives block keys incrementally as tokens arrive (prefill, then decode).
// Keys are "kv1:" followed by 32 hex digits (XXH3-128 of the previous
// block's hash and this block's token ids, little-endian int32).
// Thread-compatible: one chain per sequence.
class BlockKeyChain {
 public:
  // InvalidArgument for an empty model, a rank not below its size, or a
  // block size of 0 or over kMaxBlockTokens.
  static absl::StatusOr<BlockKeyChain> Create(const BlockKeyOptions& options);

  // Appends `tokens`; returns the keys of the blocks they completed (a
  // partial block waits for more tokens and has no key).
  std::vector<std::string> Append(absl::Span<const int32_t> tokens);
  // Every full block's key so far, in order.
  const std::vector<std::string>& keys() const { return keys_; }
  // Tokens of the partial block not yet keyed.
  size_t pending_tokens() const { return pending_.size(); }

 private:
  BlockKeyChain(uint32_t block_tokens, uint64_t lo, uint64_t hi)
      : block_tokens_(block_tokens), lo_(lo), hi_(hi) {}
  uint32_t block_tokens_;
  uint64_t lo_, hi_;  // the chain's last hash
  std::vector<int32_t> pending_;
  std::vector<std::string> keys_;
};

// The keys of every full block of `tokens` (BlockKeyChain in one call).
absl::StatusOr<std::vector<std::string>> BlockKeys(
    const BlockKeyOptions& options, absl::Span<const int32_t> tokens);

// Pins: a pinned block is never evicted. `ttl` bounds a pin in time;
// kHardPin never expires. Either kind lasts at most as long as the client
// that made it: nodes drop a client's pins one session lease (10 s by
// default) after it stops renewing (crash, exit, partition). A pin holds
// the key's value as it was when pinned: replacing or deleting the key
// ends its protection.
inline constexpr absl::Duration kHardPin = absl::InfiniteDuration();

// How many leading keys are present: the longest prefix of `keys` the
// pool holds (a later key present after a gap does not count). With a
// nonzero `pin_ttl` the matched keys are also pinned in the same call
// (kHardPin: until Unpin), so they are not evicted before the engine
// reads them; a key whose pin does not hold (it was being evicted) ends
// the prefix there. Unavailable only when the first key's node cannot
// be reached (a node failing later in the chain ends the prefix there);
// InvalidArgument for a bad key.
absl::StatusOr<size_t> PrefixMatch(
    Client& client, absl::Span<const absl::string_view> keys,
    absl::Duration pin_ttl = absl::ZeroDuration());

// Pins each key's current value for `ttl` (kHardPin: until Unpin or this
// client ends). A client holds at most one pin per key: pinning a key it
// already pinned moves the pin to the key's current value and keeps the
// later expiry (a hard pin stays hard). One status per key: NotFound
// (absent, or being evicted), ResourceExhausted (this client's pin table
// on that node is full: unpin some; or the node has no free session),
// InvalidArgument (bad key or ttl <= 0), Unavailable (node unreachable).
std::vector<absl::Status> Pin(Client& client,
                              absl::Span<const absl::string_view> keys,
                              absl::Duration ttl);
// Drops this client's pins of `keys`. NotFound for a key it had not
// pinned (or whose pin already lapsed).
std::vector<absl::Status> Unpin(Client& client,
                                absl::Span<const absl::string_view> keys);

// What this client counted, in total and per node id.
struct KvCounters {
  KvStats total;
  std::map<std::string, KvStats> per_node;
};
KvCounters KvStatistics(const Client& client);

}  // namespace meshpool

#endif  // MESHPOOL_KV_CACHE_H_
