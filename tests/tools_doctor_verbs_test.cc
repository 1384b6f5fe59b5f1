// `meshpool doctor` on a host with an RDMA device (label `verbs`: the
// Soft-RoCE VM). Skips loudly elsewhere; fails under MESHPOOL_REQUIRE_VERBS=1.
#include <sys/wait.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/verbs_test_util.h"

namespace meshpool::tools {
namespace {

struct DoctorRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

DoctorRun Doctor(const std::string& args) {
  std::string command =
      absl::StrCat(MESHPOOL_BINARY, " doctor ", args, " 2>&1");
  DoctorRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
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
