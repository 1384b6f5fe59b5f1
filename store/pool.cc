#include "store/pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::store {

absl::string_view PageKindName(PageKind kind) {
  switch (kind) {
    case PageKind::kHugeTlb:
      return "2MiB huge pages (MAP_HUGETLB)";
    case PageKind::kTransparentHuge:
      return "transparent huge pages (MADV_HUGEPAGE)";
    case PageKind::kNormal:
      return "normal pages";
  }
  return "unknown";
}

absl::StatusOr<Pool> Pool::Create(uint64_t bytes, bool huge_pages,
                                  bool populate) {
  return CreateWith(bytes, huge_pages, populate, &::mmap);
}

absl::Status Pool::Populate(char* p, uint64_t bytes, bool use_madvise) {
  if (use_madvise && ::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) {
    return absl::OkStatus();
  }
  if (use_madvise && errno != EINVAL) {  // EINVAL: kernel older than 5.14
    return ErrnoToStatus(errno,
                         absl::StrCat("faulting in a ", FormatSize(bytes),
                                      " pool (lower the capacity)"));
  }
  // Writing a zero over a zero keeps the contents and faults the page in
  // (reading would map the shared zero page instead).
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (uint64_t off = 0; off < bytes; off += page) {
    reinterpret_cast<volatile char*>(p)[off] = 0;
  }
  return absl::OkStatus();
}

absl::StatusOr<Pool> Pool::CreateWith(uint64_t bytes, bool huge_pages,
                                      bool populate, MapFn map) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("pool size is 0; give a capacity > 0");
  }
  constexpr int kProt = PROT_READ | PROT_WRITE;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  // Explicit huge pages first: they need a reserved pool
  // (/proc/sys/vm/nr_hugepages), which most hosts lack, so failure here is
  // expected and silent.
  if (huge_pages && bytes % kHugePageBytes == 0) {
    void* p = map(nullptr, bytes, kProt, kFlags | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      Pool pool(static_cast<char*>(p), bytes, PageKind::kHugeTlb);
      if (populate) MESHPOOL_RETURN_IF_ERROR(Populate(pool.data_, bytes, true));
      return pool;
    }
  }
  void* p = map(nullptr, bytes, kProt, kFlags, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of a ", FormatSize(bytes),
                                             " pool (lower the capacity)"));
  }
  PageKind kind = PageKind::kNormal;
  if (huge_pages && ::madvise(p, bytes, MADV_HUGEPAGE) == 0) {
    kind = PageKind::kTransparentHuge;
  }
  Pool pool(static_cast<char*>(p), bytes, kind);  // unmaps on error
  if (populate) MESHPOOL_RETURN_IF_ERROR(Populate(pool.data_, bytes, true));
  return pool;
}

Pool::Pool(Pool&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      kind_(other.kind_) {}

Pool& Pool::operator=(Pool&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

Pool::~Pool() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace meshpool::store
