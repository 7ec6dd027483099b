// What the ranks of a run tell skt-run (the library's SKT_MONITOR datagrams), and whether the run
// is hung: a rank silent too long (stopped, or its node frozen), a rank that never started, or no
// checkpoint for much longer than the job's own cadence (a deadlock). Pure: times are given.
//
// Each context of a rank speaks for itself (a program may hold several: skt-hpl's TAG+hpl and
// TAG+t0) from its hello to its bye; a context that said bye is silent as it should be. Datagrams
// get lost (UDP; skt-run stopped or busy while its socket filled up): a beat stands for a lost
// hello, and a process's beats say how many of its contexts are open and that it runs, so a context
// silent while its process beats on ended with its bye lost; it is not a stopped rank. A program
// that has no context left is not watched for progress: it may have hours of work after its last
// checkpoint. Its process still beats (live) until it enters MPI_Finalize or exits, so one stopped
// in between (or on a frozen node) is silent: with no context open, its work ended, and as with a
// rank stuck in MPI_Finalize what ends its run is the supervisor's choice.
// Each rank's process reports its exit; when every rank exited and the launcher outlives them by
// --hang-timeout (else --progress-floor), the launcher is overdue, and the ranks' exit codes are
// the run's. Each also reports entering MPI_Finalize, which ends once every rank entered it: when
// every rank entered it or exited, one still in it after the same bound is stuck there (a frozen
// MPI daemon or node holds it). With a context still open that is a hang like any other; with none,
// the program's work ended, and what ends its run is the supervisor's choice.
// A context's beat names the collective call its rank waits in for the others, if it does: a run
// that stops getting on (every rank beats, no checkpoint comes) says which ranks wait in which
// call and which are elsewhere, and at which epoch it stalled. A run that stalls again at the
// epoch the run before it stalled at would stall at every relaunch (a deadlock of the program,
// work longer than the bound): skt-run stops there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace skt::run {

struct Heard {
  std::string job;
  int rank = 0;
  int launch = 0;
  long pid = 0;
  // hello, beat, recovered, recovered-storage, commit, bye; of the process: live, finalize, exit
  std::string kind;
  std::uint64_t epoch = 0;  // for exit, the exit code
  // A context's: the rank of its process in MPI_COMM_WORLD (a library that does not say: `rank`).
  int process = 0;
  // A process's (live, finalize): how many of its contexts are open, if the library says.
  std::optional<int> open_contexts;
  // A context's beat: the collective call its rank waits in for the others ("skt_checkpoint").
  std::string waiting_in;
};
std::optional<Heard> parse_heard(std::string_view line);

struct WatchLimits {
  double silence = 10;   // a rank that spoke and then says nothing this long is hung
  double startup = 120;  // every rank speaks within this long of the launch
  // No checkpoint for max(floor, factor x the longest interval between checkpoints seen) is a
  // hang; before two checkpoints were seen there is no cadence, and no such bound unless fixed.
  double progress_floor = 300;
  double progress_factor = 3;
  std::optional<double> progress_fixed;  // --hang-timeout: this bound, whatever the cadence
};

class Watchdog {
 public:
  // `cadence`: the longest interval between checkpoints seen in earlier runs of the job.
  Watchdog(std::string job, int launch, int ranks, WatchLimits limits, double cadence,
           double started);

  // Counts what a rank of this launch of this job (or of a sub-job, JOB+name) says.
  void heard(const Heard& heard, double now);
  // Why the run is hung at `now`, in words; nothing while it is not.
  std::optional<std::string> hung(double now) const;
  // When the run is hung at `now` because it stopped getting on (every rank beats, none
  // checkpoints within the bound): the epoch it reached, its latest commit or else the epoch it
  // restored (0: none). Nothing otherwise.
  std::optional<std::uint64_t> stalled_at(double now) const;
  // Why the launcher is overdue at `now` (every rank exited, the bound ago), in words; nothing
  // while it is not.
  std::optional<std::string> launcher_overdue(double now) const;
  // The ranks were stopped on purpose until `now` (their Slurm job suspended): their silence, the
  // time without a checkpoint, the time to start and the time in MPI_Finalize count from `now`.
  void pardon(double now);
  // Once every rank exited: the first nonzero exit code in rank order, else 0.
  std::optional<int> exit_code() const;
  // The first nonzero exit code a rank reported, in rank order, whether or not every rank exited
  // (Open MPI's mpirun ends the others when one fails, and exits with its code); nothing while none
  // did.
  std::optional<int> failed_exit() const;
  // Why a rank is stuck in MPI_Finalize at `now`, in words; nothing while none is.
  std::optional<std::string> stuck_in_finalize(double now) const;
  // Why a rank is stuck after its work at `now`: stuck in MPI_Finalize, or silent with no context
  // open before it (stopped after its last context ended); nothing while none is.
  std::optional<std::string> stuck_after_work(double now) const;
  // Whether some context of a rank has not said bye (or its process has not exited).
  bool contexts_open() const noexcept { return !voices_.empty(); }
  // Whether the program's work ended: no context open, and every rank entered MPI_Finalize or
  // exited. A launcher that fails then ends ranks whose work was done: a relaunch would do it
  // again.
  bool work_ended() const { return !contexts_open() && every_rank_finalizing_or_exited(); }

  bool anyone_started() const noexcept { return !started_.empty(); }
  // The epoch the ranks restored, and when the first said so.
  std::optional<std::uint64_t> restored() const noexcept { return restored_; }
  std::optional<double> restored_at() const noexcept { return restored_at_; }
  // Whether that epoch came from storage (a drained epoch), not from memory.
  bool restored_from_storage() const noexcept { return restored_from_storage_; }
  double cadence() const noexcept { return cadence_; }
  // Whether the job has a checkpoint: a rank of this run committed one, or restored one.
  bool checkpointed() const noexcept { return !commits_.empty() || restored_.value_or(0) > 0; }
  // How many of the job's contexts (itself and its sub-jobs) committed a checkpoint in this run.
  std::size_t contexts_committed() const;
  // The bound on the time without a checkpoint now, if there is one.
  std::optional<double> progress_bound() const;

 private:
  bool ours(const Heard& h) const;
  // Why the run is hung at `now` for a rank silent, or one that did not start; nothing otherwise.
  std::optional<std::string> silent_or_unstarted(double now) const;
  // Why the run is hung at `now` for want of a checkpoint within the bound; nothing otherwise.
  std::optional<std::string> not_getting_on(double now) const;
  // Which ranks wait in which collective call, "skt_checkpoint on ranks 0-1, none on rank 2"; empty
  // when none does (or the library does not say).
  std::string calls_waited_in() const;
  double launcher_bound() const;
  bool every_rank_exited() const { return static_cast<int>(exits_.size()) == ranks_; }
  bool every_rank_finalizing_or_exited() const;
  // Forgets the contexts of a process that says it has none open (their byes were lost).
  void forget_contexts_of(int process);
  // Whether the process of a silent context still beats: the context ended, its bye lost.
  bool process_beats(int process, double now) const;

  std::string job_;
  int launch_;
  WatchLimits limits_;
  double cadence_;
  double started_at_;  // the launch, or the end of a pardon
  int ranks_;
  struct Voice {
    double last;             // when it last spoke
    int process;             // the world rank of its process
    std::string waiting_in;  // the collective call it waits in for the others, as it last said
  };
  // Each (context, rank) open, as far as its datagrams tell; a context that said bye is gone.
  std::map<std::pair<std::string, int>, Voice> voices_;
  // Contexts that said bye: a beat that crossed its bye on the way does not reopen one.
  std::set<std::pair<std::string, int>> said_bye_;
  std::set<int> started_;     // ranks heard from
  std::map<int, int> exits_;  // rank -> exit code, of the ranks that exited
  double last_exit_ = -1;
  std::set<int> finalizing_;  // ranks that entered MPI_Finalize
  // When each rank's process last beat, while it has neither entered MPI_Finalize nor exited.
  std::map<int, double> processes_;
  double last_finalize_ = -1;
  double last_progress_;
  double last_commit_ = -1;
  std::optional<std::uint64_t> restored_;
  std::optional<double> restored_at_;
  bool restored_from_storage_ = false;
  std::set<std::pair<std::string, std::uint64_t>> commits_;  // (job or sub-job, epoch) seen
};

}  // namespace skt::run
