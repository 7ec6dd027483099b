#include "libselfckpt/src/config.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <string_view>

#include <unistd.h>

#include "libselfckpt/internal/monitor_wire.hpp"
#include "libselfckpt/src/monitor.hpp"
#include "selfckpt/selfckpt.hpp"

extern char** environ;

namespace skt {

namespace {

constexpr std::array<std::pair<FaultStep, std::string_view>, 11> kFaultSteps{{
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

constexpr std::array<std::pair<LogLevel, std::string_view>, 6> kLogLevels{{
    {LogLevel::trace, "trace"},
    {LogLevel::debug, "debug"},
    {LogLevel::info, "info"},
    {LogLevel::warn, "warn"},
    {LogLevel::error, "error"},
    {LogLevel::off, "off"},
}};

constexpr std::array<std::pair<Mode, std::string_view>, 3> kModes{{
    {Mode::self, "self"},
    {Mode::single, "single"},
    {Mode::twin, "double"},
}};

constexpr std::array<std::pair<CheckDeclared, std::string_view>, 3> kDeclaredChecks{{
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

std::string lower(std::string_view text) {
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

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error(SKT_ERR_CONFIG, fmt::format("configuration: {}: {}", origin, what));
}

int integer_in(const std::string& origin, const std::string& value, int low, int high) {
  const auto v = parse_integer<int>(value);
  if (!v || *v < low || *v > high) {
    bad(origin, fmt::format("'{}' is not an integer from {} to {}", value, low, high));
  }
  return *v;
}

bool boolean(const std::string& origin, const std::string& value) {
  if (const auto b = parse_boolean(value)) return *b;
  bad(origin, fmt::format("'{}' is not a boolean (true/false, 1/0)", value));
}

struct Option {
  std::string_view key;  // in the file
  std::string_view env;  // in the environment
  std::string_view help;
  std::function<void(Config&, const std::string& origin, const std::string& value)> set;
};

const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      {"job", "SKT_JOB", "job tag, stable across relaunches",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (!valid_job_tag(v)) {
           bad(origin, fmt::format("'{}' is not a valid job tag (1 to 63 of A-Z a-z 0-9 . _ -, "
                                   "starting with a letter or digit; a sub-job adds +NAME)",
                                   v));
         }
         c.job = v;
       }},
      {"node", "SKT_NODE", "failure domain of this rank",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (!valid_name(v)) {
           bad(origin,
               fmt::format("'{}' is not a valid node name (1 to 63 of A-Z a-z 0-9 . _ -)", v));
         }
         c.node = v;
       }},
      {"group_size", "SKT_GROUP_SIZE", "most ranks per group (1 = no protection)",
       [](Config& c, const std::string& origin, const std::string& v) {
         c.group_size = integer_in(origin, v, 1, 64);
       }},
      {"scheme", "SKT_SCHEME", "checksum scheme",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto scheme = enc::parse_scheme(lower(v));
         if (!scheme) bad(origin, fmt::format("unknown scheme '{}' (xor, sum or rs)", v));
         c.scheme = *scheme;
       }},
      {"mode", "SKT_MODE", "self, single or double",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto mode = named(kModes, lower(v));
         if (!mode) bad(origin, fmt::format("unknown mode '{}' (self, single or double)", v));
         c.mode = *mode;
       }},
      {"mtbf", "SKT_MTBF", "mean time between failures, for skt_need_checkpoint",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto seconds = parse_duration(v);
         if (!seconds || *seconds <= 0) {
           bad(origin, fmt::format("'{}' is not a positive duration (seconds, or with a unit: "
                                   "90s, 30m, 5h, 2d)",
                                   v));
         }
         c.mtbf_seconds = *seconds;
       }},
      {"parity", "SKT_PARITY", "parity chunks per row (rs)",
       [](Config& c, const std::string& origin, const std::string& v) {
         c.parity = integer_in(origin, v, 1, 63);
       }},
      {"chunk_size", "SKT_CHUNK_SIZE", "stripe chunk in bytes (K/M suffixes)",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto bytes = parse_size(v);
         if (!bytes || *bytes < 4096 || *bytes > (std::size_t{1} << 30) || *bytes % 64 != 0) {
           bad(origin, fmt::format("'{}' is not a chunk size: use a multiple of 64 bytes from 4K "
                                   "to 1G, such as 256K",
                                   v));
         }
         c.chunk_bytes = *bytes;
       }},
      {"pipeline_depth", "SKT_PIPELINE_DEPTH", "chunks in flight per direction",
       [](Config& c, const std::string& origin, const std::string& v) {
         c.pipeline_depth = integer_in(origin, v, 1, 64);
       }},
      {"huge_pages", "SKT_HUGE_PAGES", "back segments with huge pages",
       [](Config& c, const std::string& origin, const std::string& v) {
         c.huge_pages = boolean(origin, v);
       }},
      {"find_changes", "SKT_FIND_CHANGES",
       "skt_checkpoint compares the workspace with the committed copy and encodes only what "
       "changed",
       [](Config& c, const std::string& origin, const std::string& v) {
         c.find_changes = boolean(origin, v);
       }},
      {"check_declared", "SKT_CHECK_DECLARED",
       "how skt_checkpoint_dirty checks that nothing changed outside the declared ranges: all, "
       "sample or off",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto check = named(kDeclaredChecks, lower(v));
         if (!check) {
           bad(origin, fmt::format("unknown check '{}' (all: every call compares the workspace "
                                   "outside the declared ranges; sample: the first call whole, "
                                   "then a sixteenth per call; off)",
                                   v));
         }
         c.check_declared = *check;
       }},
      {"attach_wait", "SKT_ATTACH_WAIT",
       "how long a relaunch waits for an earlier launch's processes to let go of the segments",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto seconds = parse_duration(v);
         if (!seconds || *seconds < 0 || *seconds > 86400) {
           bad(origin, fmt::format("'{}' is not a duration from 0 to 1d (seconds, or with a unit: "
                                   "30s, 2m)",
                                   v));
         }
         c.attach_wait_seconds = *seconds;
       }},
      {"wait_warning", "SKT_WAIT_WARNING",
       "how long a rank waits at the start of a collective call for the other ranks to make it "
       "too before it warns (again at each doubling; 0: never)",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto seconds = parse_duration(v);
         if (!seconds || *seconds < 0) {
           bad(origin, fmt::format("'{}' is not a duration of 0 or more (seconds, or with a "
                                   "unit: 90s, 10m)",
                                   v));
         }
         c.wait_warning_seconds = *seconds;
       }},
      {"monitor", "SKT_MONITOR",
       "host:port where the job's supervisor (skt-run) hears each rank's liveness and progress",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (!v.empty() && !parse_monitor_address(v)) {
           bad(origin, fmt::format("'{}' is not host:port (a port from 1 to 65535)", v));
         }
         c.monitor = v;
       }},
      {"monitor_key", "SKT_MONITOR_KEY",
       "the key that signs what each rank tells SKT_MONITOR (skt-run makes one per launch)",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (!v.empty() && !wire::key_from_hex(v)) {
           bad(origin, fmt::format("not a key: {} hexadecimal digits are", 2 * wire::kKeyBytes));
         }
         c.monitor_key = v;
       }},
      {"drain_dir", "SKT_DRAIN_DIR",
       "drain committed checkpoints to files under this directory (one subdirectory per job), "
       "read back when memory cannot serve a recovery",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (!v.empty() && v.find('\n') != std::string::npos) {
           bad(origin, fmt::format("'{}' is not a directory path", v));
         }
         c.drain_dir = v;
       }},
      {"drain_write", "SKT_DRAIN_WRITE",
       "what a drain writes: 'copy' (the committed copy; a directory every rank sees) or "
       "'copy+checksum' (and its checksum, so that a lost node's files are rebuilt from its "
       "group's: node-local disks)",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (v != "copy" && v != "copy+checksum") {
           bad(origin, fmt::format("'{}' is neither 'copy' nor 'copy+checksum'", v));
         }
         c.drain_checksum = v == "copy+checksum";
       }},
      {"drain_every", "SKT_DRAIN_EVERY",
       "drain every k-th committed checkpoint (a count), or the first one after an interval "
       "(a duration with a unit: 90s, 30m, 2h)",
       [](Config& c, const std::string& origin, const std::string& v) {
         const bool has_unit = !v.empty() && std::isalpha(static_cast<unsigned char>(v.back()));
         if (has_unit) {
           const auto seconds = parse_duration(v);
           if (!seconds || *seconds <= 0) {
             bad(origin, fmt::format("'{}' is not a positive duration (90s, 30m, 2h, 1d)", v));
           }
           c.drain_every_seconds = *seconds;
           c.drain_every_commits = 1;
         } else {
           c.drain_every_commits = integer_in(origin, v, 1, 1000000);
           c.drain_every_seconds = 0;
         }
       }},
      {"log", "SKT_LOG", "log level",
       [](Config& c, const std::string& origin, const std::string& v) {
         const auto level = parse_log_level(v);
         if (!level) {
           bad(origin,
               fmt::format("unknown log level '{}' (trace, debug, info, warn, error, off)", v));
         }
         c.log_level = *level;
       }},
      {"fault", "SKT_FAULT", "kill this process at a protocol step (testing)",
       [](Config& c, const std::string& origin, const std::string& v) {
         if (v.empty()) {
           c.fault.reset();
           return;
         }
         const auto fault = parse_fault(v);
         if (!fault) {
           bad(origin,
               fmt::format(
                   "'{}' is not <step>:<rank>[:<epoch>[:<launch>[:kill|term|launcher|throw]]] "
                   "with step one of stage, encode, encoded, agreed, flush, committed, rebuild, "
                   "recover, drain, finalize, create (throw: only stage, encode, encoded, "
                   "rebuild, recover)",
                   v));
         }
         c.fault = fault;
       }},
      {"restart", "SKT_RESTART", "relaunch count (0 = first launch; auto: as unset)",
       [](Config& c, const std::string& origin, const std::string& v) {
         // auto says, as unset does, that nothing is known of the run that wrote a checkpoint
         // found (skt-run without state of it): the program resumes it only if the same command
         // wrote it. A value, unlike an unset variable, also overrides a file's.
         if (lower(v) == "auto") {
           c.restart.reset();
           return;
         }
         const auto count = parse_integer<int>(v);
         if (!count || *count < 0) {
           bad(origin, fmt::format("'{}' is not a relaunch count (0: a first launch; 1 and up: a "
                                   "relaunch of the run that wrote the checkpoint) or auto",
                                   v));
         }
         c.restart = *count;
       }},
  };
  return table;
}

bool is_program_variable(std::string_view name) {
  return name.rfind("SKT_HPL_", 0) == 0 || name.rfind("SKT_RUN_", 0) == 0 ||
         name.rfind("SKT_TOOLS_", 0) == 0;
}

bool is_program_table(std::string_view key) {
  return key == "hpl" || key == "run";
}

// Edits (insertions, deletions, substitutions) between two names.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known variable an unknown one is within two edits of, after SKT_ (and a third of the rest's
// length at most), if any.
std::optional<std::string> nearest_variable(std::string_view name) {
  constexpr std::string_view kPrefix = "SKT_";
  name.remove_prefix(std::min(name.size(), kPrefix.size()));
  std::optional<std::string> best;
  std::size_t best_distance = std::min<std::size_t>(2, name.size() / 3);
  for (const auto& option : options()) {
    const std::size_t d = edit_distance(name, std::string_view(option.env).substr(kPrefix.size()));
    if (d <= best_distance) {
      best = option.env;
      best_distance = d == 0 ? 0 : d - 1;  // a nearer one wins
    }
  }
  return best;
}

std::string known_variables() {
  std::string out = "SKT_CONFIG";
  for (const auto& option : options())
    out += fmt::format(", {}", option.env);
  return out;
}

std::string toml_value(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  return {};
}

void apply_file(Config& config, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw Error(SKT_ERR_CONFIG, fmt::format("configuration file {}:{}:{}: {}", path, where.line,
                                            where.column, e.description()));
  } catch (const std::exception& e) {
    throw Error(SKT_ERR_CONFIG, fmt::format("configuration file {}: {}", path, e.what()));
  }
  for (const auto& [key, node] : table) {
    if (node.is_table() && is_program_table(key.str())) continue;
    const std::string origin =
        fmt::format("{}:{}: {}", path, node.source().begin.line, std::string_view(key));
    const std::string_view wanted = key.str();  // a lambda may not capture a structured binding
    const auto option = std::find_if(options().begin(), options().end(),
                                     [&](const Option& o) { return o.key == wanted; });
    if (option == options().end()) {
      std::string keys;
      for (const auto& o : options())
        keys += fmt::format("{}{}", keys.empty() ? "" : ", ", o.key);
      bad(origin, fmt::format("unknown key (known keys: {})", keys));
    }
    const std::string value = toml_value(node);
    if (value.empty() && !node.is_string()) {
      bad(origin, "expected a string, an integer or a boolean");
    }
    option->set(config, origin, value);
  }
}

void validate(const Config& c) {
  if (c.scheme != enc::Scheme::reed_solomon && c.parity != 1) {
    bad("parity (SKT_PARITY)",
        fmt::format("{} keeps exactly one parity chunk per row, not {}; set SKT_SCHEME=rs for more",
                    enc::scheme_name(c.scheme), c.parity));
  }
  if (c.group_size > 1 && c.parity >= c.group_size) {
    bad("parity (SKT_PARITY)",
        fmt::format("{} parity chunks need groups of at least {} ranks, but the group size "
                    "(SKT_GROUP_SIZE) is {}; lower the parity or raise the group size",
                    c.parity, c.parity + 1, c.group_size));
  }
  if (!c.monitor.empty() && c.monitor_key.empty()) {
    bad("monitor (SKT_MONITOR)",
        "a supervisor hears the ranks only with the key that signs what they say: set "
        "SKT_MONITOR_KEY too (skt-run sets both)");
  }
  if (c.drain_dir.find(kNodePlaceholder) != std::string::npos && !c.drain_checksum) {
    bad("drain_dir (SKT_DRAIN_DIR)",
        fmt::format("'{}' names a directory per node, which no other node sees; a drain there "
                    "must be rebuildable from the group: set SKT_DRAIN_WRITE=copy+checksum",
                    c.drain_dir));
  }
}

}  // namespace

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

std::string Config::shared_settings() const {
  return fmt::format(
      "job={} mode={} group_size={} scheme={} parity={} chunk_size={} pipeline_depth={} "
      "huge_pages={} find_changes={} mtbf={} restart={} drain_dir={} drain_write={} "
      "drain_every={}",
      job, mode_name(mode), group_size, enc::scheme_name(scheme), parity, chunk_bytes,
      pipeline_depth, huge_pages, find_changes, mtbf_seconds,
      restart ? std::to_string(*restart) : "unset", drain_dir.empty() ? "none" : drain_dir,
      drain_checksum ? "copy+checksum" : "copy",
      drain_every_seconds > 0 ? fmt::format("{}s", drain_every_seconds)
                              : std::to_string(drain_every_commits));
}

Environment skt_environment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.rfind("SKT_", 0) != 0) continue;
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

Config load_config(const std::string& path, const Environment& env) {
  Config config;
  std::string file = path;
  if (file.empty()) {
    for (const auto& [name, value] : env) {
      if (name == "SKT_CONFIG") file = value;
    }
  }
  if (!file.empty()) apply_file(config, file);
  for (const auto& [name, value] : env) {
    if (name == "SKT_CONFIG" || is_program_variable(name)) continue;
    const std::string& wanted = name;  // a lambda may not capture a structured binding
    const auto option = std::find_if(options().begin(), options().end(),
                                     [&](const Option& o) { return o.env == wanted; });
    if (option == options().end()) {
      // A near miss of a setting is a typo that would silently change nothing: refused. Anything
      // else with the prefix may be the user's own (a script's SKT_FOO): said once, and ignored.
      if (const auto close = nearest_variable(name)) {
        bad(name, fmt::format("unknown variable; did you mean {}? (known: {})", *close,
                              known_variables()));
      }
      config.ignored_variables.push_back(name);
      continue;
    }
    option->set(config, name, value);
  }
  validate(config);
  return config;
}

}  // namespace skt
