// BufferRegistry: the caller buffers registered through
// Client::RegisterBuffer, so an operation can tell whether its value lives in
// registered memory (then the transport moves it straight to or from that
// memory) and with which lkey. A buffer may be registered with several
// transports (a client reaching some nodes over shm and others over tcp);
// an lkey means nothing to another transport, so lookups name the
// transport asking.
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
  // REQUIRES: [addr, addr + length) overlaps no range registered with the
  // same transport. `transport` identifies the registering transport (not
  // dereferenced).
  void Add(const void* addr, size_t length, uint32_t lkey,
           const void* transport);
  // Removes the registrations starting at `addr`, with every transport.
  void Remove(const void* addr);
  // The lkey of the registration that wholly contains [addr, addr + length),
  // if there is one and `transport` made it.
  std::optional<uint32_t> Find(const void* addr, size_t length,
                               const void* transport) const;

 private:
  struct Entry {
    size_t length;
    uint32_t lkey;
  };
  mutable absl::Mutex mu_;
  // Per transport: start address -> registration.
  std::map<const void*, std::map<uintptr_t, Entry>> ranges_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_BUFFER_REGISTRY_H_
