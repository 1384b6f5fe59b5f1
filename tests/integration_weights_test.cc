// `meshpool weights` end to end: the real binary loads generated
// safetensors models into a local cluster of real processes, lists, fetches
// and removes them; a load killed midway leaves no model behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "meshpool/weights.h"
#include "tests/integration_util.h"
#include "tests/safetensors_writer.h"
#include "tests/shell_util.h"

namespace meshpool {
namespace {

using client_internal::SafetensorsTensor;
using testing::Shell;
using testing::ShellResult;
using testing::TensorBytes;

constexpr uint64_t kSeed = 20261202;

SafetensorsTensor T(std::string name, DType dtype, std::vector<uint64_t> shape) {
  SafetensorsTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class WeightsCliTest : public ::testing::Test {
 protected:
  void Start(uint64_t capacity) {
    tools::LocalClusterOptions options;
    options.nodes = 3;
    options.capacity_bytes = capacity;
    cluster_ = testing::StartCluster(options);
    ASSERT_NE(cluster_, nullptr);
    client_ = testing::ConnectClient(cluster_->coordinator_address());
    ASSERT_NE(client_, nullptr);
    ASSERT_FALSE(dir_.path().empty());
  }

  ShellResult Meshpool(const std::string& args) {
    return Shell(absl::StrCat(MESHPOOL_BINARY, " ", args, " --coordinator ",
                              cluster_->coordinator_address()));
  }

  std::vector<std::string> RegionNames() {
    auto regions = ListRegions(*client_);
    EXPECT_TRUE(regions.ok()) << regions.status();
    std::vector<std::string> names;
    if (regions.ok()) {
      for (const auto& r : *regions) names.push_back(r.name);
    }
    return names;
  }

  testing::ScopedTempDir dir_;
  std::unique_ptr<tools::LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(WeightsCliTest, LoadLsGetRmRoundTripThroughTheBinary) {
  Start(64 << 20);
  auto model = testing::WriteShardedModel(
      dir_.path(),
      {{T("w1", DType::kF32, {1024, 1024}), T("b", DType::kF32, {7})},
       {T("w2", DType::kBF16, {3000, 700}), T("s", DType::kF64, {})}},
      kSeed);
  ASSERT_TRUE(model.ok()) << model.status();

  ShellResult load = Meshpool(absl::StrCat("weights load ", model->index_path,
                                           " --model tiny/m"));
  ASSERT_EQ(load.exit_code, 0) << load.output;
  EXPECT_TRUE(absl::StrContains(load.output, "loaded model tiny/m: 4 tensors"))
      << load.output;
  EXPECT_TRUE(absl::StrContains(load.output, "files 2/2")) << load.output;

  ShellResult ls = Meshpool("weights ls");
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_TRUE(absl::StrContains(ls.output, "tiny/m")) << ls.output;
  ShellResult tensors = Meshpool("weights ls --model tiny/m --json");
  ASSERT_EQ(tensors.exit_code, 0) << tensors.output;
  EXPECT_TRUE(absl::StrContains(
      tensors.output, R"({"name": "w2", "dtype": "BF16", "shape": [3000, 700])"))
      << tensors.output;

  const std::string out = dir_.path() + "/w2.bin";
  ShellResult get = Meshpool(
      absl::StrCat("weights get --model tiny/m --tensor w2 --verify -o ", out));
  ASSERT_EQ(get.exit_code, 0) << get.output;
  EXPECT_EQ(ReadFile(out), TensorBytes(kSeed, "w2", 0, 3000 * 700 * 2));
  ShellResult rows = Meshpool(absl::StrCat(
      "weights get --model tiny/m --tensor w2 --rows 10:20 -o ", out));
  ASSERT_EQ(rows.exit_code, 0) << rows.output;
  EXPECT_EQ(ReadFile(out), TensorBytes(kSeed, "w2", 10 * 1400, 10 * 1400));

  ShellResult again = Meshpool(absl::StrCat("weights load ", model->index_path,
                                            " --model tiny/m --quiet"));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_TRUE(absl::StrContains(again.output, "--replace")) << again.output;
  ShellResult replace = Meshpool(absl::StrCat(
      "weights load ", model->index_path, " --model tiny/m --replace --quiet"));
  EXPECT_EQ(replace.exit_code, 0) << replace.output;

  ShellResult missing = Meshpool("weights get --model tiny/m --tensor nope");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, "no tensor 'nope'"))
      << missing.output;
  const std::string garbage = dir_.path() + "/garbage.safetensors";
  ASSERT_TRUE(testing::WriteFileBytes(garbage, "not a safetensors file").ok());
  ShellResult bad = Meshpool(absl::StrCat("weights load ", garbage, " --model g"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(absl::StrContains(bad.output, garbage)) << bad.output;

  ShellResult rm = Meshpool("weights rm --model tiny/m");
  ASSERT_EQ(rm.exit_code, 0) << rm.output;
  ShellResult empty = Meshpool("weights ls");
  EXPECT_TRUE(absl::StrContains(empty.output, "no models loaded")) << empty.output;
  EXPECT_TRUE(RegionNames().empty());
  EXPECT_EQ(Meshpool("weights rm --model tiny/m").exit_code, 1);
}

// Starts `meshpool weights load` and SIGKILLs it as soon as it reports its
// first progress; returns what it printed.
std::string LoadAndKillMidway(const std::string& coordinator,
                              const std::string& file) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::execl(MESHPOOL_BINARY, MESHPOOL_BINARY, "weights", "load", file.c_str(),
            "--model", "big", "--parallel", "1", "--coordinator",
            coordinator.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string printed;
  FILE* in = ::fdopen(fds[0], "r");
  char line[512];
  while (std::fgets(line, sizeof(line), in) != nullptr) {
    printed += line;
    if (absl::StrContains(line, "files 0/1")) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  std::fclose(in);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return printed;
}

TEST_F(WeightsCliTest, KilledLoadLeavesNoModelAndRmCleansUp) {
  Start(96 << 20);
  const std::string file = dir_.path() + "/big.safetensors";
  ASSERT_TRUE(testing::WriteSafetensorsFile(
                  file, {T("w", DType::kU8, {uint64_t{128} << 20})}, kSeed)
                  .ok());
  std::string printed = LoadAndKillMidway(cluster_->coordinator_address(), file);
  ASSERT_TRUE(absl::StrContains(printed, "files 0/1")) << printed;
  EXPECT_FALSE(absl::StrContains(printed, "loaded model")) << printed;

  // No model is visible; the dead loader's staging region is.
  EXPECT_EQ(WeightStore::Open(*client_, "big").status().code(),
            absl::StatusCode::kNotFound);
  auto models = ListModels(*client_);
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_TRUE(models->empty());
  std::vector<std::string> regions = RegionNames();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(regions[0], "weights-loading/big#")) << regions[0];

  ShellResult rm = Meshpool("weights rm --model big");
  ASSERT_EQ(rm.exit_code, 0) << rm.output;
  EXPECT_TRUE(RegionNames().empty());
  // The nodes hold no region memory any more.
  EXPECT_TRUE(testing::WaitForStatus(*client_, [](const ClusterStatus& s) {
    uint64_t held = 0;
    for (const NodeStatus& n : s.nodes) held += n.slabs_region;
    return held == 0;
  }));
  // A fresh load completes and reads back.
  ShellResult load =
      Meshpool(absl::StrCat("weights load ", file, " --model big --quiet"));
  ASSERT_EQ(load.exit_code, 0) << load.output;
  auto store = WeightStore::Open(*client_, "big");
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<char> buf(4096);
  ASSERT_TRUE((*store)->ReadTensorSlice("w", 100 << 20, (100 << 20) + 4096,
                                        absl::MakeSpan(buf))
                  .ok());
  EXPECT_EQ(std::string(buf.data(), buf.size()),
            TensorBytes(kSeed, "w", 100 << 20, 4096));
}

}  // namespace
}  // namespace meshpool
