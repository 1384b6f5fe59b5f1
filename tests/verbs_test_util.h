// The one decision every test that needs an RDMA device makes: which device
// to use, or skip loudly, or (under MESHPOOL_REQUIRE_VERBS=1, as in CI and
// tools/vm/run_verbs_suite.sh) fail so that a run cannot pass by skipping.
//
//   TEST(Verbs, Something) {
//     MESHPOOL_SKIP_WITHOUT_VERBS();
//     std::string device = ::meshpool::testing::VerbsTestDevice();  // "rxe0"
//     ...
//   }
//
// or, for a binary whose every test needs a device, a global environment:
//   ::testing::AddGlobalTestEnvironment(new
//   meshpool::testing::VerbsEnvironment);
//
// The device is $MESHPOOL_TEST_VERBS_DEVICE, else the first device with an
// active port 1. MESHPOOL_SKIP_WITHOUT_VERBS works in TEST bodies and void
// fixture methods (SetUp). Note: code inside namespace meshpool that
// includes this must name gtest's namespace as ::testing.
#ifndef MESHPOOL_TESTS_VERBS_TEST_UTIL_H_
#define MESHPOOL_TESTS_VERBS_TEST_UTIL_H_

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"

namespace meshpool::testing {

inline bool VerbsRequired() {
  const char* env = std::getenv("MESHPOOL_REQUIRE_VERBS");
  return env != nullptr && std::string(env) == "1";
}

// The device to test on, or why there is none.
inline absl::StatusOr<std::string> FindVerbsTestDevice() {
  absl::StatusOr<std::vector<rdma::RdmaDeviceInfo>> devices =
      rdma::ListRdmaDevices();
  if (!devices.ok()) return devices.status();
  const char* env = std::getenv("MESHPOOL_TEST_VERBS_DEVICE");
  const std::string wanted = env != nullptr ? env : "";
  for (const rdma::RdmaDeviceInfo& d : *devices) {
    if (!wanted.empty() && d.name != wanted) continue;
    for (const rdma::RdmaPortInfo& p : d.ports) {
      if (p.port == 1 && p.active) return d.name;
    }
    if (!wanted.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MESHPOOL_TEST_VERBS_DEVICE=", wanted, " has no active port 1"));
    }
  }
  return absl::NotFoundError(
      wanted.empty() ? std::string("no RDMA device with an active port")
                     : absl::StrCat("no RDMA device named ", wanted));
}

// The device name, or "" when there is none (after the skip check it is
// never empty).
inline std::string VerbsTestDevice() {
  absl::StatusOr<std::string> device = FindVerbsTestDevice();
  return device.ok() ? *device : std::string();
}

inline std::string VerbsSkipMessage(const absl::Status& why) {
  return absl::StrCat(
      "\n*** SKIPPED: this test needs an RDMA device (", why.message(),
      ").\n*** Run the verbs tests in the Soft-RoCE VM:\n***   "
      "tools/vm/run_verbs_suite.sh BUILD_DIR, or tools/vm/run.sh -- BINARY"
      "\n*** MESHPOOL_REQUIRE_VERBS=1 turns this skip into a failure.\n");
}

inline std::string VerbsMissingMessage(const absl::Status& why) {
  return absl::StrCat("MESHPOOL_REQUIRE_VERBS=1 but no usable RDMA device: ",
                      why.message());
}

// Skips (or fails) every test of the binary when there is no device.
class VerbsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::StatusOr<std::string> device = FindVerbsTestDevice();
    if (device.ok()) return;
    if (VerbsRequired()) GTEST_FAIL() << VerbsMissingMessage(device.status());
    GTEST_SKIP() << VerbsSkipMessage(device.status());
  }
};

}  // namespace meshpool::testing

// Ends the calling function with GTEST_SKIP (no device) or a fatal failure
// (no device while MESHPOOL_REQUIRE_VERBS=1).
#define MESHPOOL_SKIP_WITHOUT_VERBS()                             \
  do {                                                            \
    absl::StatusOr<std::string> meshpool_device_ =                \
        ::meshpool::testing::FindVerbsTestDevice();               \
    if (!meshpool_device_.ok()) {                                 \
      if (::meshpool::testing::VerbsRequired()) {                 \
        GTEST_FAIL() << ::meshpool::testing::VerbsMissingMessage( \
            meshpool_device_.status());                           \
      }                                                           \
      GTEST_SKIP() << ::meshpool::testing::VerbsSkipMessage(      \
          meshpool_device_.status());                             \
    }                                                             \
  } while (0)

#endif  // MESHPOOL_TESTS_VERBS_TEST_UTIL_H_
