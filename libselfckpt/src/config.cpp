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
#include "libselfckpt/src/config_text.hpp"
#include "libselfckpt/src/monitor.hpp"
#include "selfckpt/selfckpt.hpp"

extern char** environ;

namespace skt {

namespace {

using namespace config_text;

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
