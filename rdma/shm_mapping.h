// meshpool/rdma internal: mappings of the shm backend's memory files
// (common/memory_file.h: memfds on Linux, shared memory objects on macOS).
//
//  * ShmMapping: the one owner of a MAP_SHARED mapping of a whole memory
//    file (move-less; unmapped on destruction).
//  * ShmMappingCache: a client transport's mappings, one per (file,
//    access): endpoints to the same node share it through shared_ptr, and
//    the last one to go unmaps it. Only files whose size cannot change are
//    mapped (one someone may shrink would SIGBUS whoever maps it).
//    Thread-safe.
//  * The size of a descriptor, and the node's control page.
#ifndef MESHPOOL_RDMA_SHM_MAPPING_H_
#define MESHPOOL_RDMA_SHM_MAPPING_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {

class ShmMapping {
 public:
  // Maps `bytes` of `fd` from offset 0, MAP_SHARED, read-write or read-only,
  // left out of core dumps. Errors: ResourceExhausted / Internal from mmap.
  static absl::StatusOr<std::unique_ptr<ShmMapping>> Map(int fd, uint64_t bytes,
                                                         bool writable);
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  ShmMapping(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint8_t* const data_;
  const uint64_t size_;
};

// The size of the file behind `fd`. Internal when fstat fails.
absl::StatusOr<uint64_t> FdSize(int fd);

// The node's control page: a memory file (common/memory_file.h) of
// kShmControlBytes with its magic set. Clients get `read_only_fd`, which
// maps read-only only. Errors: as CreateMemoryFile and ShmMapping::Map.
struct ShmControlPage {
  static absl::StatusOr<ShmControlPage> Create();
  UniqueFd fd;                          // read-write, the node's
  UniqueFd read_only_fd;                // what clients are handed
  std::unique_ptr<ShmMapping> mapping;  // writable, the node's
};

class ShmMappingCache {
 public:
  // The mapping of the whole memory file `fd` (its current size), shared
  // with earlier calls for the same file and access while any of them
  // lives. Errors: FailedPrecondition (empty, or its size could change:
  // CheckMemoryFileFixed), as Map.
  absl::StatusOr<std::shared_ptr<const ShmMapping>> Map(int fd, bool writable);

 private:
  struct Key {
    dev_t dev;
    ino_t ino;
    bool writable;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.dev, k.ino, k.writable);
    }
  };
  absl::Mutex mu_;
  absl::flat_hash_map<Key, std::weak_ptr<const ShmMapping>> mappings_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SHM_MAPPING_H_
