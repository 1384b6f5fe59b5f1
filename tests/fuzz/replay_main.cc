// The driver of a fuzz target in a build without libFuzzer (gcc): runs the
// target once over every file named on the command line, or in a directory
// named there, in sorted order. It takes libFuzzer's replay command line
// ("-runs=0 DIR ..."; arguments starting with '-' are ignored), so CTest
// runs the same command in either build. Exits nonzero when no input was
// found, or when the target accepted none of them (FuzzAccepted): a corpus
// that vanished, or whose seeds a changed format made invalid, must not
// pass as replayed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    std::filesystem::path path(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
      if (ec) {
        std::fprintf(stderr, "cannot list %s: %s\n", argv[i],
                     ec.message().c_str());
        return 2;
      }
    } else {
      inputs.push_back(path);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr,
                 "no inputs: name seed files or corpus directories that "
                 "hold some\n");
    return 1;
  }
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(),
                 bytes.size());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  const int accepted = meshpool::testing::FuzzAcceptedCount();
  std::fprintf(stderr, "replayed %zu inputs, %d accepted\n", inputs.size(),
               accepted);
  if (accepted == 0) {
    std::fprintf(stderr,
                 "no seed was accepted: the format changed under the seeds; "
                 "rewrite them (tests/fuzz/make_seeds.cc)\n");
    return 1;
  }
  return 0;
}
