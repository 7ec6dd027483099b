// What the configuration's parsers share: the names of each enumeration's values, and the
// helpers that read text.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "libselfckpt/src/config.hpp"

namespace skt::config_text {

inline constexpr std::array<std::pair<FaultStep, std::string_view>, 11> kFaultSteps{{
    {FaultStep::stage, "stage"},
    {FaultStep::encode, "encode"},
    {FaultStep::encoded, "encoded"},
    {FaultStep::agreed, "agreed"},
    {FaultStep::flush, "flush"},
    {FaultStep::committed, "committed"},
    {FaultStep::rebuild, "rebuild"},
    {FaultStep::recover, "recover"},
    {FaultStep::drain, "drain"},
    {FaultStep::finalize, "finalize"},
    {FaultStep::create, "create"},
}};

inline constexpr std::array<std::pair<LogLevel, std::string_view>, 6> kLogLevels{{
    {LogLevel::trace, "trace"},
    {LogLevel::debug, "debug"},
    {LogLevel::info, "info"},
    {LogLevel::warn, "warn"},
    {LogLevel::error, "error"},
    {LogLevel::off, "off"},
}};

inline constexpr std::array<std::pair<Mode, std::string_view>, 3> kModes{{
    {Mode::self, "self"},
    {Mode::single, "single"},
    {Mode::twin, "double"},
}};

inline constexpr std::array<std::pair<CheckDeclared, std::string_view>, 3> kDeclaredChecks{{
    {CheckDeclared::all, "all"},
    {CheckDeclared::sample, "sample"},
    {CheckDeclared::off, "off"},
}};

// The value a table names `name` (already in lower case); nothing if none does.
template <class T, std::size_t N>
std::optional<T> named(const std::array<std::pair<T, std::string_view>, N>& table,
                       std::string_view name) {
  for (const auto& [value, text] : table) {
    if (text == name) return value;
  }
  return std::nullopt;
}

inline std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

template <class T>
std::optional<T> parse_integer(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace skt::config_text
