// What the store/pool tests share: a peer into Pool's injectable mmap, a
// recording mmap that always fails, and checks of a mapping's contents and
// residency. Test-only; single-threaded.
#ifndef MESHPOOL_TESTS_STORE_POOL_TEST_UTIL_H_
#define MESHPOOL_TESTS_STORE_POOL_TEST_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "store/pool.h"

namespace meshpool::store {

// Reaches Pool's injectable mmap.
class PoolTestPeer {
 public:
  static absl::StatusOr<Pool> CreateWith(uint64_t bytes, bool huge,
                                         Pool::MapFn map, bool shared = false) {
    return Pool::CreateWith(bytes, huge, /*populate=*/false, shared, map);
  }
  static bool ShmemHugePagesAllowed(absl::string_view text) {
    return Pool::ShmemHugePagesAllowed(text);
  }
  static absl::Status Populate(char* p, uint64_t bytes, bool use_madvise) {
    return Pool::Populate(p, bytes, use_madvise);
  }
};

inline std::vector<int>& MapCalls() {
  static std::vector<int> calls;
  return calls;
}

inline void* MmapAlwaysFails(void*, size_t, int, int flags, int, off_t) {
  MapCalls().push_back(flags);
  errno = ENOMEM;
  return MAP_FAILED;
}

inline bool AllZero(const char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; i += 4096) {
    if (p[i] != 0) return false;
  }
  return p[n - 1] == 0;
}

// mincore's vector: unsigned char on Linux, char on macOS.
#ifdef __APPLE__
using MincoreByte = char;
#else
using MincoreByte = unsigned char;
#endif

// Pages of [p, p + bytes) backed by memory now (mincore), of all of them.
inline std::pair<uint64_t, uint64_t> ResidentPages(const char* p,
                                                   uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<MincoreByte> vec((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(const_cast<char*>(p), bytes, vec.data()), 0);
  uint64_t resident = 0;
  for (MincoreByte v : vec) resident += v & 1;
  return {resident, vec.size()};
}

}  // namespace meshpool::store

#endif  // MESHPOOL_TESTS_STORE_POOL_TEST_UTIL_H_
