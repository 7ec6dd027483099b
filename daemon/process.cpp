#include "daemon/process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

Child spawn(const std::vector<std::string>& argv, const EnvChanges& env, bool capture_output) {
  const std::string program = find_program(argv.at(0));
  if (program.empty()) {
    throw std::system_error(ENOENT, std::generic_category(),
                            "cannot run '" + argv[0] + "': not found");
  }
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = merged_environment(env);
  auto arg_pointers = pointers(args);
  auto env_pointers = pointers(environment);
  SpawnSetup setup;
  Child child;
  Fd write_end;
  if (capture_output) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe");
    child.out = Fd(fds[0]);
    write_end = Fd(fds[1]);
    posix_spawn_file_actions_adddup2(&setup.actions, write_end.get(), STDOUT_FILENO);
  }
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
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died already
    ::dup2(out_write.get(), STDOUT_FILENO);
    ::dup2(err_write.get(), STDERR_FILENO);
    ::execve(program.c_str(), arg_pointers.data(), env_pointers.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that it holds before either side goes on
  Supervised s;
  s.pid = pid;
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

bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) state ...": the command may hold spaces and parentheses; the state follows the
  // last one.
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

Listener::Listener() {
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
  address.sin_addr.s_addr = htonl(INADDR_ANY);
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

}  // namespace skt::run
