#include "daemon/state.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace skt::run {

std::vector<std::string> split_words(const std::string& text) {
  std::stringstream in(text);
  std::vector<std::string> out;
  std::string w;
  while (in >> w)
    out.push_back(w);
  return out;
}

std::string default_job_tag(const std::string& directory, const std::vector<std::string>& nodes,
                            int ranks_per_node, const std::vector<std::string>& command) {
  // FNV-1a, 64 bits: stable across builds and platforms, unlike std::hash. Each field ends with a
  // zero byte, so that no two different inputs concatenate alike.
  std::uint64_t hash = 14695981039346656037ull;
  const auto add = [&](const std::string& field) {
    for (const char c : field)
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    hash *= 1099511628211ull;
  };
  add(directory);
  for (const auto& node : nodes)
    add(node);
  add(std::to_string(ranks_per_node));
  for (const auto& word : command)
    add(word);
  return fmt::format("run-{:012x}", hash >> 16);
}

namespace {

// A value that may hold any byte but must stay on its line: '%' and line ends as %XX.
std::string escape_line(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '%' || c == '\n' || c == '\r') {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> unescape_line(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      return std::nullopt;
    }
    out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

}  // namespace

std::string format_state(const JobState& s) {
  std::string text = fmt::format(
      "job {}\nstatus {}\nlaunches {}\nranklist {}\nspares {}\ncadence {:.3f}\nnote {}\n", s.job,
      s.status, s.launches, fmt::join(s.ranklist, " "), fmt::join(s.spares, " "), s.cadence,
      s.note);
  if (s.checkpointed) text += "checkpointed yes\n";
  if (s.inherited) text += "inherited yes\n";
  if (s.stalled_at) text += fmt::format("stalled-at {}\n", *s.stalled_at);
  if (!s.sub_jobs.empty()) text += fmt::format("sub-jobs {}\n", fmt::join(s.sub_jobs, " "));
  for (const auto& record : s.nodes)
    text += fmt::format("node {}\n", format_record(record));
  if (!s.directory.empty()) text += fmt::format("directory {}\n", escape_line(s.directory));
  // One line per word: a word may hold spaces, or be empty.
  for (const auto& word : s.command)
    text += fmt::format("argument {}\n", escape_line(word));
  return text;
}

bool command_changed(const JobState& last, const std::string& directory,
                     const std::vector<std::string>& command) {
  if (last.command.empty() || !last.checkpointed || last.inherited) return false;
  return last.command != command || last.directory != directory;
}

std::optional<JobState> parse_state(const std::string& text) {
  JobState s;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    try {
      if (key == "job") {
        s.job = value;
      } else if (key == "status") {
        s.status = value;
      } else if (key == "launches") {
        std::size_t used = 0;
        s.launches = std::stoi(value, &used);
        if (used != value.size() || s.launches < 0) return std::nullopt;
      } else if (key == "ranklist") {
        s.ranklist = split_words(value);
      } else if (key == "spares") {
        s.spares = split_words(value);
      } else if (key == "sub-jobs") {
        s.sub_jobs = split_words(value);
      } else if (key == "cadence") {
        std::size_t used = 0;
        s.cadence = std::stod(value, &used);
        if (used != value.size() || !std::isfinite(s.cadence) || s.cadence < 0) return std::nullopt;
      } else if (key == "note") {
        s.note = value;
      } else if (key == "checkpointed" || key == "inherited") {
        if (value != "yes" && value != "no") return std::nullopt;
        (key == "checkpointed" ? s.checkpointed : s.inherited) = value == "yes";
      } else if (key == "stalled-at") {
        std::size_t used = 0;
        s.stalled_at = std::stoull(value, &used);
        if (used != value.size() || value.front() == '-') return std::nullopt;
      } else if (key == "node") {
        const auto record = parse_record(value);
        if (!record) return std::nullopt;
        s.nodes.push_back(*record);
      } else if (key == "directory" || key == "argument") {
        const auto text = unescape_line(value);
        if (!text) return std::nullopt;
        if (key == "directory") s.directory = *text;
        if (key == "argument") s.command.push_back(*text);
      } else {
        return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (s.job.empty()) return std::nullopt;
  return s;
}

std::string default_state_dir(const std::string& job) {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  std::string base;
  if (xdg != nullptr && *xdg != '\0') {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    base = std::string(home != nullptr && *home != '\0' ? home : "/tmp") + "/.local/state";
  }
  return base + "/skt-run/" + job;
}

StateDir::StateDir(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("cannot create the state directory {}: {}", path_, ec.message()));
  }
  const std::string lock = file("lock");
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    throw std::runtime_error(fmt::format("cannot open {}: {}", lock, std::strerror(errno)));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::ifstream in(lock);
    std::string holder;
    std::getline(in, holder);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw std::runtime_error(
        fmt::format("the job is being run by another skt-run ({}); it must end first (or stop it: "
                    "kill {})",
                    holder.empty() ? "unknown process" : holder,
                    holder.rfind("pid ", 0) == 0 ? holder.substr(4, holder.find(' ', 4) - 4)
                                                 : std::string("<pid>")));
  }
  const std::string holder = fmt::format("pid {} on {}\n", ::getpid(), [] {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return std::string(host);
  }());
  if (::ftruncate(lock_fd_, 0) != 0 ||
      ::pwrite(lock_fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    // The lock holds without the note; only the message to a second skt-run is poorer.
  }
}

StateDir::~StateDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

std::optional<JobState> read_state(const std::string& directory) {
  std::ifstream in(directory + "/state");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_state(text.str());
}

std::optional<JobState> StateDir::load() const {
  return read_state(path_);
}

void write_whole(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".new";
  const auto fail = [&](const std::string& what) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw WriteError(fmt::format("cannot write {}: {}", what, std::strerror(error)));
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(temporary);
  for (std::size_t done = 0; done < text.size();) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      errno = error;
      fail(temporary);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail(temporary);
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail(path);
}

void StateDir::save(const JobState& state) const {
  write_whole(file("state"), format_state(state));
}

}  // namespace skt::run
