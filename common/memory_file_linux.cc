// Memory files on Linux (memory_file.h): sealed memfds. The read-only view
// is the same memfd opened again O_RDONLY through /proc/self/fd, so a
// process holding only it cannot map it writable (on every kernel with
// memfds, where F_SEAL_FUTURE_WRITE needs 5.1).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/memory_file.h"

namespace meshpool {
namespace {

// memfd_create's MFD_HUGE_2MB (<linux/memfd.h> clashes with <sys/mman.h>):
// log2 of the page size in the flag's bits 26 and up.
constexpr unsigned kMfdHugeShift = 26;
constexpr unsigned kMfdHuge2Mb = 21u << kMfdHugeShift;
// What every memory file is sealed with.
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
// memfd names are at most 249 bytes.
constexpr size_t kMaxName = 200;

}  // namespace

absl::StatusOr<MemoryFile> CreateMemoryFile(absl::string_view name,
                                            uint64_t bytes,
                                            MemoryFilePages pages,
                                            bool read_only_too) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("a memory file of 0 bytes; give a size");
  }
  if (name.size() > kMaxName || name.find('\0') != name.npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory file name of ", name.size(),
                     " bytes; give one of at most ", kMaxName));
  }
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (pages == MemoryFilePages::kHuge2MiB) flags |= MFD_HUGETLB | kMfdHuge2Mb;
  MemoryFile file;
  file.fd = ::memfd_create(std::string(name).c_str(), flags);
  if (file.fd < 0) {
    if (errno == ENOSYS) {
      return absl::FailedPreconditionError(
          "memfd_create is missing: meshpool's shared pools need Linux >= "
          "3.17 with memfd sealing");
    }
    return ErrnoToStatus(errno, "memfd_create");
  }
  absl::Status status;
  if (::ftruncate(file.fd, static_cast<off_t>(bytes)) != 0) {
    status = ErrnoToStatus(
        errno, absl::StrCat("sizing a ", FormatSize(bytes), " memfd"));
  } else if (::fcntl(file.fd, F_ADD_SEALS, kSeals) != 0) {
    status = absl::InternalError(
        ErrnoToStatus(errno, "sealing a memfd (F_ADD_SEALS)").message());
  } else if (read_only_too) {
    const std::string self = absl::StrCat("/proc/self/fd/", file.fd);
    file.read_only_fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
    if (file.read_only_fd < 0) {
      status = ErrnoToStatus(errno, absl::StrCat("opening ", self,
                                                 " read-only (is /proc "
                                                 "mounted?)"));
    }
  }
  if (!status.ok()) {
    ::close(file.fd);
    return status;
  }
  return file;
}

absl::Status CheckMemoryFileFixed(int fd, absl::string_view what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        " is not a memfd sealed against shrinking (F_SEAL_SHRINK); "
        "whoever maps it could be killed by SIGBUS if it shrank: create the "
        "memory with CreateMemoryFile (a node's pool: Pool::Create(..., "
        "shared=true))"));
  }
  return absl::OkStatus();
}

}  // namespace meshpool
