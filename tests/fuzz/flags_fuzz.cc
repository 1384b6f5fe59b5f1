// Fuzzes the command line's parsing (tools/flags.h) and the size parser
// under it (common/common.h ParseSize), which read what users and scripts
// type. Input: arguments separated by NUL bytes, parsed against flags of
// every kind (value, boolean, alias), then every value read back as each
// type. Checks: every failure is InvalidArgument; a parsed size is one
// ParseSize accepts on its own.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/common.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/flags.h"

namespace {

void CheckInvalidArgumentOr(const absl::Status& status) {
  MESHPOOL_FUZZ_CHECK(status.ok() || absl::IsInvalidArgument(status),
                      status.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  CheckInvalidArgumentOr(meshpool::ParseSize(input).status());

  std::vector<std::string> args = absl::StrSplit(input, absl::ByChar('\0'));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  meshpool::tools::Flags flags("meshpool fuzz [--size N] ARGS", "fuzzing");
  flags.Define("size", "64MiB", "a size");
  flags.Define("count", "3", "an integer");
  flags.Define("ratio", "0.5", "a double");
  flags.Define("timeout", "2s", "a duration");
  flags.Define("name", "", "a string");
  flags.DefineBool("force", "a boolean");
  flags.Alias("s", "size");
  flags.Alias("f", "force");
  absl::Status parsed = flags.Parse(static_cast<int>(args.size()), argv.data());
  CheckInvalidArgumentOr(parsed);
  if (!parsed.ok()) return 0;
  (void)flags.Help();
  for (const char* name : {"size", "count", "ratio", "timeout", "name"}) {
    auto size_value = flags.GetSize(name);
    CheckInvalidArgumentOr(size_value.status());
    if (size_value.ok()) {
      auto again = meshpool::ParseSize(flags.Get(name));
      MESHPOOL_FUZZ_CHECK(again.ok() && *again == *size_value, name);
    }
    CheckInvalidArgumentOr(flags.GetInt(name).status());
    CheckInvalidArgumentOr(flags.GetDouble(name).status());
    CheckInvalidArgumentOr(flags.GetDuration(name).status());
  }
  (void)flags.GetBool("force");
  meshpool::testing::FuzzAccepted();
  return 0;
}
