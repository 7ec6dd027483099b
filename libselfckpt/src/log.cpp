#include "libselfckpt/src/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace skt {

namespace {
spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      break;
  }
  return spdlog::level::off;
}
}  // namespace

Logger::Logger(LogLevel level, int rank, std::string node)
    : level_(level), rank_(rank), node_(std::move(node)) {
  sink_ = std::make_shared<spdlog::logger>("selfckpt",
                                           std::make_shared<spdlog::sinks::stderr_sink_mt>());
  sink_->set_pattern("%Y-%m-%dT%H:%M:%S.%e selfckpt %^%l%$ %v");
  sink_->set_level(to_spdlog(level));
  sink_->flush_on(spdlog::level::trace);
}

Logger::~Logger() = default;

void Logger::write(LogLevel level, const std::string& message) {
  sink_->log(to_spdlog(level), "[rank {} node {} epoch {}] {}", rank_, node_, epoch_, message);
}

}  // namespace skt
