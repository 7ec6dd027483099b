// One typed configuration: defaults, then a TOML file, then SKT_* environment variables. Parsing is
// a pure function of the file and the variables, validated once, with errors that name the
// setting and what to change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "encoders/codec.hpp"
#include "libselfckpt/internal/names.hpp"

namespace skt {

enum class LogLevel { trace, debug, info, warn, error, off };

// Protocol steps at which SKT_FAULT can kill the process (see fault.hpp for their meaning).
enum class FaultStep {
  stage,
  encode,
  encoded,
  agreed,
  flush,
  committed,
  rebuild,
  recover,
  drain,
  finalize,
  create
};

// How skt_checkpoint_dirty checks the program's promise that nothing changed outside the declared
// ranges, by comparing the workspace with the committed copy there: in every call; in a sample
// (the first incremental call of a run whole, then a rotating sixteenth of the workspace per call);
// or never.
enum class CheckDeclared { all, sample, off };

// What happens at an armed fault point.
enum class FaultAction {
  kill,      // the process dies (SIGKILL), with no clean-up
  term,      // the launcher gets SIGTERM, as when a scheduler cancels the job; the process waits
             // for the launcher to end it
  launcher,  // the launcher dies (SIGKILL); the process waits to die with it
  raise,     // the call fails on this rank alone (an error thrown there), to test that every
             // rank ends with the same error
};

struct FaultSpec {
  FaultStep step = FaultStep::stage;
  int rank = 0;
  std::optional<std::uint64_t> epoch;
  std::optional<int> launch;  // only on this launch (SKT_RESTART's value; unset counts as 0)
  FaultAction action = FaultAction::kill;
};

struct Config {
  std::string job;   // empty: derived (Slurm job id, else ephemeral)
  std::string node;  // empty: derived (SLURMD_NODENAME, else the host name)
  int group_size = 4;
  enc::Scheme scheme = enc::Scheme::xor_parity;
  int parity = 1;
  Mode mode = Mode::self;
  double mtbf_seconds = 0;  // 0: not set
  std::size_t chunk_bytes = 256 * 1024;
  int pipeline_depth = 4;
  bool huge_pages = false;
  // skt_checkpoint compares W with B to encode only the blocks that changed (self mode, xor, rs).
  bool find_changes = true;
  CheckDeclared check_declared = CheckDeclared::sample;
  // How long a relaunch waits for processes of an earlier launch to let go of the job's segments.
  double attach_wait_seconds = 10;
  // How long a rank waits at the start of a collective call for the other ranks to make it too
  // before it warns (then at each doubling); 0: never.
  double wait_warning_seconds = 60;
  // host:port of the job's supervisor (skt-run), told of each rank's liveness and progress.
  std::string monitor;
  std::string monitor_key;  // hex; signs the monitor's datagrams
  // SKT_* variables of the environment that are no setting (nor near one): ignored, and said.
  std::vector<std::string> ignored_variables;
  LogLevel log_level = LogLevel::warn;
  std::optional<FaultSpec> fault;
  std::optional<int> restart;  // relaunch count given by the launcher; 0 = first launch
  // The second level (drain.hpp): committed copies written to files under this directory (empty:
  // none), after every `drain_every_commits`-th commit, or the first commit once
  // `drain_every_seconds` have passed since the last drain started.
  std::string drain_dir;
  // With the checksum of each drained copy (C) too, so that a rank's missing or damaged file is
  // rebuilt from its group's files: what node-local drain directories need.
  bool drain_checksum = false;
  int drain_every_commits = 1;
  double drain_every_seconds = 0;

  // The settings that every rank of a job must share, in one comparable string.
  std::string shared_settings() const;
};

// SKT_* variables of the process environment. Variables starting with SKT_HPL_ or SKT_RUN_, and
// the [hpl] and [run] tables of a configuration file, belong to the programs built on the library
// (skt-hpl, skt-run), which check them; the library leaves them alone.
using Environment = std::vector<std::pair<std::string, std::string>>;
Environment skt_environment();

// Throws skt::Error(SKT_ERR_CONFIG) with a message naming the setting, its origin and the fix.
// `path` may be empty: then SKT_CONFIG names the file, if set.
Config load_config(const std::string& path, const Environment& env);

// Parsers shared with the tools.
std::optional<FaultSpec> parse_fault(const std::string& text);
std::optional<std::size_t> parse_size(const std::string& text);
// 1/0, true/false, yes/no, on/off, in any case.
std::optional<bool> parse_boolean(std::string_view text);
std::optional<LogLevel> parse_log_level(const std::string& text);
// Seconds, with an optional unit: s, m, h or d.
std::optional<double> parse_duration(const std::string& text);

// The tag of a context whose rank 0 is rank `leader` of MPI_COMM_WORLD. Contexts on parts of one
// launch (the members of an ensemble split from MPI_COMM_WORLD, the components of a coupled code)
// share SKT_JOB, and their ranks count from 0 in each: under one tag, the member ranks 0 on one
// node would share a segment, and a relaunch that places the members on each other's nodes would
// restore each other's data. A context led by world rank 0 keeps the tag; the others take the
// sub-job JOB+wLEADER (JOB+SUB.wLEADER under a sub-job's tag). Nothing when that is too long.
std::optional<std::string> context_job_tag(const std::string& job, int leader);
std::string_view fault_step_name(FaultStep step) noexcept;

}  // namespace skt
