#include "client/buffer_registry.h"

namespace meshpool::client_internal {

void BufferRegistry::Add(const void* addr, size_t length, uint32_t lkey,
                         const void* transport) {
  absl::MutexLock lock(&mu_);
  ranges_[transport][reinterpret_cast<uintptr_t>(addr)] = Entry{length, lkey};
}

void BufferRegistry::Remove(const void* addr) {
  absl::MutexLock lock(&mu_);
  for (auto& [transport, ranges] : ranges_) {
    ranges.erase(reinterpret_cast<uintptr_t>(addr));
  }
}

std::optional<uint32_t> BufferRegistry::Find(const void* addr, size_t length,
                                             const void* transport) const {
  uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  absl::MutexLock lock(&mu_);
  auto t = ranges_.find(transport);
  if (t == ranges_.end()) return std::nullopt;
  auto it = t->second.upper_bound(begin);
  if (it == t->second.begin()) return std::nullopt;
  --it;
  if (begin + length > it->first + it->second.length) return std::nullopt;
  return it->second.lkey;
}

}  // namespace meshpool::client_internal
