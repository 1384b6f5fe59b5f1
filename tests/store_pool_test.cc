// store/pool on any platform: the mapping and its zeroing, population,
// a refused mapping, moves, and shared pools' descriptors. Linux's huge
// pages, memfd seals and /proc checks are in store_pool_test_linux.cc.
#include <fcntl.h>

#include <cerrno>
#include <iostream>
#include <utility>

#include "gtest/gtest.h"
#include "store/pool.h"
#include "tests/store_pool_test_util.h"

namespace meshpool::store {
namespace {

TEST(StorePool, MapsZeroedWritableMemory) {
  absl::StatusOr<Pool> pool = Pool::Create(8 << 20, /*huge_pages=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::cout << "page kind: " << PageKindName(pool->page_kind()) << "\n";
  EXPECT_EQ(pool->size(), 8u << 20);
  ASSERT_NE(pool->data(), nullptr);
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
  pool->data()[pool->size() - 1] = 7;
  EXPECT_EQ(pool->data()[pool->size() - 1], 7);
}

TEST(StorePool, PopulatedPoolIsResidentAndZeroBeforeAnyTouch) {
  absl::StatusOr<Pool> lazy = Pool::Create(8 << 20, true);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_EQ(ResidentPages(lazy->data(), lazy->size()).first, 0u);
  absl::StatusOr<Pool> pool = Pool::Create(8 << 20, true, /*populate=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto [resident, pages] = ResidentPages(pool->data(), pool->size());
  EXPECT_EQ(resident, pages) << PageKindName(pool->page_kind());
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
}

TEST(StorePool, RefusedMappingIsResourceExhausted) {
  absl::StatusOr<Pool> pool =
      PoolTestPeer::CreateWith(4 << 20, true, &MmapAlwaysFails);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(StorePool, ZeroBytesIsInvalidArgument) {
  EXPECT_EQ(Pool::Create(0, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StorePool, MoveTransfersOwnership) {
  absl::StatusOr<Pool> a = Pool::Create(1 << 20, false);
  ASSERT_TRUE(a.ok()) << a.status();
  char* data = a->data();
  Pool b = *std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a->data(), nullptr);  // NOLINT: moved-from state is specified
  Pool c = std::move(b);
  EXPECT_EQ(c.data(), data);
  c.data()[0] = 1;
}

TEST(StorePool, PrivatePoolHasNoFd) {
  absl::StatusOr<Pool> pool = Pool::Create(1 << 20, false);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_FALSE(pool->shared());
  EXPECT_EQ(pool->fd(), -1);
}

TEST(StorePool, PopulatedSharedPoolIsResident) {
  absl::StatusOr<Pool> pool = Pool::Create(4 << 20, true, /*populate=*/true,
                                           /*shared=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto [resident, pages] = ResidentPages(pool->data(), pool->size());
  EXPECT_EQ(resident, pages) << PageKindName(pool->page_kind());
  EXPECT_TRUE(AllZero(pool->data(), pool->size()));
}

TEST(StorePool, RefusedSharedMappingIsResourceExhausted) {
  absl::StatusOr<Pool> pool = PoolTestPeer::CreateWith(
      4 << 20, true, &MmapAlwaysFails, /*shared=*/true);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(StorePool, MovingASharedPoolMovesItsFdAndDestructionClosesIt) {
  absl::StatusOr<Pool> a = Pool::Create(1 << 20, false, false, true);
  ASSERT_TRUE(a.ok()) << a.status();
  const int fd = a->fd();
  Pool b = *std::move(a);
  EXPECT_EQ(b.fd(), fd);
  EXPECT_EQ(a->fd(), -1);     // NOLINT: moved-from state is specified
  EXPECT_FALSE(a->shared());  // NOLINT
  {
    Pool c = std::move(b);
    EXPECT_EQ(::fcntl(fd, F_GETFD) >= 0, true);
  }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // closed with its Pool
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace meshpool::store
