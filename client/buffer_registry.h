// BufferRegistry: the caller buffers registered through
// Client::RegisterBuffer, so an operation can tell whether its value lives in
// registered memory (then the transport moves it straight to or from that
// memory) and with which lkey. A buffer is registered with one transport;
// its lkey means nothing to another, so lookups name the transport asking.
//
// Thread-safe.
#ifndef MESHPOOL_CLIENT_BUFFER_REGISTRY_H_
#define MESHPOOL_CLIENT_BUFFER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace meshpool::client_internal {

class BufferRegistry {
 public:
  // REQUIRES: [addr, addr + length) overlaps no registered range.
  // `transport` identifies the registering transport (not dereferenced).
  void Add(const void* addr, size_t length, uint32_t lkey,
           const void* transport);
  void Remove(const void* addr);
  // The lkey of the registration that wholly contains [addr, addr + length),
  // if there is one and `transport` made it.
  std::optional<uint32_t> Find(const void* addr, size_t length,
                               const void* transport) const;

 private:
  struct Entry {
    size_t length;
    uint32_t lkey;
    const void* transport;
  };
  mutable absl::Mutex mu_;
  std::map<uintptr_t, Entry> ranges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_BUFFER_REGISTRY_H_
