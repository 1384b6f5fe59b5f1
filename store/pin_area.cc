#include "store/pin_area.h"

#include <algorithm>
#include <bit>
#include <iterator>

namespace meshpool::store {

PinArea::PinArea(uint64_t entries, absl::Duration quarantine)
    : entries_(entries),
      quarantine_(std::max(quarantine, absl::ZeroDuration())) {
  if (entries_ > 0) Insert(0, entries_);
}

void PinArea::Insert(uint64_t first, uint64_t length) {
  by_first_.emplace(first, length);
  by_length_.emplace(length, first);
  free_entries_ += length;
}

void PinArea::Erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_length_.erase({it->second, it->first});
  free_entries_ -= it->second;
  by_first_.erase(it);
}

void PinArea::Free(Run run) {
  uint64_t first = run.first;
  uint64_t length = run.length;
  auto next = by_first_.lower_bound(first);
  if (next != by_first_.end() && next->first == first + length) {
    length += next->second;
    next = std::next(next);
    Erase(std::prev(next));
  }
  if (next != by_first_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      first = prev->first;
      length += prev->second;
      Erase(prev);
    }
  }
  Insert(first, length);
}

void PinArea::Wake(absl::Time now) {
  while (!resting_.empty() && resting_.front().until <= now) {
    resting_entries_ -= resting_.front().run.length;
    Free(resting_.front().run);
    resting_.pop_front();
  }
}

std::optional<PinArea::Run> PinArea::Grant(uint64_t want, uint64_t min,
                                           absl::Time now) {
  Wake(now);
  const uint64_t floor = std::max<uint64_t>(std::min(want, min), 1);
  for (uint64_t length = want; length >= floor;) {
    auto fit = by_length_.lower_bound({length, 0});
    if (fit != by_length_.end()) {
      const uint64_t first = fit->second;
      const uint64_t free_length = fit->first;
      Erase(by_first_.find(first));
      if (free_length > length) Insert(first + length, free_length - length);
      return Run{first, length};
    }
    if (length == floor) break;
    // Down to the next power of two below (the first step from an odd
    // `want`), then halving, never under the floor.
    const uint64_t below = std::bit_floor(length - 1);
    length = std::max(below, floor);
  }
  return std::nullopt;
}

void PinArea::Return(Run run, absl::Time now) {
  if (run.length == 0) return;
  // Quarantines are all equal, so `until` grows with `now` except when a
  // caller's clock steps back; then it rests behind later ones, which is
  // longer, never shorter.
  absl::Time until = now + quarantine_;
  if (!resting_.empty()) until = std::max(until, resting_.back().until);
  resting_.push_back({run, until});
  resting_entries_ += run.length;
}

}  // namespace meshpool::store
