// store/pool on Linux: huge pages (hugetlb first, the fallback when it is
// refused, THP for shared memory as the kernel's setting says), the
// populate fallback measured in /proc/self/statm, and a shared pool as a
// sealed memfd that another mapping shares. Linux only.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "store/pool.h"
#include "tests/store_pool_test_util.h"

namespace meshpool::store {
namespace {

// An mmap on a host without reserved huge pages.
void* MmapWithoutHugeTlb(void* addr, size_t len, int prot, int flags, int fd,
                         off_t off) {
  MapCalls().push_back(flags);
  if (flags & MAP_HUGETLB) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return ::mmap(addr, len, prot, flags, fd, off);
}

// This process's resident pages (/proc/self/statm). The shared zero page,
// which reading an untouched page maps, does not count.
uint64_t RssPages() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0;
  uint64_t resident = 0;
  statm >> size >> resident;
  EXPECT_TRUE(statm) << "cannot read /proc/self/statm";
  return resident;
}

TEST(StorePool, PopulateFallbackWithoutMadviseFaultsEveryPageIn) {
  absl::StatusOr<Pool> pool = Pool::Create((4 << 20) + 4096, false);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const uint64_t rss_before = RssPages();
  ASSERT_TRUE(PoolTestPeer::Populate(pool->data(), pool->size(),
                                     /*use_madvise=*/false)
                  .ok());
  auto [resident, pages] = ResidentPages(pool->data(), pool->size());
  EXPECT_EQ(resident, pages);
  EXPECT_GE(RssPages() - rss_before, pages);  // real pages, not the zero page
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
}

TEST(StorePool, FallsBackToNormalPagesWhenHugeTlbFails) {
  MapCalls().clear();
  absl::StatusOr<Pool> pool =
      PoolTestPeer::CreateWith(4 << 20, true, &MmapWithoutHugeTlb);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(MapCalls().size(), 2u);
  EXPECT_NE(MapCalls()[0] & MAP_HUGETLB, 0);
  EXPECT_EQ(MapCalls()[1] & MAP_HUGETLB, 0);
  EXPECT_NE(pool->page_kind(), PageKind::kHugeTlb);
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
}

TEST(StorePool, SizeNotMultipleOfHugePageSkipsHugeTlb) {
  MapCalls().clear();
  absl::StatusOr<Pool> pool =
      PoolTestPeer::CreateWith((4 << 20) + 4096, true, &MmapWithoutHugeTlb);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(MapCalls().size(), 1u);
  EXPECT_EQ(MapCalls()[0] & MAP_HUGETLB, 0);
}

TEST(StorePool, HugePagesOffUsesNormalPages) {
  MapCalls().clear();
  absl::StatusOr<Pool> pool =
      PoolTestPeer::CreateWith(4 << 20, false, &MmapWithoutHugeTlb);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(MapCalls().size(), 1u);
  EXPECT_EQ(pool->page_kind(), PageKind::kNormal);
}

// The target of /proc/self/fd/<fd>.
std::string FdTarget(int fd) {
  char buf[PATH_MAX] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(StorePool, SharedPoolIsASealedMemfdThatAnotherMappingShares) {
  constexpr uint64_t kBytes = 8 << 20;
  absl::StatusOr<Pool> pool =
      Pool::Create(kBytes, /*huge_pages=*/true, /*populate=*/false,
                   /*shared=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::cout << "page kind: " << PageKindName(pool->page_kind()) << "\n";
  ASSERT_TRUE(pool->shared());
  ASSERT_GE(pool->fd(), 0);
  EXPECT_NE(FdTarget(pool->fd()).find(std::string("memfd:") + kSharedPoolName),
            std::string::npos)
      << FdTarget(pool->fd());
  EXPECT_NE(::fcntl(pool->fd(), F_GETFD) & FD_CLOEXEC, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(pool->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kBytes);
  const int seals = ::fcntl(pool->fd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  if (pool->page_kind() != PageKind::kHugeTlb) {
    // Shared memory gets transparent huge pages only where the kernel says.
    std::ifstream sysfs("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    std::string setting((std::istreambuf_iterator<char>(sysfs)),
                        std::istreambuf_iterator<char>());
    EXPECT_EQ(pool->page_kind(), PoolTestPeer::ShmemHugePagesAllowed(setting)
                                     ? PageKind::kTransparentHuge
                                     : PageKind::kNormal)
        << setting;
  }
  EXPECT_TRUE(AllZero(pool->data(), kBytes));
  void* other = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                       pool->fd(), 0);
  ASSERT_NE(other, MAP_FAILED) << std::strerror(errno);
  char* mirror = static_cast<char*>(other);
  ASSERT_NE(mirror, pool->data());
  pool->data()[12345] = 42;
  EXPECT_EQ(mirror[12345], 42);
  mirror[kBytes - 1] = 7;
  EXPECT_EQ(pool->data()[kBytes - 1], 7);
  ::munmap(other, kBytes);
  // Nobody holding the fd can shrink the pool under the node (SIGBUS) or
  // add seals (F_SEAL_FUTURE_WRITE would stop clients from mapping it).
  EXPECT_NE(::ftruncate(pool->fd(), kBytes), -1);  // same size: allowed
  EXPECT_EQ(::ftruncate(pool->fd(), 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fcntl(pool->fd(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1);
}

TEST(StorePool, SharedPoolFallsBackToNormalMemfdWhenHugeTlbFails) {
  MapCalls().clear();
  absl::StatusOr<Pool> pool = PoolTestPeer::CreateWith(
      4 << 20, true, &MmapWithoutHugeTlb, /*shared=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // A kernel without hugetlbfs refuses the MFD_HUGETLB memfd before any
  // mapping; otherwise the hugetlb mapping was tried first.
  ASSERT_GE(MapCalls().size(), 1u);
  ASSERT_LE(MapCalls().size(), 2u);
  if (MapCalls().size() == 2) {
    EXPECT_NE(MapCalls()[0] & MAP_HUGETLB, 0);
  }
  EXPECT_EQ(MapCalls().back() & MAP_HUGETLB, 0);
  EXPECT_NE(MapCalls().back() & MAP_SHARED, 0);
  EXPECT_NE(pool->page_kind(), PageKind::kHugeTlb);
  EXPECT_GE(pool->fd(), 0);
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
}

TEST(StorePool, SharedPoolWithoutHugePagesMapsOnce) {
  MapCalls().clear();
  absl::StatusOr<Pool> pool = PoolTestPeer::CreateWith(
      4 << 20, false, &MmapWithoutHugeTlb, /*shared=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(MapCalls().size(), 1u);
  EXPECT_EQ(MapCalls()[0] & (MAP_SHARED | MAP_HUGETLB), MAP_SHARED);
  EXPECT_EQ(pool->page_kind(), PageKind::kNormal);
}

TEST(StorePool, ShmemTransparentHugePagesFollowTheKernelSetting) {
  EXPECT_TRUE(PoolTestPeer::ShmemHugePagesAllowed(
      "always within_size [advise] never deny force\n"));
  EXPECT_TRUE(PoolTestPeer::ShmemHugePagesAllowed(
      "[always] within_size advise never deny force"));
  EXPECT_TRUE(PoolTestPeer::ShmemHugePagesAllowed(
      "always [within_size] advise never deny force"));
  EXPECT_FALSE(PoolTestPeer::ShmemHugePagesAllowed(
      "always within_size advise [never] deny force\n"));
  EXPECT_FALSE(PoolTestPeer::ShmemHugePagesAllowed(
      "always within_size advise never [deny] force"));
  EXPECT_FALSE(PoolTestPeer::ShmemHugePagesAllowed(""));  // no THP at all
}

}  // namespace
}  // namespace meshpool::store
