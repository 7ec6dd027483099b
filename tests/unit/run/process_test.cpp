// skt-run's programs run side by side with a deadline (its node probes): each one's output and
// exit code, in order, and a program that overstays killed with everything it started.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "daemon/process.hpp"

namespace skt::run {
namespace {

// Whether `pid` has exited: gone, or a zombie waiting for its new parent to reap it.
bool exited(pid_t pid) {
  const char state = process_state(pid);
  return state == '\0' || state == 'Z';
}

TEST(CaptureEach, GivesEveryCommandsOutputAndExitCodeInOrder) {
  const auto results = capture_each(
      {{"sh", "-c", "echo one"}, {"sh", "-c", "echo two; exit 3"}, {"sh", "-c", "kill -TERM $$"}},
      60);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].out, "one\n");
  EXPECT_EQ(results[0].code, 0);
  EXPECT_EQ(results[1].out, "two\n");
  EXPECT_EQ(results[1].code, 3);
  EXPECT_EQ(results[2].code, 128 + SIGTERM);
  for (const auto& r : results)
    EXPECT_FALSE(r.timed_out);
}

TEST(CaptureEach, KillsACommandPastItsDeadlineWithWhatItStarted) {
  // The command starts a process of its own that holds the pipe, as ssh or a hung mount would.
  const auto results = capture_each({{"sh", "-c", "sleep 1000 & echo $!; wait"}}, 1.0);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].timed_out);
  EXPECT_EQ(results[0].code, 128 + SIGKILL);
  ASSERT_FALSE(results[0].out.empty()) << "the command did not say what it started";
  const pid_t started = std::stoi(results[0].out);
  // Killed with its group; its new parent reaps it at its own pace.
  for (int tries = 0; tries < 200 && !exited(started); ++tries)
    ::usleep(5000);
  EXPECT_TRUE(exited(started)) << "pid " << started;
}

TEST(CaptureEach, ReportsAMissingProgram) {
  EXPECT_THROW(capture_each({{"/nonexistent/probe", "n1"}}, 1), std::system_error);
}

}  // namespace
}  // namespace skt::run
