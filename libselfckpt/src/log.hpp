// Log lines carry the rank, its node and the epoch; the level is chosen at run time (SKT_LOG).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>

#include "libselfckpt/src/config.hpp"

namespace spdlog {
class logger;
}

namespace skt {

class Logger {
 public:
  Logger(LogLevel level, int rank, std::string node);
  ~Logger();

  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  bool enabled(LogLevel level) const noexcept { return level >= level_ && level_ != LogLevel::off; }

  template <class... Args>
  void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(level)) write(level, fmt::format(format, std::forward<Args>(args)...));
  }
  template <class... Args>
  void debug(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::debug, format, std::forward<Args>(args)...);
  }
  template <class... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::info, format, std::forward<Args>(args)...);
  }
  template <class... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::warn, format, std::forward<Args>(args)...);
  }
  template <class... Args>
  void error(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::error, format, std::forward<Args>(args)...);
  }
  // Job-wide news, printed by rank 0 only.
  template <class... Args>
  void job(fmt::format_string<Args...> format, Args&&... args) {
    if (rank_ == 0) log(LogLevel::info, format, std::forward<Args>(args)...);
  }

 private:
  void write(LogLevel level, const std::string& message);

  LogLevel level_;
  int rank_;
  std::string node_;
  std::uint64_t epoch_ = 0;
  std::shared_ptr<spdlog::logger> sink_;
};

}  // namespace skt
