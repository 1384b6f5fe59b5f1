// The `meshpool` command line against a real local cluster.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration_util.h"
#include "tests/shell_util.h"
#include "tests/temp_dir.h"

namespace meshpool {
namespace {

using testing::Shell;
using testing::ShellResult;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::LocalClusterOptions options;
    options.nodes = 3;
    options.capacity_bytes = 64 << 20;
    cluster_ = testing::StartCluster(options);
    ASSERT_NE(cluster_, nullptr);
    ASSERT_FALSE(dir_.path().empty());
  }
  std::string Meshpool(const std::string& args) const {
    return absl::StrCat(MESHPOOL_BINARY, " ", args, " --coordinator ",
                        cluster_->coordinator_address());
  }
  std::unique_ptr<tools::LocalCluster> cluster_;
  // Its own directory: the tcp and shm copies of this suite (and repeats)
  // run at once, and a shared file name let one test read another's file.
  testing::ScopedTempDir dir_;
};

TEST_F(CliTest, PutAndGetMoveAOneMiBFileByteForByte) {
  uint64_t seed = std::random_device()();
  std::cout << "seed=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  std::string data(1 << 20, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  std::string in = dir_.path() + "/cli_in.bin", out = dir_.path() + "/cli_out.bin";
  std::ofstream(in, std::ios::binary) << data;

  ShellResult put = Shell(Meshpool("put model.bin " + in));
  ASSERT_EQ(put.exit_code, 0) << put.output;
  ShellResult get = Shell(Meshpool("get model.bin -o " + out));
  ASSERT_EQ(get.exit_code, 0) << get.output;
  EXPECT_TRUE(ReadFile(out) == data) << "downloaded bytes differ";

  ShellResult to_stdout = Shell(Meshpool("get model.bin") + " > " + out);
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.output;
  EXPECT_TRUE(ReadFile(out) == data);

  ShellResult from_stdin = Shell("printf 'hello' | " + Meshpool("put greeting -"));
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.output;
  ShellResult hello = Shell(Meshpool("get greeting"));
  EXPECT_EQ(hello.output, "hello");
}

TEST_F(CliTest, DelStatAndErrorsReportClearly) {
  ASSERT_EQ(Shell("printf 'x' | " + Meshpool("put k1 -")).exit_code, 0);
  // Nodes count objects at their periodic index scan: wait for it.
  ShellResult stat;
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    stat = Shell(Meshpool("stat --json"));
    ASSERT_EQ(stat.exit_code, 0) << stat.output;
  } while (stat.output.find("\"objects\":1") == std::string::npos &&
           absl::Now() < deadline);
  EXPECT_NE(stat.output.find("\"id\":\"node-3\""), std::string::npos)
      << stat.output;
  EXPECT_NE(stat.output.find("\"objects\":1"), std::string::npos) << stat.output;
  ShellResult table = Shell(Meshpool("stat"));
  EXPECT_NE(table.output.find("alive"), std::string::npos) << table.output;

  ASSERT_EQ(Shell(Meshpool("del k1")).exit_code, 0);
  ShellResult missing = Shell(Meshpool("get k1"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("not found"), std::string::npos)
      << missing.output;

  ShellResult no_coordinator =
      Shell(absl::StrCat("env -u MESHPOOL_COORDINATOR ", MESHPOOL_BINARY,
                         " get k1"));
  EXPECT_EQ(no_coordinator.exit_code, 2);
  EXPECT_NE(no_coordinator.output.find("MESHPOOL_COORDINATOR"),
            std::string::npos);
  ShellResult bad_flag = Shell(Meshpool("get k1 --frobnicate"));
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_NE(bad_flag.output.find("unknown flag"), std::string::npos);
  ShellResult help = Shell(absl::StrCat(MESHPOOL_BINARY, " bench --help"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--value-size"), std::string::npos);
}

TEST_F(CliTest, BenchPrintsThroughputAndPercentiles) {
  ShellResult bench = Shell(Meshpool(
      "bench --duration 1s --value-size 8KiB --threads 2 --batch 4 --keys 64"));
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  for (const char* word : {"ops/s", "GB/s", "p50", "p99", "p999",
                           "corrupt values 0"}) {
    EXPECT_NE(bench.output.find(word), std::string::npos)
        << word << " missing in:\n" << bench.output;
  }
}

}  // namespace
}  // namespace meshpool
