// meshpool/store/pool.h: the memory a node serves, one mapping.
//
// Pool is the single RAII owner of that mapping (and, when shared, of the
// memfd behind it): move-only, unmapped and closed on destruction. It asks
// for explicit 2 MiB huge pages when told to and the size is a multiple of
// 2 MiB; when the kernel has none reserved it falls back to normal pages
// advised as transparent huge pages (MADV_HUGEPAGE), and records which it
// got so the node can log it.
//
// Private (default): anonymous MAP_PRIVATE memory (MAP_HUGETLB for explicit
// huge pages). Shared: a memfd mapped MAP_SHARED, so a same-host client can
// map the same pages (rdma's shm backend hands the fd over): explicit huge
// pages are a MFD_HUGETLB memfd; the fallback is a normal memfd advised
// MADV_HUGEPAGE, which gives huge pages only where the kernel allows them for
// shared memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled); the
// page kind says which. The memfd is sealed against shrinking, growing and
// further seals (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so no process
// the fd is handed to can truncate the pool under the node (SIGBUS) or
// forbid writable mappings.
// The memory starts zeroed. With `populate`, every page is faulted in (and
// so backed by memory) before Create returns: after the huge-page advice, so
// transparent huge pages still apply (MADV_POPULATE_WRITE; on kernels
// without it, one write per page).
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

// Size of an explicit huge page; MAP_HUGETLB is tried only for pools that are
// a multiple of it.
inline constexpr uint64_t kHugePageBytes = 2ull << 20;

// How the pool's pages are backed.
enum class PageKind {
  kHugeTlb,          // explicit 2 MiB pages (MAP_HUGETLB)
  kTransparentHuge,  // normal mapping, MADV_HUGEPAGE accepted (shared: and
                     // enabled for shmem)
  kNormal,           // normal 4 KiB pages
};
absl::string_view PageKindName(PageKind kind);

// The memfd name a shared pool's fd carries (/proc/<pid>/fd shows
// "/memfd:meshpool-pool").
inline constexpr char kSharedPoolName[] = "meshpool-pool";

class Pool {
 public:
  // Maps `bytes` of zeroed memory, private and anonymous, or with `shared`
  // a sealed memfd mapped MAP_SHARED (see above); with `populate`, faults
  // all of it in first (takes about a second per 10 GiB; the node should:
  // pages a client touches first are charged to the client's memory cgroup).
  // Errors: InvalidArgument (bytes == 0), ResourceExhausted (the kernel
  // refused the mapping or could not back it: lower the capacity or raise
  // the memory limit), Internal (memfd_create / ftruncate / sealing failed).
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
  // Shared pools: the memfd whose offset 0 is data(); owned by this Pool
  // (closed on destruction; dup it to keep it longer). -1 when private.
  int fd() const { return fd_; }

 private:
  friend class PoolTestPeer;
  // Signature of ::mmap, injectable so tests can make huge pages fail (a
  // shared pool's hugetlb memfd is mapped with MAP_HUGETLB too, which the
  // kernel accepts for hugetlb files).
  using MapFn = void* (*)(void*, size_t, int, int, int, off_t);
  static absl::StatusOr<Pool> CreateWith(uint64_t bytes, bool huge_pages,
                                         bool populate, bool shared, MapFn map);
  static absl::StatusOr<Pool> CreateShared(uint64_t bytes, bool huge_pages,
                                           MapFn map);
  // Faults [p, p + bytes) in writable; `use_madvise` false goes straight to
  // the one-write-per-page fallback (tests). REQUIRES: zeroed memory.
  static absl::Status Populate(char* p, uint64_t bytes, bool use_madvise);
  // Whether the text of /sys/kernel/mm/transparent_hugepage/shmem_enabled
  // selects a mode in which MADV_HUGEPAGE gets shared memory huge pages.
  static bool ShmemHugePagesAllowed(absl::string_view sysfs_text);

  Pool(char* data, uint64_t size, PageKind kind, int fd = -1)
      : data_(data), size_(size), kind_(kind), fd_(fd) {}

  char* data_ = nullptr;
  uint64_t size_ = 0;
  PageKind kind_ = PageKind::kNormal;
  int fd_ = -1;  // shared pools' memfd; closed after data_ is unmapped
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_POOL_H_
