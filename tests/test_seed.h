// tests/: the seed of a randomized test. Random per run and printed, so a
// failure names it; MESHPOOL_TEST_SEED=<n> replays a printed seed.
//
// Thread-safe.
#ifndef MESHPOOL_TESTS_TEST_SEED_H_
#define MESHPOOL_TESTS_TEST_SEED_H_

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

namespace meshpool::testing {

inline uint64_t TestSeed() {
  uint64_t seed;
  if (const char* fixed = std::getenv("MESHPOOL_TEST_SEED")) {
    seed = std::strtoull(fixed, nullptr, 10);
  } else {
    std::random_device rd;
    seed = (uint64_t{rd()} << 32) ^ rd();
  }
  std::cout << "seed=" << seed << " (replay: MESHPOOL_TEST_SEED=" << seed << ")"
            << std::endl;
  return seed;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_TEST_SEED_H_
