// What the OS says about processes (common/process_info.h): this process's
// CPU time and threads, a child's exit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/process_info.h"
#include "gtest/gtest.h"

namespace meshpool {
namespace {

TEST(ProcessInfoTest, CpuSecondsGrowWhileThisProcessWorks) {
  absl::StatusOr<double> before = ProcessCpuSeconds(::getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  volatile uint64_t sink = 0;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  absl::StatusOr<double> after = ProcessCpuSeconds(::getpid());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(*after, *before);
}

TEST(ProcessInfoTest, AChildIsSeenToExitAndThenToBeGone) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_FALSE(ProcessHasExited(child));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  bool exited = false;
  for (int i = 0; i < 500 && !exited; ++i) {
    exited = ProcessHasExited(child);  // a zombie until reaped
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(exited);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(ProcessHasExited(child));
  EXPECT_EQ(ProcessCpuSeconds(child).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ProcessInfoTest, ThreadCountSeesANewThread) {
  absl::StatusOr<size_t> before = SelfThreadCount();
  ASSERT_TRUE(before.ok()) << before.status();
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  absl::StatusOr<size_t> during = SelfThreadCount();
  stop.store(true);
  t.join();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(*during, *before + 1);
}

}  // namespace
}  // namespace meshpool
