// tools/flags: library errors as the command line says them. The libraries
// name their own options; ForCommandLine names the flags. The messages here
// are the libraries' real ones, so a reworded library message that the
// table no longer matches fails here.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/evictor.h"
#include "tools/flags.h"
#include "tools/transport_flags.h"

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

// Parses `args` (no program name) into `flags`, which define the
// transport flags (with --transport when `with_transport`).
absl::Status ParseTransportFlags(Flags& flags, bool with_transport,
                                 std::vector<std::string> args) {
  DefineTransportFlags(flags, with_transport);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags.Parse(static_cast<int>(argv.size()), argv.data());
}

// `meshpool up` hands the nodes the uc flags but the coordinator only the
// RDMA ones (it defines no --profile: a uc flag there stops it).
TEST(TransportArgs, UcFlagsGoToNodesAndOnlyRdmaFlagsToTheCoordinator) {
  Flags flags("test", "test");
  ASSERT_TRUE(ParseTransportFlags(flags, true,
                                  {"--transport", "uc", "--profile",
                                   "thunderbolt", "--device", "rxe0"})
                  .ok());
  EXPECT_THAT(TransportArgs(flags),
              ::testing::ElementsAre("--transport", "uc", "--profile",
                                     "thunderbolt", "--device", "rxe0"));
  EXPECT_THAT(RdmaArgs(flags), ::testing::ElementsAre("--device", "rxe0"));
  auto options = UcOptionsFromFlags(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->link, rdma::UcLinkKind::kVerbs);  // the profile's link
  EXPECT_EQ(options->verbs.devices, std::vector<std::string>{"rxe0"});
}

TEST(TransportArgs, UnknownProfileIsInvalidArgument) {
  Flags flags("test", "test");
  ASSERT_TRUE(ParseTransportFlags(flags, true, {"--profile", "usb"}).ok());
  EXPECT_EQ(UcOptionsFromFlags(flags).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --busy-poll reaches the node's and the client's uc options and the child
// processes; past kMaxBusyPoll it is refused, naming the flag.
TEST(TransportArgs, BusyPollReachesNodeClientAndChildren) {
  Flags flags("test", "test");
  ASSERT_TRUE(ParseTransportFlags(flags, true,
                                  {"--transport", "uc", "--busy-poll", "2ms"})
                  .ok());
  auto options = UcOptionsFromFlags(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->busy_poll, absl::Milliseconds(2));
  auto rdma = ClientRdmaFromFlags(flags);
  ASSERT_TRUE(rdma.ok()) << rdma.status();
  EXPECT_EQ(rdma->busy_poll, absl::Milliseconds(2));
  EXPECT_THAT(RdmaArgs(flags), ::testing::ElementsAre("--busy-poll", "2ms"));

  Flags unset("test", "test");
  ASSERT_TRUE(ParseTransportFlags(unset, false, {}).ok());
  auto defaults = ClientRdmaFromFlags(unset);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->busy_poll, kDefaultBusyPoll);

  Flags over("test", "test");
  ASSERT_TRUE(ParseTransportFlags(over, false, {"--busy-poll", "20ms"}).ok());
  const absl::Status s = ClientRdmaFromFlags(over).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--busy-poll"));
}

}  // namespace
}  // namespace meshpool::tools
