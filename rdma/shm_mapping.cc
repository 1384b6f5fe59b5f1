#include "rdma/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/shm_wire.h"

namespace meshpool::rdma::internal {

// Mappings up to this size are populated at connect.
constexpr uint64_t kShmPopulateMaxBytes = uint64_t{16} << 30;

absl::StatusOr<std::unique_ptr<ShmMapping>> ShmMapping::Map(int fd,
                                                            uint64_t bytes,
                                                            bool writable) {
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  // The node faulted its pool in, but this process's page tables start
  // empty: without MAP_POPULATE every first touch of a 4 KiB page is a
  // shmem fault on the data path (measured: a third of a 2 MiB PUT's CPU).
  // Bounded, since populating costs page tables and time at connect.
  const int populate = bytes <= kShmPopulateMaxBytes ? MAP_POPULATE : 0;
  void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED | populate, fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of ", FormatSize(bytes),
                                             " of shared memory"));
  }
  // A client's core dump need not carry the node's whole pool. Huge-page
  // advice lets shmem THP (where enabled) map the pool with huge entries.
  ::madvise(p, bytes, MADV_DONTDUMP);
  if (writable) ::madvise(p, bytes, MADV_HUGEPAGE);
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

absl::Status CheckShrinkSealed(int fd, absl::string_view what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        " is not a memfd sealed against shrinking (F_SEAL_SHRINK); "
        "whoever maps it could be killed by SIGBUS if it shrank: create the "
        "pool with Pool::Create(..., shared=true)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShmControlPage> ShmControlPage::Create() {
  ShmControlPage page;
  page.fd = UniqueFd(
      ::memfd_create("meshpool-shm-control", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!page.fd.valid()) return ErrnoToStatus(errno, "memfd_create(control)");
  if (::ftruncate(page.fd.get(), kShmControlBytes) != 0) {
    return ErrnoToStatus(errno, "ftruncate(control)");
  }
  if (::fcntl(page.fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    return absl::InternalError(
        ErrnoToStatus(errno, "sealing the shm control memfd").message());
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      page.mapping, ShmMapping::Map(page.fd.get(), kShmControlBytes, true));
  auto* control = reinterpret_cast<ShmControl*>(page.mapping->data());
  std::atomic_ref<uint64_t>(control->magic)
      .store(kShmControlMagic, std::memory_order_release);
  // Clients may map it read-only only. Best effort: kernels before 5.1 lack
  // F_SEAL_FUTURE_WRITE (a client could then scribble on its own view of
  // which regions are live, nothing of the node's).
  ::fcntl(page.fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE);
  ::fcntl(page.fd.get(), F_ADD_SEALS, F_SEAL_SEAL);
  return page;
}

absl::StatusOr<std::shared_ptr<const ShmMapping>> ShmMappingCache::Map(
    int fd, bool writable) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(
        ErrnoToStatus(errno, "fstat of the node's memfd").message());
  }
  if (st.st_size <= 0) {
    return absl::FailedPreconditionError(
        "the node sent an empty memfd; restart the node");
  }
  MESHPOOL_RETURN_IF_ERROR(CheckShrinkSealed(fd, "the node's memory fd"));
  const Key key{st.st_dev, st.st_ino, writable};
  absl::MutexLock lock(&mu_);
  absl::erase_if(mappings_,
                 [](const auto& entry) { return entry.second.expired(); });
  if (auto it = mappings_.find(key); it != mappings_.end()) {
    if (std::shared_ptr<const ShmMapping> live = it->second.lock()) {
      // Shrink-sealed; a memfd that grew gets a new, larger mapping.
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
