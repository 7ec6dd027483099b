// skt-run's supervisor: launches the job, watches it (its output, the ranks' datagrams, probes of
// the nodes) until the launch ends, and carries out what the relaunch policy decides.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "daemon/cleanup.hpp"
#include "daemon/cli.hpp"
#include "daemon/launch.hpp"
#include "daemon/log.hpp"
#include "daemon/policy.hpp"
#include "daemon/process.hpp"
#include "daemon/state.hpp"
#include "daemon/stop_signal.hpp"
#include "daemon/watch.hpp"

namespace skt::run {

class Supervisor {
 public:
  Supervisor(Options& o, Plan& plan, StateDir& dir, Log& log)
      : o_(o), plan_(plan), dir_(dir), log_(log) {}

  int run();

 private:
  // One launch watched to its end (watching.cpp).
  class Watching;

  // What the job's state and nodes say before its first launch here: whether it starts afresh
  // (`fresh`) or resumes; the exit code when it can do neither.
  std::optional<int> take_up(bool& fresh);
  // Resuming from skt-run's state: refuses another number of ranks or, unless --new-command says
  // so, another command; places the ranks where the state says.
  std::optional<int> resume_from_state(const JobState& loaded);
  // The resumed layout's nodes and spares that an earlier launch found dead, probed: the ranks of
  // those dead still move (to spares, or doubled up), as after a failure; the exit code when no
  // node can take them.
  std::optional<int> leave_out_nodes_still_dead();
  // Without state: segments or drained epochs an earlier run left make the launch resume (the
  // program judges them), and `fresh` false; none, and it starts afresh.
  std::optional<int> inherit_without_state(bool& fresh, bool after_unrecoverable);
  // The job's layout, said once before its first launch, and what this host lacks for it.
  void announce();
  // Launches until the job ends, one way or another: its exit code.
  int launch_until_done(bool fresh);
  // A relaunch's result as the program reported it: the epoch restored, from where, how long after
  // the failure was seen.
  void report_restored(const Outcome& out, const std::optional<Clock::time_point>& failed_at,
                       Clock::time_point launched);
  // Watches the launch of `child` until it ends: what it came to.
  Outcome supervise(Supervised& child, int launch, double cadence);
  // Probes the job's nodes and spares after a failed launch, saying how it failed: the dead ones
  // (none when the probe itself failed, and the job relaunches where it was).
  std::set<std::string> probe_after_failure(const Outcome& out, Clock::time_point failed_at);
  // Does what the policy decided, and says so: the exit code when skt-run ends there.
  std::optional<int> carry_out(const Action& action, const Outcome& out);
  // The program refused to go on (exit `code` 2, 3 or 4): why, and what is kept.
  void report_refusal(int code);
  // The relaunch's ranklist (spares in place of lost nodes), the state saved, the back-off waited.
  // What to do once a launch has ended (next_action), the nodes probed first when it asks: the
  // dead recorded, the lost ones that are back taken among the spares, the groups read when ranks
  // must double up. Sets failed_at when the failure is seen.
  Action decide(int attempt, std::optional<std::uint64_t> stalled_before, Outcome& out,
                std::optional<Clock::time_point>& failed_at);
  // The nodes found dead recorded in the job's state as lost (or barred, when they fail again
  // within the quarantine after they came back).
  void note_losses(const std::set<std::string>& dead);
  // The lost nodes whose quarantine is over, and that answer the probe and pass take_back_check,
  // go back among the spares: after a failure, and while a run is up (the watch loop's probe, its
  // three steps apart, since the asking runs beside the loop).
  void take_back_returned(const std::set<std::string>& dead);
  struct Returning {
    std::string node;
    bool answers = false;
    std::string why_not;  // of one that answers: empty when it passed take_back_check
    int removed = 0;      // the job's stale segments removed there
  };
  struct AskedBack {
    std::vector<Returning> nodes;
    std::string trouble;  // the probe's failure, if it failed
  };
  // Lost nodes due back, not among `dead` nor in the job; while a run is up (`running`), not one
  // that failed its check since the last failure either: that is asked again at the next.
  std::vector<std::string> due_to_return(const std::set<std::string>& dead, bool running) const;
  // Reads only the options and the plan's launcher and probe.
  AskedBack ask_returning(const std::vector<std::string>& due) const;
  // Returns whether a node went back among the spares.
  bool take_back(const AskedBack& asked);
  std::map<std::string, std::string> told_not_taken_;  // node -> why, once said
  // When the dead nodes outnumber the live spares and the job goes on doubled up: the groups of
  // the job's ranks, from the survivors' checkpoints (left empty when they cannot be read), and
  // what the live nodes can give the ranks' segments (left unknown when skt-shm cannot say).
  void learn_for_doubling_up(const std::set<std::string>& dead, JobFacts& facts);
  // The new layout taken, and said: the spares that replace dead nodes, the ranks doubled up, the
  // memory left, which failures the groups still survive.
  void take_replacement(const Replacement& replacement);
  void prepare_relaunch(const Action& action, const Outcome& out);
  void end_run(Supervised& child) const;
  std::string monitor_address() const;
  void save(const std::string& status, const std::string& note);
  // Records, once, that the job has a checkpoint: at once, since skt-run may die before the run
  // ends, and then the next one must still know that another command would restore it.
  void note_checkpointed(const Watchdog& watch);
  // Records a sub-job (TAG+NAME) the job's ranks reported, which cleaning up the job removes.
  void note_sub_job(const std::string& tag);
  void record(const std::function<void()>& write);
  // The words every exit ends with: what is left of the job, and how to resume it (if the same
  // command can) or remove it.
  std::string kept_hint(bool resumable = true) const;
  // How a checkpoint found without state is resumed: the program judges its command, unless
  // --new-command says it is this one's.
  std::string inherited_terms() const;
  // Without skt-run's state, the launch places each rank on the node that holds its segments, as a
  // resume from the state does; false (said) when too few nodes are given for that.
  bool place_by_segments(const SegmentsFound& found);

  Options& o_;
  Plan& plan_;
  StateDir& dir_;
  Log& log_;
  JobState state_;
  Listener listener_;
  std::string monitor_key_;  // signs the ranks' datagrams of the launch (monitor_wire.hpp)
  bool launching_ = false;   // from the first launch on
};

}  // namespace skt::run
