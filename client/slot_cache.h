// SlotCache: where a key's index slot was last seen on one node, and the
// word it held — a hint that lets a GET fetch the object in the same round
// trip as the index, and a PUT read the hinted header with its object WRITE
// instead of after it. Never trusted alone: every use compares the hint
// with the index words read in the same operation, and the object it names
// is verified as this key's (a slot word alone does not name a key), so a
// stale, evicted or torn entry costs at most the READ it added.
//
// Thread-safe and lock-free: direct-mapped entries of relaxed atomics. Two
// threads racing on one entry may leave a mix of their values; that is a
// wrong hint, caught like any stale one.
#ifndef MESHPOOL_CLIENT_SLOT_CACHE_H_
#define MESHPOOL_CLIENT_SLOT_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "format/layout.h"

namespace meshpool::client_internal {

class SlotCache {
 public:
  // Entries per node connection (24 bytes each).
  static constexpr size_t kEntries = size_t{1} << 14;
  static_assert((kEntries & (kEntries - 1)) == 0, "a power of two");

  struct Hint {
    uint64_t slot_offset = 0;  // of the slot, from the pool start
    uint64_t word = 0;         // the slot word it held (never 0)
  };

  SlotCache() : entries_(new Entry[kEntries]) {}

  std::optional<Hint> Find(const format::KeyHash& hash) const {
    const Entry& e = entries_[Index(hash)];
    if (e.tag.load(std::memory_order_relaxed) != Tag(hash)) return std::nullopt;
    Hint hint{e.slot_offset.load(std::memory_order_relaxed),
              e.word.load(std::memory_order_relaxed)};
    if (hint.word == 0) return std::nullopt;
    return hint;
  }

  void Remember(const format::KeyHash& hash, uint64_t slot_offset,
                uint64_t word) {
    Entry& e = entries_[Index(hash)];
    e.tag.store(Tag(hash), std::memory_order_relaxed);
    e.slot_offset.store(slot_offset, std::memory_order_relaxed);
    e.word.store(word, std::memory_order_relaxed);
  }

  void Forget(const format::KeyHash& hash) {
    Entry& e = entries_[Index(hash)];
    if (e.tag.load(std::memory_order_relaxed) == Tag(hash)) {
      e.word.store(0, std::memory_order_relaxed);
    }
  }

 private:
  struct Entry {
    std::atomic<uint64_t> tag{0};
    std::atomic<uint64_t> slot_offset{0};
    std::atomic<uint64_t> word{0};
  };
  static size_t Index(const format::KeyHash& h) {
    return static_cast<size_t>(h.hi) & (kEntries - 1);
  }
  static uint64_t Tag(const format::KeyHash& h) { return h.lo | 1; }

  std::unique_ptr<Entry[]> entries_;
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_SLOT_CACHE_H_
