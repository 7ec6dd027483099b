// Child processes from argv vectors (never a shell), with RAII for their file descriptors.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace skt::run {

// A file descriptor, closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Environment changes for a child: name=value entries added to (or replacing in) the parent's.
using EnvChanges = std::vector<std::pair<std::string, std::string>>;

// A running child whose standard output comes through a pipe; its standard error is the parent's.
struct Child {
  pid_t pid = -1;
  Fd out;
};

// Starts argv[0] (searched in PATH) with the changes to the environment. Throws std::system_error
// when it cannot start (a missing program included: the message names it).
// `own_group`: in a process group of its own, which a kill can end whole, and which dies with
// skt-run.
Child spawn(const std::vector<std::string>& argv, const EnvChanges& env, bool capture_output,
            bool own_group = false);

// Waits for the child; returns its exit code, or 128 + the signal that ended it.
int wait_exit(pid_t pid);

// A supervised run: the launcher's pid, leader of its own process group (so that a terminal's
// signals reach the supervisor, which decides), and its standard output and error.
struct Supervised {
  pid_t pid = -1;
  Fd out;
  Fd err;
};

// Starts argv (searched in PATH) with the changes to the environment; it is killed (SIGKILL) when
// this process dies, so that a launcher never outlives its supervisor. Throws std::system_error
// when it cannot start.
Supervised launch_supervised(const std::vector<std::string>& argv, const EnvChanges& env);

// How a process ended: its exit code (128 + the signal for a signal), and the signal, if one.
struct Ended {
  int code = 0;
  int signal = 0;
};

// How the process ended, if it has, else nothing.
std::optional<Ended> reap(pid_t pid);

// The process's state letter as /proc tells it (R, S, D, T, Z, ...); '\0' when it is gone.
char process_state(pid_t pid);
// Whether the process is stopped by a signal (SIGSTOP, SIGTSTP).
bool is_stopped(pid_t pid);

// A UDP socket bound to a port of its own on every interface, for the ranks' reports.
class Listener {
 public:
  // On every address, or (`loopback_only`) where only this host's processes reach it.
  explicit Listener(bool loopback_only = false);
  int fd() const noexcept { return fd_.get(); }
  int port() const noexcept { return port_; }
  // Every datagram waiting, one string each.
  std::vector<std::string> receive_all();

 private:
  Fd fd_;
  int port_ = 0;
};

struct Captured {
  int code = 0;
  std::string out;
  bool timed_out = false;  // still running at its deadline: killed, with its process group
};

// Runs argv to completion and returns its exit code and standard output.
Captured capture(const std::vector<std::string>& argv, const EnvChanges& env = {});

// Runs the commands side by side (a bounded number at a time), each in a process group of its
// own, and returns each one's exit code and standard output, in order. A command still running
// `timeout` seconds after it started is killed with its process group and marked timed out; one
// that cannot be reaped then (stuck in the kernel) is left behind, so that the call stays bounded.
std::vector<Captured> capture_each(const std::vector<std::vector<std::string>>& commands,
                                   double timeout);

// The path of a program: `name` itself if it contains '/', else its first match in PATH; empty if
// none is executable.
std::string find_program(const std::string& name);

}  // namespace skt::run
