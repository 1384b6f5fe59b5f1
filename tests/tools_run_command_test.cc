// RunCommand: output, exit codes, standard error merged or not, a command
// that is not installed, and one that outlives its time limit.
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/run_command.h"

namespace meshpool::tools {
namespace {

TEST(RunCommandTest, CapturesOutputAndTheExitCode) {
  absl::StatusOr<CommandResult> run = RunCommand(
      {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, absl::Seconds(10),
      /*merge_stderr=*/false);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_EQ(run->output, "out\n");
}

TEST(RunCommandTest, MergedStandardErrorJoinsTheOutput) {
  absl::StatusOr<CommandResult> run =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2"}, absl::Seconds(10),
                 /*merge_stderr=*/true);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0);
  EXPECT_EQ(run->output, "out\nerr\n");
}

TEST(RunCommandTest, ACommandNotOnPathIsNotFound) {
  absl::StatusOr<CommandResult> run =
      RunCommand({"meshpool-no-such-command"}, absl::Seconds(10), false);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound) << run.status();
}

TEST(RunCommandTest, ACommandThatExits127IsNotNotFound) {
  absl::StatusOr<CommandResult> run =
      RunCommand({"/bin/sh", "-c", "exit 127"}, absl::Seconds(10), false);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 127);
}

TEST(RunCommandTest, ACommandPastItsLimitIsKilled) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> run =
      RunCommand({"/bin/sh", "-c", "sleep 30"}, absl::Milliseconds(200), false);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded)
      << run.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(RunCommandTest, ATimeoutAlsoKillsWhatTheCommandStarted) {
  // The shell forks sleep (two commands) and waits: killing the shell alone
  // would leave sleep holding the output, and this test's own output pipe,
  // for half a minute.
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> run = RunCommand(
      {"/bin/sh", "-c", "sleep 31.7; true"}, absl::Milliseconds(200), false);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string pgrep = "pgrep -f '^sleep 31.7$' >/dev/null";
  EXPECT_NE(std::system(pgrep.c_str()), 0) << "sleep 31.7 outlived the timeout";
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(RunCommandTest, ACommandThatClosesItsOutputButRunsOnIsKilledToo) {
  absl::StatusOr<CommandResult> run = RunCommand(
      {"/bin/sh", "-c", "exec >&-; sleep 30"}, absl::Milliseconds(200), false);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded)
      << run.status();
}

}  // namespace
}  // namespace meshpool::tools
