// meshpool/common: memory files, shared memory that one process creates and
// hands to others by descriptor (SCM_RIGHTS), and whose size no holder can
// change, so that no process mapping it can be killed (SIGBUS) by another
// shrinking it under its mapping.
//
//  * Linux (memory_file_linux.cc): a memfd sealed against shrinking,
//    growing and further seals; 2 MiB hugetlb memfds on request.
//  * Elsewhere (memory_file_posix.cc, for macOS): a POSIX shared memory
//    object under a random name, unlinked as soon as it is sized (a crash
//    leaves nothing behind). It relies on macOS fixing such an object's size
//    at its first ftruncate; no Mac was available to check that here, so
//    Create checks it on every call and fails, naming the assumption, on a
//    system that lets the size change again. Linux is such a system, which
//    the tests use to show the check works (CreatePosixMemoryFile).
//
// Functions are stateless and thread-safe. Descriptors returned are
// close-on-exec and owned by the caller.
#ifndef MESHPOOL_COMMON_MEMORY_FILE_H_
#define MESHPOOL_COMMON_MEMORY_FILE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool {

enum class MemoryFilePages {
  kNormal,
  kHuge2MiB,  // explicit 2 MiB pages; Linux only (hugetlb)
};

struct MemoryFile {
  int fd = -1;  // read-write
  // With Create's `read_only_too`: a second descriptor of the same memory
  // that can only be mapped read-only (opened O_RDONLY), to hand to
  // processes that must not write it; -1 otherwise.
  int read_only_fd = -1;
};

// Creates a memory file of `bytes` zeroed bytes; `name` is what the OS
// shows for it (Linux: /proc/<pid>/fd/N -> "/memfd:<name>"), at most 200
// characters. REQUIRES: bytes > 0. Errors: ResourceExhausted (no memory,
// descriptors or, for kHuge2MiB, huge pages: fall back to kNormal),
// Unimplemented (kHuge2MiB where the OS has no huge-page files),
// FailedPrecondition (the OS would let a holder resize it, see above),
// InvalidArgument (bytes or name), Internal.
absl::StatusOr<MemoryFile> CreateMemoryFile(absl::string_view name,
                                            uint64_t bytes,
                                            MemoryFilePages pages,
                                            bool read_only_too = false);

// OK when `fd` is a memory file whose size cannot change (as Create makes
// them); FailedPrecondition, naming `what`, otherwise. For what a process
// receives before it maps it.
absl::Status CheckMemoryFileFixed(int fd, absl::string_view what);

// The POSIX implementation, which CreateMemoryFile is off Linux; built on
// every platform so that Linux tests run it (kHuge2MiB: Unimplemented).
absl::StatusOr<MemoryFile> CreatePosixMemoryFile(absl::string_view name,
                                                 uint64_t bytes,
                                                 MemoryFilePages pages,
                                                 bool read_only_too);
absl::Status CheckPosixMemoryFileFixed(int fd, absl::string_view what);

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_MEMORY_FILE_H_
