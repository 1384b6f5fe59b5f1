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

namespace meshpool::store {
namespace {

constexpr int kProt = PROT_READ | PROT_WRITE;
// memfd_create's MFD_HUGE_2MB (<linux/memfd.h> clashes with <sys/mman.h>):
// log2 of the page size in the flag's bits 26 and up.
constexpr unsigned kMfdHugeShift = 26;
static_assert(kHugePageBytes == 1ull << 21);
constexpr unsigned kMfdHuge2Mb = 21u << kMfdHugeShift;
// What a shared pool's memfd is sealed with (see pool.h).
constexpr int kPoolSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
constexpr char kShmemThpPath[] =
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

// Closes a memfd unless released (error paths of CreateShared).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
  int Release() { return std::exchange(fd, -1); }
};

// A memfd of `bytes`, sealed; -1 with errno set when any step fails.
int SealedMemfd(uint64_t bytes, unsigned extra_flags) {
  FdCloser fd{::memfd_create(kSharedPoolName,
                             MFD_CLOEXEC | MFD_ALLOW_SEALING | extra_flags)};
  if (fd.fd < 0) return -1;
  if (::ftruncate(fd.fd, static_cast<off_t>(bytes)) != 0) return -1;
  if (::fcntl(fd.fd, F_ADD_SEALS, kPoolSeals) != 0) return -1;
  return fd.Release();
}

}  // namespace

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
  if (huge_pages && bytes % kHugePageBytes == 0) {
    FdCloser fd{SealedMemfd(bytes, MFD_HUGETLB | kMfdHuge2Mb)};
    if (fd.fd >= 0) {
      void* p = map(nullptr, bytes, kProt, MAP_SHARED | MAP_HUGETLB, fd.fd, 0);
      if (p != MAP_FAILED) {
        return Pool(static_cast<char*>(p), bytes, PageKind::kHugeTlb,
                    fd.Release());
      }
    }
  }
  FdCloser fd{SealedMemfd(bytes, 0)};
  if (fd.fd < 0) {
    const int err = errno;
    if (err == ENOMEM || err == ENOSPC || err == EMFILE || err == ENFILE) {
      return ErrnoToStatus(err, absl::StrCat("memfd for a ", FormatSize(bytes),
                                             " shared pool (lower the "
                                             "capacity)"));
    }
    return absl::InternalError(absl::StrCat(
        "cannot create a sealed memfd for a shared pool: ",
        ErrnoToStatus(err, "memfd_create/ftruncate/F_ADD_SEALS").message(),
        "; this needs Linux >= 3.17 with memfd sealing"));
  }
  void* p = map(nullptr, bytes, kProt, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of a ", FormatSize(bytes),
                                             " shared pool (lower the "
                                             "capacity)"));
  }
  PageKind kind = PageKind::kNormal;
  if (huge_pages && ::madvise(p, bytes, MADV_HUGEPAGE) == 0) {
    std::ifstream sysfs(kShmemThpPath);
    std::stringstream text;
    text << sysfs.rdbuf();
    if (ShmemHugePagesAllowed(text.str())) kind = PageKind::kTransparentHuge;
  }
  return Pool(static_cast<char*>(p), bytes, kind, fd.Release());
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
