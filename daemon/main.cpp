// skt-run: launches an MPI program on a ranklist and keeps it going without a human: when a run
// fails or hangs, it probes the nodes, swaps each dead node for a spare (healthy ranks stay where
// their memory is) and relaunches, until the program succeeds or cannot go on. What it knows of a
// job lives in the job's state directory, so that the same command resumes a job it stopped.
// The parts: cli (options), launch (plan and command line), cleanup (what a job leaves on its
// nodes), policy (what to do when a launch ends), supervisor (the watch loop that does it).
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <memory>
#include <variant>

#include "daemon/cleanup.hpp"
#include "daemon/cli.hpp"
#include "daemon/launch.hpp"
#include "daemon/log.hpp"
#include "daemon/node_pool.hpp"
#include "daemon/output.hpp"
#include "daemon/probe.hpp"
#include "daemon/ranklist.hpp"
#include "daemon/state.hpp"
#include "daemon/supervisor.hpp"

namespace skt::run {
namespace {

// --revive: the node marked alive again in the job's registry.
int revive(const Options& o) {
  if (o.job.empty() && o.registry.empty() && o.state_dir.empty()) {
    fmt::print(stderr, "skt-run: --revive needs --job (or --state-dir, or --registry)\n");
    return kExitUsage;
  }
  const std::string registry = !o.registry.empty()    ? o.registry
                               : !o.state_dir.empty() ? o.state_dir + "/registry"
                                                      : default_registry(o.job);
  const bool was_dead = mark_alive(registry, o.revive);
  fmt::print("node {} {} in {}\n", o.revive, was_dead ? "marked alive" : "was not marked dead",
             registry);
  return 0;
}

// --status: where each node of the job is and why, from its state.
int status(const Options& o) {
  if (o.job.empty() && o.state_dir.empty()) {
    fmt::print(stderr, "skt-run: --status needs --job (or --state-dir)\n");
    return kExitUsage;
  }
  const std::string directory = o.state_dir.empty() ? default_state_dir(o.job) : o.state_dir;
  const auto state = read_state(directory);
  if (!state) {
    fmt::print(stderr,
               "skt-run: no state of job {} in {}: give the --job, or the --state-dir, that the "
               "job ran with\n",
               o.job, directory);
    return 1;
  }
  fmt::print("job {}: {} after {} launch{}{}\n", state->job, state->status, state->launches,
             state->launches == 1 ? "" : "es", state->note.empty() ? "" : "; " + state->note);
  std::vector<std::string> nodes = nodes_of(state->ranklist);
  nodes.insert(nodes.end(), state->spares.begin(), state->spares.end());
  for (const auto& record : state->nodes) {
    if (std::find(nodes.begin(), nodes.end(), record.node) == nodes.end())
      nodes.push_back(record.node);
  }
  const std::int64_t now = epoch_seconds();
  for (const auto& node : nodes) {
    fmt::print("  {:<12} {}\n", node,
               standing_text(state->ranklist, state->spares, state->nodes, node, now));
  }
  return 0;
}

// --dry-run: the launch the command would make now (a job with a state resumes on its last
// layout), and what would become of the job.
int dry_run(const Options& o, Plan& plan, Log& log) {
  const auto loaded = read_state(o.state_dir);
  std::string how = "starts afresh";
  if (loaded && loaded->status == "unrecoverable" && !o.fresh_if_unrecoverable) {
    how = "would stop: its checkpoint was found unrecoverable";
  } else if (resumes(loaded) && loaded->ranklist.size() != plan.ranklist.size()) {
    how = fmt::format("would be refused: it ran {} ranks", loaded->ranklist.size());
  } else if (resumes(loaded) && command_changed(*loaded, o.directory, o.command) &&
             !o.new_command) {
    how = fmt::format("would be refused: {}", command_change(*loaded, o));
  } else if (resumes(loaded)) {
    try {
      resume_plan(loaded->ranklist, o, plan, log);
    } catch (const OutOfSpares& e) {
      fmt::print(stderr, "skt-run: {}\n", e.what());
      return kExitOutOfSpares;
    }
    how = fmt::format(
        "resumes after {} launch{}{}", loaded->launches, loaded->launches == 1 ? "" : "es",
        o.new_command ? " (--new-command)" : ", if this command wrote its checkpoint");
  } else if (!plan.local && !(loaded && loaded->status == "unrecoverable")) {
    how =
        "starts afresh, unless its nodes keep segments of an earlier run: skt-run counts them at "
        "launch, and the program resumes them if this command wrote them";
  } else if (const auto found = find_segments(o, plan); found && found->count > 0) {
    how = "resumes the segments skt-run has no state of, if this command wrote them";
  }
  fmt::print("{}\n", shell_quoted(launch_command(o, plan)));
  fmt::print("# job {} ({}), {} ranks on {}, spares: {}, probe {}, state in {}\n", o.job, how,
             plan.ranklist.size(), fmt::join(nodes_of(plan.ranklist), ","),
             plan.spares.empty() ? "none" : fmt::format("{}", fmt::join(plan.spares, ",")),
             plan.probe->name(), o.state_dir);
  return 0;
}

int run(int argc, char** argv) {
  auto parsed = parse_command_line(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  Options& o = std::get<Options>(parsed);
  if (!o.revive.empty()) return revive(o);
  if (o.status) return status(o);
  if (o.command.empty()) {
    fmt::print(stderr, "skt-run: no program: give it after --, with its arguments\n");
    return kExitUsage;
  }

  Log log;
  Plan plan;
  try {
    plan = plan_from(o, log);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return kExitUsage;
  }
  if (o.dry_run) return dry_run(o, plan, log);
  if (find_program(o.launcher).empty()) {
    fmt::print(stderr,
               "skt-run: the launcher '{}' is not found (install openmpi-bin or give --launcher)\n",
               o.launcher);
    return kExitLaunchFailed;
  }
  // Only virtual nodes share this host's files; a real node may have the program where this one
  // has not, and if it has not, its launcher says so (exit 7).
  if (plan.local && find_program(o.command[0]).empty()) {
    fmt::print(stderr, "skt-run: the program '{}' is not found\n", o.command[0]);
    return kExitUsage;
  }
  std::unique_ptr<StateDir> dir;
  try {
    dir = std::make_unique<StateDir>(o.state_dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: job {}: {}\n", o.job, e.what());
    return kExitUsage;
  }

  catch_stop_signals();
  output::divert_failures_to(dir->file("output"));
  Supervisor supervisor(o, plan, *dir, log);
  try {
    return supervisor.run();
  } catch (const WriteError& e) {
    output::write(STDERR_FILENO,
                  fmt::format("skt-run: job {}: {}; nothing was launched: make that place "
                              "writable, or give another (--state-dir, --ranklist-out)\n",
                              o.job, e.what()));
    return kExitUsage;
  }
}

}  // namespace
}  // namespace skt::run

int main(int argc, char** argv) {
  // Started with a standard descriptor closed (`>&-`), skt-run would open its state or a socket
  // there and write its output into it.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
  try {
    return skt::run::run(argc, argv);
  } catch (const std::exception& e) {
    skt::run::output::write(STDERR_FILENO, fmt::format("skt-run: {}\n", e.what()));
    return 1;
  }
}
