// The text forms of settings and names: modes, node names, job tags, durations, sizes, log levels
// and fault specifications, parsed and printed.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/config_text.hpp"

namespace skt {

using namespace config_text;

std::string_view mode_name(Mode mode) noexcept {
  for (const auto& [m, name] : kModes) {
    if (m == mode) return name;
  }
  return "?";
}

std::string default_node_name() {
  const char* slurm = std::getenv("SLURMD_NODENAME");
  if (slurm != nullptr && valid_name(slurm)) return slurm;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "localhost";
  std::string name(host.data());
  name = name.substr(0, name.find('.'));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  }
  if (name.size() > 63) name.resize(63);
  return valid_name(name) ? name : "localhost";
}

std::string expand_node(std::string path, const std::string& node) {
  for (auto at = path.find(kNodePlaceholder); at != std::string::npos;
       at = path.find(kNodePlaceholder, at + node.size())) {
    path.replace(at, kNodePlaceholder.size(), node);
  }
  return path;
}

std::optional<double> parse_duration(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = lower(std::string_view(text).substr(used));
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  }
  // nan and inf read as numbers, and a huge one overflows: neither is a duration.
  if (scale == 0 || !std::isfinite(value * scale)) return std::nullopt;
  return value * scale;
}

std::string_view fault_step_name(FaultStep step) noexcept {
  for (const auto& [s, name] : kFaultSteps) {
    if (s == step) return name;
  }
  return "?";
}

bool valid_name(const std::string& text) {
  if (text.empty() || text.size() > 63) return false;
  if (!std::isalnum(static_cast<unsigned char>(text.front()))) return false;
  return std::all_of(text.begin(), text.end(), [](unsigned char ch) {
    return std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
  });
}

bool valid_job_tag(const std::string& text) {
  const auto plus = text.find('+');
  if (plus == std::string::npos) return valid_name(text);
  return text.size() <= 63 && valid_name(text.substr(0, plus)) && valid_name(text.substr(plus + 1));
}

std::optional<std::string> context_job_tag(const std::string& job, int leader) {
  if (leader == 0) return job;
  const std::string tag =
      fmt::format("{}{}w{}", job, job.find('+') == std::string::npos ? '+' : '.', leader);
  if (!valid_job_tag(tag)) return std::nullopt;
  return tag;
}

std::optional<bool> parse_boolean(std::string_view text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

std::optional<std::size_t> parse_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0) return std::nullopt;
  const auto number = parse_integer<std::size_t>(std::string_view(text).substr(0, digits));
  if (!number) return std::nullopt;
  const std::string suffix = lower(std::string_view(text).substr(digits));
  std::size_t scale = 1;
  if (suffix.empty() || suffix == "b") {
    scale = 1;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    scale = std::size_t{1} << 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    scale = std::size_t{1} << 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    scale = std::size_t{1} << 30;
  } else {
    return std::nullopt;
  }
  if (*number > SIZE_MAX / scale) return std::nullopt;
  return *number * scale;
}

std::optional<LogLevel> parse_log_level(const std::string& text) {
  const std::string v = lower(text);
  if (v == "warning") return LogLevel::warn;
  return named(kLogLevels, v);
}

std::optional<FaultSpec> parse_fault(const std::string& text) {
  const auto first = text.find(':');
  if (first == std::string::npos) return std::nullopt;
  const auto second = text.find(':', first + 1);
  const std::string step = lower(std::string_view(text).substr(0, first));
  const std::string_view rank = std::string_view(text).substr(
      first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  FaultSpec spec;
  const auto fault_step = named(kFaultSteps, step);
  if (!fault_step) return std::nullopt;
  spec.step = *fault_step;
  const auto r = parse_integer<int>(rank);
  if (!r || *r < 0) return std::nullopt;
  spec.rank = *r;
  if (second != std::string::npos) {
    const auto third = text.find(':', second + 1);
    const auto epoch = parse_integer<std::uint64_t>(std::string_view(text).substr(
        second + 1, third == std::string::npos ? std::string::npos : third - second - 1));
    if (!epoch) return std::nullopt;
    spec.epoch = *epoch;
    if (third != std::string::npos) {
      const auto fourth = text.find(':', third + 1);
      const auto launch = parse_integer<int>(std::string_view(text).substr(
          third + 1, fourth == std::string::npos ? std::string::npos : fourth - third - 1));
      if (!launch || *launch < 0) return std::nullopt;
      spec.launch = *launch;
      if (fourth != std::string::npos) {
        const std::string how = lower(std::string_view(text).substr(fourth + 1));
        if (how == "term") {
          spec.action = FaultAction::term;
        } else if (how == "launcher") {
          spec.action = FaultAction::launcher;
        } else if (how == "throw") {
          // A failure on one rank is a collective error only where the work of a collective
          // phase may fail; the other steps only write memory.
          if (spec.step != FaultStep::stage && spec.step != FaultStep::encode &&
              spec.step != FaultStep::encoded && spec.step != FaultStep::rebuild &&
              spec.step != FaultStep::recover) {
            return std::nullopt;
          }
          spec.action = FaultAction::raise;
        } else if (how != "kill") {
          return std::nullopt;
        }
      }
    }
  }
  return spec;
}

}  // namespace skt
