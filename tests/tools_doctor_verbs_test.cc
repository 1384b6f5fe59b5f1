// `meshpool doctor` on a host with an RDMA device (label `verbs`: the
// Soft-RoCE VM). Skips loudly elsewhere; fails under MESHPOOL_REQUIRE_VERBS=1.
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/shell_util.h"
#include "tests/verbs_test_util.h"

namespace meshpool::tools {
namespace {

using DoctorRun = ::meshpool::testing::ShellResult;

DoctorRun Doctor(const std::string& args) {
  return ::meshpool::testing::Shell(
      absl::StrCat(MESHPOOL_BINARY, " doctor ", args));
}

TEST(DoctorVerbsTest, DeviceWithActivePortAndRoceV2GidCanServe) {
  MESHPOOL_SKIP_WITHOUT_VERBS();
  std::string device = ::meshpool::testing::VerbsTestDevice();
  DoctorRun run =
      Doctor(absl::StrCat("--device ", device, " --pool-size 64MiB"));
  std::cout << run.output;
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(run.output, absl::StrCat("  ", device, " ")));
  EXPECT_TRUE(absl::StrContains(run.output, "ACTIVE"));
  EXPECT_TRUE(absl::StrContains(run.output, "RoCE v2") ||
              absl::StrContains(run.output, "InfiniBand"));
  EXPECT_TRUE(absl::StrContains(run.output, "ok in "));
  EXPECT_TRUE(absl::StrContains(
      run.output,
      absl::StrCat("doctor: this host can serve RDMA on ", device, "\n")));
}

TEST(DoctorVerbsTest, Rxe0HasARoceV2Ipv4Gid) {
  MESHPOOL_SKIP_WITHOUT_VERBS();
  std::string device = ::meshpool::testing::VerbsTestDevice();
  if (!absl::StartsWith(device, "rxe")) {
    GTEST_SKIP() << device << " is not a Soft-RoCE device";
  }
  DoctorRun run = Doctor(absl::StrCat("--device ", device, " --json"));
  std::cout << run.output;
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(run.output, "\"state\": \"ACTIVE\""));
  EXPECT_TRUE(absl::StrContains(run.output, "\"type\": \"RoCE v2\""));
  EXPECT_TRUE(absl::StrContains(run.output, "\"gid\": \"::ffff:"));
  EXPECT_TRUE(absl::StrContains(run.output, "\"can_serve\": true"));
}

}  // namespace
}  // namespace meshpool::tools
