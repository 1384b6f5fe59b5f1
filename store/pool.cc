#include "store/pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "common/memory_file.h"

namespace meshpool::store {
namespace {

constexpr int kProt = PROT_READ | PROT_WRITE;

// Closes a memory file unless released (error paths of CreateShared).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
  int Release() { return std::exchange(fd, -1); }
};

#ifdef __linux__
// mmap's flag for explicit huge pages (also given for a hugetlb memfd).
constexpr int kHugeTlbMapFlag = MAP_HUGETLB;
constexpr char kShmemThpPath[] =
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

// Faults [p, p+bytes) in with one call; false with errno when the kernel
// cannot (EINVAL: older than 5.14).
bool PopulateByAdvice(char* p, uint64_t bytes) {
  return ::madvise(p, bytes, MADV_POPULATE_WRITE) == 0;
}
#else
// No explicit huge pages (macOS maps with its own page size; Apple silicon
// has 16 KiB pages) and no advice for them.
constexpr int kHugeTlbMapFlag = 0;
bool PopulateByAdvice(char*, uint64_t) {
  errno = EINVAL;
  return false;
}
#endif

}  // namespace

#ifdef __linux__
PageKind Pool::AdviseHugePages(char* p, uint64_t bytes, bool shared) {
  if (::madvise(p, bytes, MADV_HUGEPAGE) != 0) return PageKind::kNormal;
  if (!shared) return PageKind::kTransparentHuge;
  std::ifstream sysfs(kShmemThpPath);
  std::stringstream text;
  text << sysfs.rdbuf();
  return ShmemHugePagesAllowed(text.str()) ? PageKind::kTransparentHuge
                                           : PageKind::kNormal;
}
#else
PageKind Pool::AdviseHugePages(char*, uint64_t, bool) {
  return PageKind::kNormal;
}
#endif

absl::string_view PageKindName(PageKind kind) {
  switch (kind) {
    case PageKind::kHugeTlb:
      return "2MiB huge pages (hugetlb)";
    case PageKind::kTransparentHuge:
      return "transparent huge pages (advised)";
    case PageKind::kNormal:
      return "normal pages";
  }
  return "unknown";
}

absl::StatusOr<Pool> Pool::Create(uint64_t bytes, bool huge_pages,
                                  bool populate, bool shared) {
  return CreateWith(bytes, huge_pages, populate, shared, &::mmap);
}

bool Pool::ShmemHugePagesAllowed(absl::string_view sysfs_text) {
  for (absl::string_view word :
       absl::StrSplit(sysfs_text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (word == "[always]" || word == "[within_size]" || word == "[advise]" ||
        word == "[force]") {
      return true;
    }
  }
  return false;
}

absl::StatusOr<Pool> Pool::CreateShared(uint64_t bytes, bool huge_pages,
                                        MapFn map) {
  // Explicit huge pages: a hugetlb memfd reserves its pages when mapped, so
  // on hosts without reserved huge pages the mmap fails (ENOMEM) and we fall
  // back, silently as for private pools.
  if (huge_pages && kHugeTlbMapFlag != 0 && bytes % kHugePageBytes == 0) {
    absl::StatusOr<MemoryFile> huge =
        CreateMemoryFile(kSharedPoolName, bytes, MemoryFilePages::kHuge2MiB);
    if (huge.ok()) {
      FdCloser fd{huge->fd};
      void* p =
          map(nullptr, bytes, kProt, MAP_SHARED | kHugeTlbMapFlag, fd.fd, 0);
      if (p != MAP_FAILED) {
        return Pool(static_cast<char*>(p), bytes, PageKind::kHugeTlb,
                    fd.Release());
      }
    }
  }
  absl::StatusOr<MemoryFile> file =
      CreateMemoryFile(kSharedPoolName, bytes, MemoryFilePages::kNormal);
  if (!file.ok()) {
    if (absl::IsResourceExhausted(file.status())) {
      return absl::ResourceExhaustedError(
          absl::StrCat(file.status().message(), ", for a ", FormatSize(bytes),
                       " shared pool (lower the capacity)"));
    }
    return absl::Status(
        file.status().code(),
        absl::StrCat("cannot create a shared pool: ", file.status().message()));
  }
  FdCloser fd{file->fd};
  void* p = map(nullptr, bytes, kProt, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of a ", FormatSize(bytes),
                                             " shared pool (lower the "
                                             "capacity)"));
  }
  const PageKind kind =
      huge_pages ? AdviseHugePages(static_cast<char*>(p), bytes, true)
                 : PageKind::kNormal;
  return Pool(static_cast<char*>(p), bytes, kind, fd.Release());
}

absl::Status Pool::Populate(char* p, uint64_t bytes, bool use_madvise) {
  if (use_madvise && PopulateByAdvice(p, bytes)) return absl::OkStatus();
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
                                      bool populate, bool shared, MapFn map) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("pool size is 0; give a capacity > 0");
  }
  if (shared) {
    MESHPOOL_ASSIGN_OR_RETURN(Pool pool, CreateShared(bytes, huge_pages, map));
    if (populate) MESHPOOL_RETURN_IF_ERROR(Populate(pool.data_, bytes, true));
    return pool;
  }
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  // Explicit huge pages first: they need a reserved pool (the kernel's
  // vm.nr_hugepages), which most hosts lack, so failure here is
  // expected and silent.
  if (huge_pages && kHugeTlbMapFlag != 0 && bytes % kHugePageBytes == 0) {
    void* p = map(nullptr, bytes, kProt, kFlags | kHugeTlbMapFlag, -1, 0);
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
  const PageKind kind =
      huge_pages ? AdviseHugePages(static_cast<char*>(p), bytes, false)
                 : PageKind::kNormal;
  Pool pool(static_cast<char*>(p), bytes, kind);  // unmaps on error
  if (populate) MESHPOOL_RETURN_IF_ERROR(Populate(pool.data_, bytes, true));
  return pool;
}

Pool::Pool(Pool&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      kind_(other.kind_),
      fd_(std::exchange(other.fd_, -1)) {}

Pool& Pool::operator=(Pool&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    kind_ = other.kind_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Pool::~Pool() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace meshpool::store
