// meshpool/store/pool.h: the memory a node serves, one anonymous mapping.
//
// Pool is the single RAII owner of that mapping: move-only, unmapped on
// destruction. It asks for explicit 2 MiB huge pages (MAP_HUGETLB) when told
// to and the size is a multiple of 2 MiB; when the kernel has none reserved it
// falls back to normal pages advised as transparent huge pages
// (MADV_HUGEPAGE), and records which it got so the node can log it.
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
  kTransparentHuge,  // normal mapping, MADV_HUGEPAGE accepted
  kNormal,           // normal 4 KiB pages
};
absl::string_view PageKindName(PageKind kind);

class Pool {
 public:
  // Maps `bytes` of zeroed, private, anonymous memory; with `populate`,
  // faults all of it in first (takes about a second per 10 GiB).
  // Errors: InvalidArgument (bytes == 0), ResourceExhausted (the kernel
  // refused the mapping or could not back it: lower the capacity or raise
  // the memory limit).
  static absl::StatusOr<Pool> Create(uint64_t bytes, bool huge_pages,
                                     bool populate = false);

  Pool(Pool&& other) noexcept;
  Pool& operator=(Pool&& other) noexcept;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool();

  // The mapping; valid until this Pool is destroyed or moved from.
  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  PageKind page_kind() const { return kind_; }

 private:
  friend class PoolTestPeer;
  // Signature of ::mmap, injectable so tests can make MAP_HUGETLB fail.
  using MapFn = void* (*)(void*, size_t, int, int, int, off_t);
  static absl::StatusOr<Pool> CreateWith(uint64_t bytes, bool huge_pages,
                                         bool populate, MapFn map);
  // Faults [p, p + bytes) in writable; `use_madvise` false goes straight to
  // the one-write-per-page fallback (tests). REQUIRES: zeroed memory.
  static absl::Status Populate(char* p, uint64_t bytes, bool use_madvise);

  Pool(char* data, uint64_t size, PageKind kind)
      : data_(data), size_(size), kind_(kind) {}

  char* data_ = nullptr;
  uint64_t size_ = 0;
  PageKind kind_ = PageKind::kNormal;
};

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_POOL_H_
