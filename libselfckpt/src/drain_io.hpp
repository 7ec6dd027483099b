// Files only the job's user can read or write: a drain's directories and rank files. The root
// they go under may be shared (/scratch, mode 1777), but a job's directories are 0700 and its files
// 0600, and at every use nothing of them that another user owns or may write is read or written
// into: it could hold anyone's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

namespace skt {

// The error of a system call on `path`, with errno's text.
std::runtime_error system_failure(const std::string& what, const std::filesystem::path& path);

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const noexcept { return fd_; }
  // Closing can report a write the kernel could not complete: it is checked.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const std::byte* bytes, std::size_t n, std::uint64_t offset,
               const std::filesystem::path& path);
// False when the file ends first.
bool read_all(int fd, std::byte* bytes, std::size_t n, std::uint64_t offset,
              const std::filesystem::path& path);
void sync_directory(const std::filesystem::path& dir);
// Throws when `path` exists and is not private.
void require_private(const std::filesystem::path& path);
// A drained file opened for reading, if it is there and private; -1 when it is not there.
int open_private(const std::filesystem::path& path);
// The epoch directory and the job's, 0700 (the root too, if it is missing), each one checked.
void make_directories(const std::filesystem::path& epoch_dir);

}  // namespace skt
