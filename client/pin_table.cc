#include "client/pin_table.h"

#include "absl/strings/str_cat.h"

namespace meshpool::client_internal {

PinTable::PinTable(uint64_t table_offset, uint32_t entries)
    : table_offset_(table_offset), slots_(entries) {}

absl::StatusOr<uint32_t> PinTable::Reserve(const format::KeyHash& key,
                                           uint64_t now_ms) {
  absl::MutexLock lock(&mu_);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  const uint32_t n = static_cast<uint32_t>(slots_.size());
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t i = (next_ + k) % n;
    Slot& s = slots_[i];
    if (s.used && !Lapsed(s, now_ms)) continue;
    if (s.used) by_key_.erase(s.key);
    s.used = true;
    s.key = key;
    s.entry = {0, 0};
    by_key_[key] = i;
    next_ = (i + 1) % n;
    return i;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("all ", n,
                   " pins of this client's table on the node are live; unpin "
                   "blocks (or pin with a shorter ttl) before pinning more"));
}

format::PinEntry PinTable::entry(uint32_t index) const {
  absl::MutexLock lock(&mu_);
  return slots_[index].entry;
}

void PinTable::Set(uint32_t index, const format::PinEntry& entry) {
  absl::MutexLock lock(&mu_);
  slots_[index].entry = entry;
}

std::optional<uint32_t> PinTable::Find(const format::KeyHash& key,
                                       uint64_t now_ms) const {
  absl::MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  const Slot& s = slots_[it->second];
  if (s.entry.object_offset == 0 || Lapsed(s, now_ms)) return std::nullopt;
  return it->second;
}

void PinTable::Clear(uint32_t index) {
  absl::MutexLock lock(&mu_);
  Slot& s = slots_[index];
  if (s.used) by_key_.erase(s.key);
  s = Slot{};
}

}  // namespace meshpool::client_internal
