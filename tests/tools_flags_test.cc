// tools/flags: library errors as the command line says them. The libraries
// name their own options; ForCommandLine names the flags. The messages here
// are the libraries' real ones, so a reworded library message that the
// table no longer matches fails here.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/evictor.h"
#include "tools/flags.h"

namespace meshpool::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ForCommandLine, WatermarkErrorNamesTheEvictFlags) {
  const absl::Status s = store::CheckWatermarks(0.5, 0.9);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_THAT(std::string(s.message()), HasSubstr("NodeOptions."));
  const std::string cli = ForCommandLine(s.message());
  EXPECT_THAT(cli, HasSubstr("--evict-low"));
  EXPECT_THAT(cli, HasSubstr("--evict-high"));
  EXPECT_THAT(cli, Not(HasSubstr("NodeOptions")));
}

TEST(ForCommandLine, OptionNamesBecomeFlagsAndOtherTextStays) {
  EXPECT_EQ(ForCommandLine("split the value or start nodes with larger slabs "
                           "(NodeOptions.slab_bytes)"),
            "split the value or start nodes with larger slabs (--slab-size)");
  EXPECT_EQ(ForCommandLine("model m is already loaded: set "
                           "LoadOptions.replace to replace it"),
            "model m is already loaded: set --replace to replace it");
  EXPECT_EQ(ForCommandLine("run without eviction (NodeOptions.evict = false)"),
            "run without eviction (--no-evict)");
  EXPECT_EQ(ForCommandLine("nothing to translate"), "nothing to translate");
}

}  // namespace
}  // namespace meshpool::tools
