// Memory files (common/memory_file.h): zeroed, fixed in size, a read-only
// view that cannot be mapped writable, and the POSIX implementation's
// refusal of a system that lets a shared memory object change size (Linux
// is one, so the check is shown to work here; macOS, which it is for, was
// not available).
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/memory_file.h"
#include "gtest/gtest.h"

namespace meshpool {
namespace {

constexpr uint64_t kBytes = 1 << 20;

struct Closer {
  MemoryFile file;
  ~Closer() {
    if (file.fd >= 0) ::close(file.fd);
    if (file.read_only_fd >= 0) ::close(file.read_only_fd);
  }
};

TEST(MemoryFileTest, ANewMemoryFileIsZeroedAndOfItsSize) {
  absl::StatusOr<MemoryFile> f =
      CreateMemoryFile("test-zeroed", kBytes, MemoryFilePages::kNormal);
  ASSERT_TRUE(f.ok()) << f.status();
  Closer c{*f};
  struct stat st {};
  ASSERT_EQ(::fstat(f->fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kBytes);
  EXPECT_EQ(f->read_only_fd, -1);
  void* p = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, f->fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (uint64_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(bytes[i], 0) << i;
  ::munmap(p, kBytes);
}

TEST(MemoryFileTest, NoHolderCanResizeIt) {
  absl::StatusOr<MemoryFile> f =
      CreateMemoryFile("test-fixed", kBytes, MemoryFilePages::kNormal);
  ASSERT_TRUE(f.ok()) << f.status();
  Closer c{*f};
  EXPECT_NE(::ftruncate(f->fd, kBytes / 2), 0);
  EXPECT_NE(::ftruncate(f->fd, kBytes * 2), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(f->fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kBytes);
  EXPECT_TRUE(CheckMemoryFileFixed(f->fd, "the test file").ok());
}

TEST(MemoryFileTest, AFileThatCanShrinkIsRefusedByTheCheck) {
  char path[] = "/tmp/meshpool-memfile-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, kBytes), 0);
  const absl::Status s = CheckMemoryFileFixed(fd, "a plain file");
  ::close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("a plain file"), std::string::npos) << s;
}

TEST(MemoryFileTest, TheReadOnlyViewSeesWritesAndCannotBeMappedWritable) {
  absl::StatusOr<MemoryFile> f = CreateMemoryFile(
      "test-view", kBytes, MemoryFilePages::kNormal, /*read_only_too=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  Closer c{*f};
  ASSERT_GE(f->read_only_fd, 0);
  EXPECT_EQ(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   f->read_only_fd, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  void* w =
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
  void* r = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, f->read_only_fd, 0);
  ASSERT_NE(w, MAP_FAILED);
  ASSERT_NE(r, MAP_FAILED);
  static_cast<char*>(w)[12345] = 'x';
  EXPECT_EQ(static_cast<const char*>(r)[12345], 'x');
  EXPECT_TRUE(CheckMemoryFileFixed(f->read_only_fd, "the view").ok());
  ::munmap(w, kBytes);
  ::munmap(r, kBytes);
}

TEST(MemoryFileTest, ZeroBytesIsInvalidArgument) {
  EXPECT_EQ(CreateMemoryFile("test-empty", 0, MemoryFilePages::kNormal)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreatePosixMemoryFile("test", 0, MemoryFilePages::kNormal, false)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PosixMemoryFileTest, ExplicitHugePagesAreUnimplemented) {
  EXPECT_EQ(
      CreatePosixMemoryFile("test", kBytes, MemoryFilePages::kHuge2MiB, false)
          .status()
          .code(),
      absl::StatusCode::kUnimplemented);
}

#ifdef __linux__
// Linux lets a shared memory object be resized at any time, so the POSIX
// implementation (macOS's) must refuse to hand one out here, and leave no
// object behind in /dev/shm.
TEST(PosixMemoryFileTest, ASystemThatLetsTheSizeChangeIsRefused) {
  absl::StatusOr<MemoryFile> f = CreatePosixMemoryFile(
      "tstrefus", kBytes, MemoryFilePages::kNormal, /*read_only_too=*/true);
  ASSERT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition)
      << f.status();
  EXPECT_NE(f.status().message().find("can still be resized"),
            std::string::npos)
      << f.status();
  DIR* dir = ::opendir("/dev/shm");
  ASSERT_NE(dir, nullptr);
  while (dirent* e = ::readdir(dir)) {
    EXPECT_NE(std::string(e->d_name).rfind("mp-tstrefus-", 0), 0u)
        << "left behind: /dev/shm/" << e->d_name;
  }
  ::closedir(dir);
}
#else
TEST(PosixMemoryFileTest, ThisSystemFixesTheSizeOfASharedMemoryObject) {
  absl::StatusOr<MemoryFile> f = CreatePosixMemoryFile(
      "tstfixed", kBytes, MemoryFilePages::kNormal, /*read_only_too=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  Closer c{*f};
  EXPECT_NE(::ftruncate(f->fd, kBytes / 2), 0);
}
#endif

}  // namespace
}  // namespace meshpool
