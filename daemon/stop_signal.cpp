#include "daemon/stop_signal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <system_error>

namespace skt::run {
namespace {

// A signal to skt-run is written to this pipe, which the run's loop watches.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal = sig;
  const char byte = 1;
  [[maybe_unused]] const auto n = ::write(g_signal_pipe[1], &byte, 1);
}

}  // namespace

void catch_stop_signals() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // One ignored already stays so: nohup ignores SIGHUP so that the job outlives the session,
    // and a shell without job control SIGINT for a command started with &.
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaction(sig, &action, nullptr);
  }
}

int stop_signal() noexcept {
  return g_signal.load();
}

int stop_signal_fd() noexcept {
  return g_signal_pipe[0];
}

void drain_stop_signal_fd() noexcept {
  char drain[16];
  [[maybe_unused]] const auto n = ::read(g_signal_pipe[0], drain, sizeof drain);
}

}  // namespace skt::run
