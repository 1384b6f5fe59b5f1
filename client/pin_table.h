// Internal to client/: this client's pin table on one node — a mirror of
// the entries it wrote into its session's table in the node's pool
// (format/layout.h PinEntry), and which entry pins which key. The node only
// reads the table (its evictor keeps pinned slabs); this client is its only
// writer. One entry per key: pinning a key again reuses its entry.
//
// Thread-safe.
#ifndef MESHPOOL_CLIENT_PIN_TABLE_H_
#define MESHPOOL_CLIENT_PIN_TABLE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "format/layout.h"

namespace meshpool::client_internal {

class PinTable {
 public:
  // `table_offset`: pool offset of the session's table; `entries` of it.
  PinTable(uint64_t table_offset, uint32_t entries);

  // The entry for `key`: the one it already has, else a free one or one
  // whose pin lapsed before `now_ms` (node clock). The entry is held for
  // the key (until Clear) even before Set. ResourceExhausted when every
  // entry holds a live pin.
  absl::StatusOr<uint32_t> Reserve(const format::KeyHash& key, uint64_t now_ms);
  // What the entry holds now ({0, 0}: nothing yet).
  format::PinEntry entry(uint32_t index) const;
  // Records what entry `index` now holds in the node's table.
  void Set(uint32_t index, const format::PinEntry& entry);
  // The entry of `key`'s pin if it is live at `now_ms`.
  std::optional<uint32_t> Find(const format::KeyHash& key,
                               uint64_t now_ms) const;
  // Frees the entry (after its zeros were written to the node).
  void Clear(uint32_t index);

  uint64_t entry_offset(uint32_t index) const {
    return table_offset_ + uint64_t{index} * format::kPinEntryBytes;
  }
  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }

 private:
  struct Slot {
    bool used = false;
    format::KeyHash key;
    format::PinEntry entry{0, 0};
  };
  static bool Lapsed(const Slot& s, uint64_t now_ms) {
    return s.entry.expiry_ms != format::kPinForever &&
           s.entry.expiry_ms <= now_ms && s.entry.object_offset != 0;
  }
  struct KeyHasher {
    size_t operator()(const format::KeyHash& k) const { return k.lo ^ k.hi; }
  };

  const uint64_t table_offset_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<format::KeyHash, uint32_t, KeyHasher> by_key_
      ABSL_GUARDED_BY(mu_);
  uint32_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the free-entry scan starts
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_PIN_TABLE_H_
