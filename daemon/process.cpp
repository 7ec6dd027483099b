#include "daemon/process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

extern char** environ;

namespace skt::run {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

namespace {

// posix_spawn's attribute and file-action objects, destroyed on every path.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

std::vector<std::string> merged_environment(const EnvChanges& changes) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [n, v] : changes)
      replaced = replaced || n == name;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [n, v] : changes)
    out.push_back(n + "=" + v);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

namespace {

// Starts `program` in a process group of its own that dies with skt-run (a parent-death signal,
// which posix_spawn cannot ask for; it also comes when the thread that started it ends), its
// standard output (and error) on the given descriptors, or skt-run's where -1.
pid_t fork_exec(const std::string& program, char* const* argv, char* const* envp, int out_fd,
                int err_fd) {
  const pid_t parent = ::getpid();
  // A signal sent to the new process before it runs the program (an operator's, a test's, as soon
  // as its pid is known) must act as on the program, not run skt-run's handlers in it, which would
  // swallow it: blocked across the fork, and let through in the child once the handlers are reset.
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw std::system_error(error, std::generic_category(), "fork");
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction action {};
      if (::sigaction(sig, nullptr, &action) == 0 && action.sa_handler != SIG_IGN &&
          action.sa_handler != SIG_DFL) {
        action.sa_handler = SIG_DFL;
        action.sa_flags = 0;
        ::sigaction(sig, &action, nullptr);
      }
    }
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died already
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    ::execve(program.c_str(), argv, envp);
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::setpgid(pid, pid);  // also here, so that it holds before either side goes on
  return pid;
}

}  // namespace

Child spawn(const std::vector<std::string>& argv, const EnvChanges& env, bool capture_output,
            bool own_group) {
  const std::string program = find_program(argv.at(0));
  if (program.empty()) {
    throw std::system_error(ENOENT, std::generic_category(),
                            "cannot run '" + argv[0] + "': not found");
  }
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = merged_environment(env);
  auto arg_pointers = pointers(args);
  auto env_pointers = pointers(environment);
  Child child;
  Fd write_end;
  if (capture_output) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe");
    child.out = Fd(fds[0]);
    write_end = Fd(fds[1]);
  }
  if (own_group) {
    child.pid = fork_exec(program, arg_pointers.data(), env_pointers.data(), write_end.get(), -1);
    return child;
  }
  SpawnSetup setup;
  if (capture_output)
    posix_spawn_file_actions_adddup2(&setup.actions, write_end.get(), STDOUT_FILENO);
  const int rc = posix_spawn(&child.pid, program.c_str(), &setup.actions, &setup.attributes,
                             arg_pointers.data(), env_pointers.data());
  if (rc != 0) throw std::system_error(rc, std::generic_category(), "cannot run '" + program + "'");
  return child;
}

namespace {

Ended ended_of(int status) {
  if (WIFEXITED(status)) return Ended{WEXITSTATUS(status), 0};
  if (WIFSIGNALED(status)) return Ended{128 + WTERMSIG(status), WTERMSIG(status)};
  return Ended{255, 0};
}

}  // namespace

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
  }
  return ended_of(status).code;
}

Supervised launch_supervised(const std::vector<std::string>& argv, const EnvChanges& env) {
  const std::string program = find_program(argv.at(0));
  if (program.empty()) {
    throw std::system_error(ENOENT, std::generic_category(),
                            "cannot run '" + argv[0] + "': not found");
  }
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = merged_environment(env);
  auto arg_pointers = pointers(args);
  auto env_pointers = pointers(environment);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  Fd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  Fd err_read(err[0]), err_write(err[1]);
  Supervised s;
  s.pid = fork_exec(program, arg_pointers.data(), env_pointers.data(), out_write.get(),
                    err_write.get());
  s.out = std::move(out_read);
  s.err = std::move(err_read);
  return s;
}

std::optional<Ended> reap(pid_t pid) {
  int status = 0;
  const pid_t done = ::waitpid(pid, &status, WNOHANG);
  if (done != pid) return std::nullopt;
  return ended_of(status);
}

char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '\0';
  // "pid (comm) state ...": the command may hold spaces and parentheses; the state follows the
  // last one.
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '\0';
}

bool is_stopped(pid_t pid) {
  return process_state(pid) == 'T';
}

Listener::Listener(bool loopback_only) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  fd_ = Fd(fd);
  // The ranks' datagrams wait here while skt-run probes, copies output or is stopped (Ctrl-Z); the
  // default buffer (208 KiB here) holds 256 of them, a few seconds of a hundred ranks' beats. As
  // much as the system allows (the administrator's limit without privilege): what no longer fits
  // is lost.
  constexpr int kReceiveBuffer = 32 << 20;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kReceiveBuffer, sizeof kReceiveBuffer) != 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kReceiveBuffer, sizeof kReceiveBuffer);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  address.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::system_error(errno, std::generic_category(), "bind");
  }
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
}

std::vector<std::string> Listener::receive_all() {
  std::vector<std::string> out;
  char buffer[1024];
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buffer, sizeof buffer, 0);
    if (n <= 0) break;
    out.emplace_back(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

Captured capture(const std::vector<std::string>& argv, const EnvChanges& env) {
  Child child = spawn(argv, env, true);
  Captured result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(child.out.get(), buffer, sizeof buffer);
    if (n > 0) {
      result.out.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  result.code = wait_exit(child.pid);
  return result;
}

namespace {

// Reads what the pipe holds without waiting; closes it at its end. Returns whether it read
// anything.
bool read_ready(Fd& pipe, std::string& into) {
  if (pipe.get() < 0) return false;
  pollfd p{pipe.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0 || (p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) return false;
  char buffer[65536];
  const ssize_t n = ::read(pipe.get(), buffer, sizeof buffer);
  if (n > 0) {
    into.append(buffer, static_cast<std::size_t>(n));
    return true;
  }
  if (n == 0 || errno != EINTR) pipe = Fd();
  return false;
}

}  // namespace

std::vector<Captured> capture_each(const std::vector<std::vector<std::string>>& commands,
                                   double timeout) {
  // Few enough to stay well inside the limits on open files and processes; a probe of up to this
  // many nodes takes one timeout at most.
  constexpr std::size_t kAtOnce = 64;
  using Clock = std::chrono::steady_clock;
  struct Running {
    std::size_t index;
    Child child;
    Clock::time_point deadline;
  };
  std::vector<Captured> results(commands.size());
  std::vector<Running> running;
  // An error unwinding past them (a program that cannot start) leaves none of them behind.
  struct KillLeft {
    std::vector<Running>& running;
    ~KillLeft() {
      for (const auto& r : running) {
        ::kill(-r.child.pid, SIGKILL);
        reap(r.child.pid);
      }
    }
  } kill_left{running};
  std::size_t next = 0;
  const auto limit =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  while (next < commands.size() || !running.empty()) {
    while (next < commands.size() && running.size() < kAtOnce) {
      running.push_back({next, spawn(commands[next], {}, true, true), Clock::now() + limit});
      ++next;
    }
    std::vector<pollfd> fds;
    Clock::time_point nearest = Clock::time_point::max();
    for (const auto& r : running) {
      if (r.child.out.get() >= 0) fds.push_back({r.child.out.get(), POLLIN, 0});
      nearest = std::min(nearest, r.deadline);
    }
    // Exits are looked for every few milliseconds: one may come while a process the command
    // started holds its pipe open.
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(20),
        std::chrono::duration_cast<std::chrono::milliseconds>(nearest - Clock::now()) +
            std::chrono::milliseconds(1));
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(0, wait.count()))) < 0 &&
        errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    for (auto& r : running)
      read_ready(r.child.out, results[r.index].out);
    const auto now = Clock::now();
    std::erase_if(running, [&](Running& r) {
      if (const auto ended = reap(r.child.pid)) {
        // Its output is in the pipe by now; a process it left behind may hold the pipe open.
        while (read_ready(r.child.out, results[r.index].out)) {
        }
        results[r.index].code = ended->code;
        return true;
      }
      if (now < r.deadline) return false;
      ::kill(-r.child.pid, SIGKILL);
      results[r.index].timed_out = true;
      results[r.index].code = 128 + SIGKILL;
      for (int tries = 0; tries < 100 && !reap(r.child.pid); ++tries)
        ::usleep(1000);
      return true;
    });
  }
  return results;
}

}  // namespace skt::run
