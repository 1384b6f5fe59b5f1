// Memory files on macOS (memory_file.h): the POSIX implementation, whose
// size check relies on macOS fixing a shared memory object's size at its
// first ftruncate (checked on every Create).
#include "common/memory_file.h"

namespace meshpool {

absl::StatusOr<MemoryFile> CreateMemoryFile(absl::string_view name,
                                            uint64_t bytes,
                                            MemoryFilePages pages,
                                            bool read_only_too) {
  return CreatePosixMemoryFile(name, bytes, pages, read_only_too);
}

absl::Status CheckMemoryFileFixed(int fd, absl::string_view what) {
  return CheckPosixMemoryFileFixed(fd, what);
}

}  // namespace meshpool
