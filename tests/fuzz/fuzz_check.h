// What a fuzz target asserts. A failed check prints what broke and aborts,
// so libFuzzer (and the corpus replay test) records the input as a crash.
// A target also counts the inputs its parser accepted (FuzzAccepted): the
// replay driver fails a corpus none of whose seeds is accepted, so seeds
// that a changed format made invalid are noticed.
#ifndef MESHPOOL_TESTS_FUZZ_FUZZ_CHECK_H_
#define MESHPOOL_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define MESHPOOL_FUZZ_CHECK(cond, what)                                     \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s (%s)\n", __FILE__, \
                   __LINE__, #cond, std::string(what).c_str());             \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

namespace meshpool::testing {

// Inputs accepted in this process so far.
inline int& FuzzAcceptedCount() {
  static int count = 0;
  return count;
}
inline void FuzzAccepted() { ++FuzzAcceptedCount(); }

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_FUZZ_FUZZ_CHECK_H_
