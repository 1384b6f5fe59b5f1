// meshpool/store/pin_area.h: which entries of a node's pin area belong to
// no table, and hands out tables of the size a session asks for.
//
// The pin area (format/layout.h) is a run of pin entries. A table is a
// contiguous run of them, granted best-fit (the shortest free run that
// holds it, at its lowest index) so long runs stay whole for sessions that
// ask for many pins. A returned table rests for a quarantine before any of
// its entries is granted again (store/pin_tables.h says why); once it has
// rested it merges with the free runs beside it, so freed neighbours make
// one long run again.
//
// Indexes and lengths count entries, not bytes.
//
// Thread-safety: none; its owner (PinTables) calls it under its lock.
#ifndef MESHPOOL_STORE_PIN_AREA_H_
#define MESHPOOL_STORE_PIN_AREA_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/time/time.h"

namespace meshpool::store {

class PinArea {
 public:
  struct Run {
    uint64_t first = 0;   // index of its first entry
    uint64_t length = 0;  // entries
  };

  // An area of `entries` entries, all free; returned runs rest
  // `quarantine` (at least zero).
  PinArea(uint64_t entries, absl::Duration quarantine);

  // A run of `want` entries; when no free run is that long, of the longest
  // power of two not under `min` that halving `want` reaches and a free run
  // holds. nullopt when not even min(want, min) entries are free in one
  // run. Runs whose quarantine passed by `now` are free again first.
  // REQUIRES: want > 0.
  std::optional<Run> Grant(uint64_t want, uint64_t min, absl::Time now);

  // Takes back a run Grant gave (whole, once); its entries rest until
  // `now` + quarantine.
  void Return(Run run, absl::Time now);

  uint64_t entries() const { return entries_; }
  // Entries in no table and not resting.
  uint64_t free_entries() const { return free_entries_; }
  // Entries returned less than a quarantine ago (as of the last Grant).
  uint64_t resting_entries() const { return resting_entries_; }

 private:
  // Frees runs whose quarantine has passed.
  void Wake(absl::Time now);
  // Adds a run to the free runs, merged with free neighbours.
  void Free(Run run);
  void Insert(uint64_t first, uint64_t length);
  void Erase(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t entries_;
  const absl::Duration quarantine_;
  std::map<uint64_t, uint64_t> by_first_;              // first -> length
  std::set<std::pair<uint64_t, uint64_t>> by_length_;  // {length, first}
  struct Resting {
    Run run;
    absl::Time until;
  };
  std::deque<Resting> resting_;  // in order of `until`
  uint64_t free_entries_ = 0;
  uint64_t resting_entries_ = 0;
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_PIN_AREA_H_
