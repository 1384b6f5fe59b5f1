#include "client/buffer_registry.h"

namespace meshpool::client_internal {

void BufferRegistry::Add(const void* addr, size_t length, uint32_t lkey,
                         const void* transport) {
  absl::MutexLock lock(&mu_);
  ranges_[reinterpret_cast<uintptr_t>(addr)] = Entry{length, lkey, transport};
}

void BufferRegistry::Remove(const void* addr) {
  absl::MutexLock lock(&mu_);
  ranges_.erase(reinterpret_cast<uintptr_t>(addr));
}

std::optional<uint32_t> BufferRegistry::Find(const void* addr, size_t length,
                                             const void* transport) const {
  uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  absl::MutexLock lock(&mu_);
  auto it = ranges_.upper_bound(begin);
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (begin + length > it->first + it->second.length) return std::nullopt;
  if (it->second.transport != transport) return std::nullopt;
  return it->second.lkey;
}

}  // namespace meshpool::client_internal
