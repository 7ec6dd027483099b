// skt-run's log: one timestamped line per event on standard error, which outlives a broken
// terminal (output.hpp).
#pragma once

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "daemon/output.hpp"

namespace skt::run {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Log {
 public:
  template <class... Args>
  void operator()(fmt::format_string<Args...> format, Args&&... args) {
    const auto now = std::chrono::system_clock::now();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    output::write(
        STDERR_FILENO,
        fmt::format("[skt-run {:%H:%M:%S}.{:03d} +{:.3f}s] {}\n",
                    fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms,
                    seconds_since(start_), fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  Clock::time_point start_ = Clock::now();
};

}  // namespace skt::run
