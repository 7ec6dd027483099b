// skt-run's command line: its options, read and checked, and the exit codes it gives of its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/watch.hpp"

namespace skt::run {

// skt-run's own exit codes, beyond the program's 0, 2, 3 and 4 which it passes on.
constexpr int kExitUsage = 2;
constexpr int kExitOutOfSpares = 5;
constexpr int kExitRestartBudget = 6;
constexpr int kExitLaunchFailed = 7;
constexpr int kExitStuckAfterWork = 8;
constexpr int kExitStalledAgain = 9;

// A job tag leaves room for the sub-jobs a program derives from it (skt-hpl's TAG+t12).
constexpr std::size_t kMaxJobTag = 48;

struct Options {
  std::string nodes, hostfile, spare_nodes;
  std::optional<int> spares;
  int ranks_per_node = 1;
  std::string job;
  std::string launch = "auto";
  std::string launcher = "mpirun";
  std::string launcher_args;
  std::string probe = "auto";
  std::string registry;
  int max_restarts = 5;
  double backoff = 0;
  std::string ranklist_out;
  std::string shm_tool;
  std::string state_dir;
  std::string revive;
  std::string monitor_host;
  double silence = WatchLimits{}.silence;
  double startup = WatchLimits{}.startup;
  double progress_floor = WatchLimits{}.progress_floor;
  std::optional<double> hang_timeout;
  double probe_interval = 5;
  double probe_timeout = 10;
  bool dry_run = false;
  bool fresh_if_unrecoverable = false;
  bool new_command = false;
  bool warm_spares = true;
  bool continue_on_survivors = true;  // not --stop-at-last-spare
  double quarantine = 600;            // seconds a lost node sits out before it may come back
  double keep_free_mib = 0;  // kept free on a node beyond the library's 1/32 when doubling up
  bool status = false;       // --status: say where the job's nodes are and why, and exit
  std::vector<std::string> command;
  std::string directory;  // where skt-run was started (plan_from)
};

// Settings that make no sense, said in words (std::invalid_argument).
void validate(const Options& o);

// The options of the command line, checked; or the exit code to leave with (0 after --help), what
// was wrong already said on standard error.
std::variant<Options, int> parse_command_line(int argc, char** argv);

}  // namespace skt::run
