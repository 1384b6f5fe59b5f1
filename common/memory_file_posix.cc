// Memory files from POSIX shared memory objects (memory_file.h): what
// CreateMemoryFile is off Linux, built everywhere so that Linux tests run
// it. The object gets a random name, is sized, opened again O_RDONLY for a
// read-only view, and unlinked, all at once. Its size must then be fixed:
// macOS refuses a second ftruncate of a shared memory object (EINVAL),
// which is what the probe below relies on and checks.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/common.h"
#include "common/memory_file.h"

namespace meshpool {
namespace {

// macOS limits shared memory object names to 31 characters (PSHMNAMLEN).
constexpr size_t kMaxObjectName = 31;
// Names tried before giving up (each is 64 random bits; a clash means
// something else is creating objects named like ours).
constexpr int kNameAttempts = 8;

void CloseIfOpen(int fd) {
  if (fd >= 0) ::close(fd);
}

int OpenCloexec(const std::string& path, int flags) {
  const int fd = ::shm_open(path.c_str(), flags, 0600);
  // shm_open's descriptors close on exec (POSIX leaves it open, macOS and
  // glibc set it); make sure.
  if (fd >= 0 && ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

absl::StatusOr<MemoryFile> CreatePosixMemoryFile(absl::string_view name,
                                                 uint64_t bytes,
                                                 MemoryFilePages pages,
                                                 bool read_only_too) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("a memory file of 0 bytes; give a size");
  }
  if (pages == MemoryFilePages::kHuge2MiB) {
    return absl::UnimplementedError(
        "explicit 2 MiB pages need Linux hugetlb; this system maps shared "
        "memory with its normal pages");
  }
  absl::BitGen gen;
  MemoryFile file;
  std::string path;
  for (int attempt = 0; attempt < kNameAttempts && file.fd < 0; ++attempt) {
    path = absl::StrFormat("/mp-%s-%016x", name.substr(0, 8),
                           absl::Uniform<uint64_t>(gen));
    static_assert(1 + 3 + 8 + 1 + 16 <= kMaxObjectName);
    file.fd = OpenCloexec(path, O_RDWR | O_CREAT | O_EXCL);
    if (file.fd < 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("shm_open ", path));
    }
  }
  if (file.fd < 0) {
    return absl::InternalError(absl::StrCat(
        "shm_open: ", kNameAttempts,
        " random names were all taken; is something creating /mp-* objects?"));
  }
  // Sized (and opened read-only) while it still has its name, then
  // unlinked whatever happened: nothing is left behind.
  absl::Status status;
  if (::ftruncate(file.fd, static_cast<off_t>(bytes)) != 0) {
    status = ErrnoToStatus(
        errno, absl::StrCat("sizing ", FormatSize(bytes), " of shared memory"));
  } else if (read_only_too &&
             (file.read_only_fd = OpenCloexec(path, O_RDONLY)) < 0) {
    status =
        ErrnoToStatus(errno, absl::StrCat("shm_open ", path, " read-only"));
  }
  ::shm_unlink(path.c_str());
  if (status.ok()) {
    status = CheckPosixMemoryFileFixed(file.fd, "a new shared memory object");
  }
  if (!status.ok()) {
    CloseIfOpen(file.fd);
    CloseIfOpen(file.read_only_fd);
    return status;
  }
  return file;
}

absl::Status CheckPosixMemoryFileFixed(int fd, absl::string_view what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("fstat of ", what));
  }
  if (st.st_size <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is empty; it was never sized"));
  }
  // Asking for the size it already has changes nothing where it succeeds.
  // For a read-only descriptor this fails everywhere, which proves only
  // that its holder cannot resize it; macOS lets no holder resize an object
  // once sized.
  if (::ftruncate(fd, st.st_size) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        " can still be resized: this system lets a shared memory object "
        "change size after it is sized, and meshpool's same-host path "
        "relies on it not doing so (as macOS does not), since a holder "
        "shrinking it would kill every process mapping it. Connect through "
        "the node's main address instead, and report this system"));
  }
  return absl::OkStatus();
}

}  // namespace meshpool
