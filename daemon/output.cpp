#include "daemon/output.hpp"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

namespace skt::run::output {
namespace {

extern "C" void on_broken_pipe(int) {}

struct Streams {
  std::mutex mutex;
  std::string fallback;  // empty until divert_failures_to
  std::string used;      // the fallback, once output went to it
  int file = -1;         // the fallback, opened at the first failure
  bool diverted[3] = {false, false, false};
};

Streams& streams() {
  static Streams s;
  return s;
}

const char* stream_name(int fd) {
  return fd == STDOUT_FILENO ? "standard output" : "standard error";
}

// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      // A descriptor left non-blocking by whoever started skt-run: wait as a blocking one would.
      pollfd ready{fd, POLLOUT, 0};
      ::poll(&ready, 1, -1);
    } else if (n == 0 || errno != EINTR) {
      return n == 0 ? EIO : errno;
    }
  }
  return 0;
}

void write_locked(Streams& s, int fd, std::string_view bytes);

// Points fd at the fallback (or /dev/null) and says why, there and on the other stream. Called
// with the mutex held.
void divert(Streams& s, int fd, const std::string& why) {
  if (s.file < 0) {
    s.file = ::open(s.fallback.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s.file >= 0) {
      s.used = s.fallback;
    } else {
      s.file = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    }
  }
  // dup2 leaves fd inheritable: the programs skt-run starts from now on write there too.
  if (s.file >= 0) ::dup2(s.file, fd);
  s.diverted[fd] = true;
  const auto now = std::chrono::system_clock::now();
  write_all(fd, fmt::format("[skt-run {:%Y-%m-%d %H:%M:%S}] skt-run's {} {}: it goes on in this "
                            "file\n",
                            fmt::localtime(std::chrono::system_clock::to_time_t(now)),
                            stream_name(fd), why));
  const int other = fd == STDOUT_FILENO ? STDERR_FILENO : STDOUT_FILENO;
  if (!s.diverted[other] && !s.used.empty()) {
    write_locked(
        s, other,
        fmt::format("skt-run: its {} {}: it goes on in {}\n", stream_name(fd), why, s.used));
  }
}

void write_locked(Streams& s, int fd, std::string_view bytes) {
  const int error = write_all(fd, bytes);
  if (error == 0 || s.diverted[fd] || s.fallback.empty()) return;
  divert(s, fd, fmt::format("could not be written ({})", std::strerror(error)));
  write_all(fd, bytes);
}

}  // namespace

void divert_failures_to(std::string fallback) {
  auto& s = streams();
  {
    const std::lock_guard lock(s.mutex);
    s.fallback = std::move(fallback);
  }
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  if (current.sa_handler == SIG_IGN) return;
  struct sigaction action {};
  action.sa_handler = on_broken_pipe;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGPIPE, &action, nullptr);
}

void write(int fd, std::string_view bytes) {
  auto& s = streams();
  const std::lock_guard lock(s.mutex);
  write_locked(s, fd, bytes);
}

void divert_if_broken(int fd) {
  auto& s = streams();
  const std::lock_guard lock(s.mutex);
  if (s.diverted[fd] || s.fallback.empty()) return;
  pollfd state{fd, 0, 0};
  if (::poll(&state, 1, 0) != 1 || (state.revents & (POLLERR | POLLHUP)) == 0) return;
  // The next write would fail: EPIPE (a pipe), EIO (a terminal hung up).
  divert(s, fd, "is closed at the other end");
}

std::string diverted_to() {
  auto& s = streams();
  const std::lock_guard lock(s.mutex);
  return s.used;
}

}  // namespace skt::run::output
