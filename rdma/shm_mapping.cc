#include "rdma/shm_mapping.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/memory_file.h"
#include "rdma/shm_wire.h"

namespace meshpool::rdma::internal {

// Mappings up to this size are populated at connect.
constexpr uint64_t kShmPopulateMaxBytes = uint64_t{16} << 30;

absl::StatusOr<std::unique_ptr<ShmMapping>> ShmMapping::Map(int fd,
                                                            uint64_t bytes,
                                                            bool writable) {
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
#ifdef __linux__
  // The node faulted its pool in, but this process's page tables start
  // empty: without populating, every first touch of a 4 KiB page is a
  // shmem fault on the data path (measured: a third of a 2 MiB PUT's CPU).
  // Bounded, since populating costs page tables and time at connect.
  const int populate = bytes <= kShmPopulateMaxBytes ? MAP_POPULATE : 0;
#else
  const int populate = 0;  // no such flag; pages fault in on first touch
#endif
  void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED | populate, fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of ", FormatSize(bytes),
                                             " of shared memory"));
  }
#ifdef __linux__
  // A client's core dump need not carry the node's whole pool. Huge-page
  // advice lets shmem THP (where enabled) map the pool with huge entries.
  ::madvise(p, bytes, MADV_DONTDUMP);
  if (writable) ::madvise(p, bytes, MADV_HUGEPAGE);
#else
  (void)kShmPopulateMaxBytes;
#endif
  return std::unique_ptr<ShmMapping>(
      new ShmMapping(static_cast<uint8_t*>(p), bytes));
}

ShmMapping::~ShmMapping() { ::munmap(data_, size_); }

absl::StatusOr<uint64_t> FdSize(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(
        ErrnoToStatus(errno, "fstat of a shared memory fd").message());
  }
  return static_cast<uint64_t>(st.st_size);
}

absl::StatusOr<ShmControlPage> ShmControlPage::Create() {
  MESHPOOL_ASSIGN_OR_RETURN(
      MemoryFile file,
      CreateMemoryFile("meshpool-shm-control", kShmControlBytes,
                       MemoryFilePages::kNormal, /*read_only_too=*/true));
  ShmControlPage page;
  page.fd = UniqueFd(file.fd);
  page.read_only_fd = UniqueFd(file.read_only_fd);
  MESHPOOL_ASSIGN_OR_RETURN(
      page.mapping, ShmMapping::Map(page.fd.get(), kShmControlBytes, true));
  auto* control = reinterpret_cast<ShmControl*>(page.mapping->data());
  std::atomic_ref<uint64_t>(control->magic)
      .store(kShmControlMagic, std::memory_order_release);
  return page;
}

absl::StatusOr<std::shared_ptr<const ShmMapping>> ShmMappingCache::Map(
    int fd, bool writable) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(
        ErrnoToStatus(errno, "fstat of the node's memory fd").message());
  }
  if (st.st_size <= 0) {
    return absl::FailedPreconditionError(
        "the node sent an empty memory file; restart the node");
  }
  MESHPOOL_RETURN_IF_ERROR(CheckMemoryFileFixed(fd, "the node's memory fd"));
  if (st.st_ino == 0) {
    // No identity to share by: XNU's fstat of a shared memory object may
    // leave the inode number 0 (not checked on a Mac). Every endpoint then
    // maps the file itself rather than risk handing it another file's
    // mapping; the pages are still the node's.
    MESHPOOL_ASSIGN_OR_RETURN(
        std::unique_ptr<ShmMapping> own,
        ShmMapping::Map(fd, static_cast<uint64_t>(st.st_size), writable));
    return std::shared_ptr<const ShmMapping>(std::move(own));
  }
  const Key key{st.st_dev, st.st_ino, writable};
  absl::MutexLock lock(&mu_);
  absl::erase_if(mappings_,
                 [](const auto& entry) { return entry.second.expired(); });
  if (auto it = mappings_.find(key); it != mappings_.end()) {
    if (std::shared_ptr<const ShmMapping> live = it->second.lock()) {
      // Fixed in size; a file that grew (another one at the same inode
      // number) gets a new mapping.
      if (live->size() == static_cast<uint64_t>(st.st_size)) return live;
    }
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      std::shared_ptr<const ShmMapping> mapping,
      ShmMapping::Map(fd, static_cast<uint64_t>(st.st_size), writable));
  mappings_[key] = mapping;
  return mapping;
}

}  // namespace meshpool::rdma::internal
