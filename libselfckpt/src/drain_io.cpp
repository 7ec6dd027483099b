#include "libselfckpt/src/drain_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace fs = std::filesystem;

namespace {

// Why `path` is no private part of a drain; empty when it is, or is not there.
std::string privacy_problem(const fs::path& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return fmt::format("{} is a symbolic link", path.string());
  if (st.st_uid != ::geteuid()) {
    return fmt::format("{} belongs to uid {}, not to this job's user (uid {})", path.string(),
                       st.st_uid, ::geteuid());
  }
  if ((st.st_mode & 022) != 0) {
    return fmt::format("{} may be written by other users (mode {:o})", path.string(),
                       st.st_mode & 07777);
  }
  return {};
}

[[noreturn]] void refuse_foreign(const std::string& problem) {
  throw Error(SKT_ERR_CONFIG,
              fmt::format("{}: a drain of another user, or one others may change, is neither "
                          "written into nor restored. Remove it (its owner can), or set "
                          "SKT_DRAIN_DIR elsewhere",
                          problem));
}

}  // namespace

std::runtime_error system_failure(const std::string& what, const fs::path& path) {
  return std::runtime_error(fmt::format("{} {}: {}", what, path.string(), std::strerror(errno)));
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

void write_all(int fd, const std::byte* bytes, std::size_t n, std::uint64_t offset,
               const fs::path& path) {
  while (n > 0) {
    const ssize_t done = ::pwrite(fd, bytes, n, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) {
      if (done == 0) errno = EIO;
      throw system_failure("cannot write", path);
    }
    bytes += done;
    n -= static_cast<std::size_t>(done);
    offset += static_cast<std::uint64_t>(done);
  }
}

bool read_all(int fd, std::byte* bytes, std::size_t n, std::uint64_t offset, const fs::path& path) {
  while (n > 0) {
    const ssize_t done = ::pread(fd, bytes, n, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) throw system_failure("cannot read", path);
    if (done == 0) return false;
    bytes += done;
    n -= static_cast<std::size_t>(done);
    offset += static_cast<std::uint64_t>(done);
  }
  return true;
}

void sync_directory(const fs::path& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) throw system_failure("cannot sync directory", dir);
}

// Why `path` is no private part of a drain; empty when it is, or is not there.
void require_private(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (const std::string problem = privacy_problem(path, st); !problem.empty()) {
    refuse_foreign(problem);
  }
}

int open_private(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ELOOP) refuse_foreign(fmt::format("{} is a symbolic link", path.string()));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (const std::string problem = privacy_problem(path, st); !problem.empty()) {
      ::close(fd);
      refuse_foreign(problem);
    }
  }
  return fd;
}

void make_directories(const fs::path& epoch_dir) {
  const fs::path job_dir = epoch_dir.parent_path();
  std::error_code error;
  if (!fs::is_directory(job_dir.parent_path(), error)) {
    fs::create_directories(job_dir.parent_path(), error);
    fs::permissions(job_dir.parent_path(), fs::perms::owner_all, error);
  }
  for (const fs::path& dir : {job_dir, epoch_dir}) {
    // Every rank creates the epoch's directory: another may have done it in between.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      throw std::runtime_error(
          fmt::format("cannot create directory {}: {}", dir.string(), std::strerror(errno)));
    }
    require_private(dir);
  }
}

}  // namespace skt
