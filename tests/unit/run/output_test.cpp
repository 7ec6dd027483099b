// skt-run's output when its reader is gone (the ssh connection that started it dropped, the `| tee`
// after it ended): a write that fails goes on in the fallback file, and nothing kills skt-run. Each
// case runs in a child process, whose standard output is a pipe with its read end closed, since the
// module acts on the process's own descriptors and signal handling.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "daemon/output.hpp"

namespace skt::run {
namespace {

// A child's wait status: a normal exit with code 0, else how it ended.
::testing::AssertionResult ExitedWithZero(int status) {
  if (WIFSIGNALED(status))
    return ::testing::AssertionFailure() << "killed by signal " << WTERMSIG(status);
  if (!WIFEXITED(status)) return ::testing::AssertionFailure() << "wait status " << status;
  if (WEXITSTATUS(status) != 0)
    return ::testing::AssertionFailure() << "exit " << WEXITSTATUS(status);
  return ::testing::AssertionSuccess();
}

class Output : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("skt-output-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read(const std::string& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Runs `body` in a child whose standard output is a pipe that nobody reads and whose standard
  // error is the file "err"; returns the child's wait status (body's result as its exit code).
  int with_stdout_unread(const std::function<int()>& body) const {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) return -1;
    ::close(pipe_fds[0]);  // before the fork: no process may read it, even for a moment
    const std::string err = path("err");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(pipe_fds[1], STDOUT_FILENO);
      ::close(pipe_fds[1]);
      const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(err_fd, STDERR_FILENO);
      ::close(err_fd);
      ::_exit(body());
    }
    ::close(pipe_fds[1]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }

 private:
  std::filesystem::path dir_;
};

TEST_F(Output, AWriteIntoAPipeWithoutReaderGoesOnInTheFallbackAndIsAnnounced) {
  const std::string fallback = path("output");
  const int status = with_stdout_unread([&] {
    output::divert_failures_to(fallback);
    output::write(STDOUT_FILENO, "first line\n");
    output::write(STDOUT_FILENO, "second line\n");
    return output::diverted_to() == fallback ? 0 : 1;
  });
  EXPECT_TRUE(ExitedWithZero(status));
  const std::string kept = read(fallback);
  EXPECT_NE(kept.find("skt-run's standard output could not be written (Broken pipe): it goes on "
                      "in this file\nfirst line\nsecond line\n"),
            std::string::npos)
      << kept;
  EXPECT_NE(read(path("err"))
                .find("skt-run: its standard output could not be written (Broken "
                      "pipe): it goes on in " +
                      fallback),
            std::string::npos);
}

TEST_F(Output, ABrokenPipeIsDivertedBeforeAProgramStartedWritesIntoIt) {
  const std::string fallback = path("output");
  const int status = with_stdout_unread([&] {
    output::divert_failures_to(fallback);
    output::divert_if_broken(STDOUT_FILENO);
    // A probe or a tool inherits the descriptor: without the divert it would die of SIGPIPE.
    return std::system("echo from a program") == 0 ? 0 : 1;
  });
  EXPECT_TRUE(ExitedWithZero(status));
  const std::string kept = read(fallback);
  EXPECT_NE(kept.find("skt-run's standard output is closed at the other end: it goes on in this "
                      "file\nfrom a program\n"),
            std::string::npos)
      << kept;
}

TEST_F(Output, AFallbackThatCannotBeOpenedDropsTheOutputAndNothingDies) {
  const int status = with_stdout_unread([&] {
    output::divert_failures_to(path("no-such-directory/output"));
    output::write(STDOUT_FILENO, "lost\n");
    output::write(STDOUT_FILENO, "lost too\n");
    return output::diverted_to().empty() ? 0 : 1;
  });
  EXPECT_TRUE(ExitedWithZero(status));
}

TEST_F(Output, ProgramsStartedKeepSigpipeAsTheyWouldHaveHadIt) {
  // SIGPIPE is caught, not ignored: a caught signal is back to its default in a program started.
  const int caught = with_stdout_unread([&] {
    output::divert_failures_to(path("output"));
    const int shell = std::system("kill -PIPE $$");
    return WIFSIGNALED(shell) && WTERMSIG(shell) == SIGPIPE ? 0 : 1;
  });
  EXPECT_TRUE(ExitedWithZero(caught)) << "a program started did not die of SIGPIPE";
  // Ignored by whoever started skt-run: it stays ignored.
  const int ignored = with_stdout_unread([&] {
    ::signal(SIGPIPE, SIG_IGN);
    output::divert_failures_to(path("output"));
    struct sigaction now {};
    ::sigaction(SIGPIPE, nullptr, &now);
    return now.sa_handler == SIG_IGN ? 0 : 1;
  });
  EXPECT_TRUE(ExitedWithZero(ignored));
}

}  // namespace
}  // namespace skt::run
