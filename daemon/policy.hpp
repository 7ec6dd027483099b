// What skt-run does once a launch has ended: a pure function of what it knows of the job and of how
// the launch went, so that each rule is tested case by case (tests/unit/run/policy_test.cpp). The
// supervisor does what it says: logs, records, cleans, probes and relaunches.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/ranklist.hpp"

namespace skt::run {

// How one launch went.
struct Outcome {
  int code = 0;
  std::optional<std::string> hung;  // why skt-run ended it as hung
  // It was ended as hung for making no progress (every rank beat), having reached this epoch.
  std::optional<std::uint64_t> stalled_at;
  std::optional<std::string> dead_node;  // a node a probe found dead while it ran
  // Why a run whose work had ended, every context closed, did not end by itself: skt-run ended it
  // because its ranks did not leave MPI_Finalize, or one stopped before it; or its launcher ended
  // with ranks still in MPI_Finalize.
  std::optional<std::string> stuck_after_work;
  bool started = false;     // some rank of the program spoke
  int launcher_signal = 0;  // the signal that ended the launcher, when skt-run did not send it
  std::optional<std::uint64_t> restored;  // the epoch the program restored
  std::optional<double> restored_at;      // when it said so, seconds after the launch
  bool restored_from_storage = false;     // from a drained epoch, memory could not serve
  double cadence = 0;
  std::deque<std::string> last_errors;  // the launcher's last lines on standard error
  // The nodes a probe found dead once the run had failed; nothing before that probe.
  std::optional<std::set<std::string>> dead;
};

// What the supervisor knows of the job when a launch ends.
struct JobFacts {
  int attempt = 0;  // relaunches so far by this skt-run
  int max_restarts = 5;
  bool fresh_if_unrecoverable = false;
  double backoff = 0;  // seconds before the first relaunch, doubled for each next one
  int signal = 0;      // a signal skt-run was sent (SIGINT, SIGTERM, SIGHUP), 0 if none
  // The epoch the launch before this one stalled at, if it was ended as stalled.
  std::optional<std::uint64_t> stalled_before;
  std::vector<std::string> ranklist;
  std::vector<std::string> spares;
  // With too few spares, go on with the ranks of the dead nodes on the live ones (not
  // --stop-at-last-spare), placed apart from their groups' other members (group_of_rank, from the
  // survivors' segments; empty when unknown).
  bool continue_on_survivors = true;
  std::vector<int> group_of_rank;
  // The memory the live nodes can give ranks doubled up onto them; nothing when not known.
  std::optional<NodeRoom> room;
};

enum class Step {
  stop,              // skt-run was told to stop: the job stays as it is (128 + the signal)
  succeed,           // the program succeeded: its segments and drains go (0)
  stuck_after_work,  // its work ended but its ranks did not leave: a relaunch would redo it (8)
  start_afresh,     // its checkpoint is unrecoverable and --fresh-if-unrecoverable: clean, relaunch
  program_refused,  // the program's own verdict, which a relaunch would repeat (2, 3, 4)
  stalled_again,    // stalled at the epoch the launch before stalled at (9)
  probe,            // it failed: probe the nodes (Outcome::dead), then ask again
  launch_failed,    // the launcher refused the launch and every node lives (7)
  restart_budget,   // --max-restarts reached (6)
  out_of_spares,    // a node died and no live spare or node is left for it (5)
  relaunch,         // on `replacement.ranklist`, after `wait` seconds
};

struct Action {
  Step step = Step::relaunch;
  int exit_code = 0;        // what skt-run exits with, for the steps that end it
  Replacement replacement;  // relaunch: the layout, each dead node's spare, the spares left
  double wait = 0;          // relaunch: seconds before it
  std::string why;          // out_of_spares: what is missing
};

Action next_action(const JobFacts& job, const Outcome& out);

// No rank spoke and the launcher reported no process of the program ending: it never ran.
bool never_ran(const Outcome& out);

// A launcher that refused the launch says why (Open MPI frames its reason in rules), and would
// refuse again. One killed by a signal that skt-run did not send (the OOM killer, someone's kill),
// or ending without a word (Open MPI's mpirun exits 1, silent, when SIGTERM or SIGINT reaches it
// before its ranks start) refused nothing: that is a crash, relaunched.
bool launcher_refused(const Outcome& out);

// Whether the launcher's last words on standard error report a process of the program that ended
// (Open MPI's "mpirun noticed that process rank 1 ... exited on signal 9", "Primary job terminated
// normally, but 1 process returned / a non-zero exit code"): then the program ran, even if it never
// spoke to skt-run.
bool launcher_saw_a_process_end(const std::deque<std::string>& last_errors);

// The launcher's reason, from its last words on standard error: the start of its last message
// (Open MPI frames each in lines of dashes and says what went wrong first, then what to try).
std::string launcher_reason(const std::deque<std::string>& last_errors);

}  // namespace skt::run
