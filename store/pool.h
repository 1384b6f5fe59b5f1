// meshpool/store/pool.h: the memory a node serves, one mapping.
//
// Pool is the single RAII owner of that mapping (and, when shared, of the
// memory file behind it): move-only, unmapped and closed on destruction.
//
// Private (default): anonymous MAP_PRIVATE memory. Shared: a memory file
// (common/memory_file.h) mapped MAP_SHARED, so a same-host client can map
// the same pages (rdma's shm backend hands the descriptor over); no process
// it is handed to can resize it under the node (SIGBUS).
//
// Huge pages (Linux): asked for when told to and the size is a multiple of
// 2 MiB, explicit 2 MiB pages first (a hugetlb mapping or, shared, a hugetlb
// memory file); when the kernel has none reserved, normal pages advised as
// transparent huge pages, which shared memory gets only where the kernel
// allows them for shmem. The page kind records which, so the node can log
// it. Elsewhere (macOS) the pool has the system's normal pages.
//
// The memory starts zeroed. With `populate`, every page is faulted in (and
// so backed by memory) before Create returns: after the huge-page advice, so
// transparent huge pages still apply (one advice call on Linux 5.14 and
// later; otherwise one write per page).
//
// Thread-safety: a Pool is immutable after Create; its accessors may be
// called from any thread. The bytes themselves are shared memory: whoever
// writes them synchronises (the index is accessed with std::atomic_ref).
#ifndef MESHPOOL_STORE_POOL_H_
#define MESHPOOL_STORE_POOL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool::store {

// Size of an explicit huge page; explicit huge pages are tried only for pools
// that are a multiple of it (and only on Linux).
inline constexpr uint64_t kHugePageBytes = 2ull << 20;

// How the pool's pages are backed.
enum class PageKind {
  kHugeTlb,          // explicit 2 MiB pages (Linux hugetlb)
  kTransparentHuge,  // normal mapping, huge-page advice accepted (shared:
                     // and enabled for shmem); Linux
  kNormal,           // the system's normal pages (4 KiB; Apple silicon 16)
};
absl::string_view PageKindName(PageKind kind);

// The name a shared pool's memory file carries (Linux shows
// "/memfd:meshpool-pool" among a process's descriptors).
inline constexpr char kSharedPoolName[] = "meshpool-pool";

class Pool {
 public:
  // Maps `bytes` of zeroed memory, private and anonymous, or with `shared`
  // a memory file mapped MAP_SHARED (see above); with `populate`, faults
  // all of it in first (takes about a second per 10 GiB; the node should:
  // pages a client touches first are charged to the client's memory cgroup).
  // Errors: InvalidArgument (bytes == 0), ResourceExhausted (the kernel
  // refused the mapping or could not back it: lower the capacity or raise
  // the memory limit), FailedPrecondition / Internal (the memory file could
  // not be made, common/memory_file.h).
  static absl::StatusOr<Pool> Create(uint64_t bytes, bool huge_pages,
                                     bool populate = false,
                                     bool shared = false);

  Pool(Pool&& other) noexcept;
  Pool& operator=(Pool&& other) noexcept;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool();

  // The mapping; valid until this Pool is destroyed or moved from.
  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  PageKind page_kind() const { return kind_; }
  // True when created with `shared`.
  bool shared() const { return fd_ >= 0; }
  // Shared pools: the memory file whose offset 0 is data(); owned by this Pool
  // (closed on destruction; dup it to keep it longer). -1 when private.
  int fd() const { return fd_; }

 private:
  friend class PoolTestPeer;
  // Signature of ::mmap, injectable so tests can make huge pages fail (a
  // shared pool's hugetlb memory file is mapped with the hugetlb flag too,
  // which the kernel accepts for hugetlb files).
  using MapFn = void* (*)(void*, size_t, int, int, int, off_t);
  static absl::StatusOr<Pool> CreateWith(uint64_t bytes, bool huge_pages,
                                         bool populate, bool shared, MapFn map);
  static absl::StatusOr<Pool> CreateShared(uint64_t bytes, bool huge_pages,
                                           MapFn map);
  // Faults [p, p + bytes) in writable; `use_madvise` false goes straight to
  // the one-write-per-page fallback (tests). REQUIRES: zeroed memory.
  static absl::Status Populate(char* p, uint64_t bytes, bool use_madvise);
  // Whether the text of the kernel's transparent_hugepage/shmem_enabled
  // selects a mode in which huge-page advice gets shared memory huge pages.
  static bool ShmemHugePagesAllowed(absl::string_view sysfs_text);
  // Advises [p, p + bytes) as transparent huge pages (Linux); the page kind
  // the pool then has (elsewhere kNormal).
  static PageKind AdviseHugePages(char* p, uint64_t bytes, bool shared);

  Pool(char* data, uint64_t size, PageKind kind, int fd = -1)
      : data_(data), size_(size), kind_(kind), fd_(fd) {}

  char* data_ = nullptr;
  uint64_t size_ = 0;
  PageKind kind_ = PageKind::kNormal;
  int fd_ = -1;  // shared pools' memory file; closed after data_ is unmapped
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_POOL_H_
