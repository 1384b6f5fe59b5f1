// SlotCache: where a key's index slot was last seen on one node, the word
// it held, and when — a hint that lets a GET fetch the object in the same
// round trip as the index, and a PUT publish in the round trip that writes
// its object (kv_protocol.cc says when that is safe: it needs a hint younger
// than the node's read lease). Never trusted alone: every use compares the
// hint with the index words read in the same operation, and the object it
// names is verified as this key's (a slot word alone does not name a key),
// so a stale, evicted or torn entry costs at most the requests it added.
//
// Thread-safe and lock-free: direct-mapped entries, each under a sequence
// counter. A reader that races a writer misses; a writer that finds another
// one writing the entry skips (it is only a hint). So a hint read back is
// always what one Remember stored, never a mix.
#ifndef MESHPOOL_CLIENT_SLOT_CACHE_H_
#define MESHPOOL_CLIENT_SLOT_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "format/layout.h"

namespace meshpool::client_internal {

class SlotCache {
 public:
  // Entries per node connection (40 bytes each).
  static constexpr size_t kEntries = size_t{1} << 14;
  static_assert((kEntries & (kEntries - 1)) == 0, "a power of two");

  using Clock = std::chrono::steady_clock;

  struct Hint {
    uint64_t slot_offset = 0;  // of the slot, from the pool start
    uint64_t word = 0;         // the slot word it held (never 0)
    Clock::time_point seen;    // no later than when the slot held `word`
  };

  SlotCache() : entries_(new Entry[kEntries]) {}

  std::optional<Hint> Find(const format::KeyHash& hash) const {
    const Entry& e = entries_[Index(hash)];
    const uint64_t version = e.version.load(std::memory_order_acquire);
    if (version & 1) return std::nullopt;  // being written
    const uint64_t tag = e.tag.load(std::memory_order_relaxed);
    Hint hint{e.slot_offset.load(std::memory_order_relaxed),
              e.word.load(std::memory_order_relaxed),
              Clock::time_point(
                  Clock::duration(e.seen.load(std::memory_order_relaxed)))};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.version.load(std::memory_order_relaxed) != version) {
      return std::nullopt;  // rewritten while we read it
    }
    if (tag != Tag(hash) || hint.word == 0) return std::nullopt;
    return hint;
  }

  // `seen`: a time no later than when the slot was observed holding `word`
  // (taken before posting the request that observed it).
  void Remember(const format::KeyHash& hash, uint64_t slot_offset,
                uint64_t word, Clock::time_point seen) {
    Entry& e = entries_[Index(hash)];
    uint64_t version = e.version.load(std::memory_order_relaxed);
    if ((version & 1) || !e.version.compare_exchange_strong(
                             version, version + 1, std::memory_order_acquire)) {
      return;  // another thread writes this entry: let it
    }
    e.tag.store(Tag(hash), std::memory_order_relaxed);
    e.slot_offset.store(slot_offset, std::memory_order_relaxed);
    e.word.store(word, std::memory_order_relaxed);
    e.seen.store(seen.time_since_epoch().count(), std::memory_order_relaxed);
    e.version.store(version + 2, std::memory_order_release);
  }

  void Forget(const format::KeyHash& hash) {
    // Under the entry's counter too: a reader never sees the old word with
    // the tag check passing halfway through.
    Entry& e = entries_[Index(hash)];
    uint64_t version = e.version.load(std::memory_order_relaxed);
    if ((version & 1) || !e.version.compare_exchange_strong(
                             version, version + 1, std::memory_order_acquire)) {
      return;
    }
    if (e.tag.load(std::memory_order_relaxed) == Tag(hash)) {
      e.word.store(0, std::memory_order_relaxed);
    }
    e.version.store(version + 2, std::memory_order_release);
  }

 private:
  struct Entry {
    std::atomic<uint64_t> version{0};  // odd while being written
    std::atomic<uint64_t> tag{0};
    std::atomic<uint64_t> slot_offset{0};
    std::atomic<uint64_t> word{0};
    std::atomic<int64_t> seen{0};  // Clock ticks
  };
  static size_t Index(const format::KeyHash& h) {
    return static_cast<size_t>(h.hi) & (kEntries - 1);
  }
  static uint64_t Tag(const format::KeyHash& h) { return h.lo | 1; }

  std::unique_ptr<Entry[]> entries_;
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_SLOT_CACHE_H_
