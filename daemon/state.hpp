// What skt-run keeps of a job between its runs, in the job's state directory: the ranklist (where
// each rank's memory is), the spares left, the nodes it lost and what became of them, how many
// launches there were, how the last one ended, and the checkpoint cadence seen so far. The same
// command run again resumes from it; a lock in the directory lets only one skt-run drive a job at a
// time.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/node_pool.hpp"

namespace skt::run {

struct JobState {
  std::string job;
  std::string status = "new";  // new, running, stopped, failed, unrecoverable, done
  int launches = 0;            // launches so far (the next one's SKT_RESTART)
  std::vector<std::string> ranklist;
  std::vector<std::string> spares;
  double cadence = 0;  // the longest time seen between two checkpoints, seconds
  std::string note;    // how the last run ended, in words
  // What the last launch ran, and where: its checkpoint is of that computation. Empty in a state
  // written by a skt-run that did not keep them.
  std::string directory;
  std::vector<std::string> command;
  // A run committed or restored a checkpoint: there is one to resume.
  bool checkpointed = false;
  // The command that wrote the job's checkpoint, if it has one, is unknown here: it was found by a
  // skt-run that had no state of it (its state directory lost, or the job first ran under mpirun
  // by hand), or the job is resumed, and no skt-run saw what happened to its segments since (a
  // commit whose report never arrived, another computation run by hand). The program judges
  // (SKT_RESTART=auto: it resumes only what the same command wrote) until a launch restores the
  // checkpoint or starts afresh.
  bool inherited = false;
  // The last run was ended as hung for making no progress (every rank beat, none checkpointed)
  // after reaching this epoch: a relaunch that stalls there again would stall at every relaunch.
  std::optional<std::uint64_t> stalled_at;
  // The job's sub-jobs (TAG+NAME) that its ranks reported: what cleaning up the job removes, where
  // another job whose tag begins with TAG+ is not the job's.
  std::vector<std::string> sub_jobs;
  // The nodes it found dead, and what became of them: lost, back among the spares, barred.
  std::vector<NodeRecord> nodes;

  bool operator==(const JobState&) const = default;
};

// One "key value" line per field; the lists are space-separated node names.
std::string format_state(const JobState& state);
// Nothing if the text is not a state (unknown key, bad number, no job).
std::optional<JobState> parse_state(const std::string& text);

// Whether `command`, run in `directory`, is another computation than the last launch of the job
// (other arguments, or relative paths read elsewhere), whose checkpoint it would restore. Before
// any checkpoint there is nothing to restore (the usual case: a mistyped argument, which the
// program refused), and a state that kept no command (an older skt-run's) is taken at its word:
// not changed. Nor is an inherited checkpoint's, whose command only the program knows.
bool command_changed(const JobState& last, const std::string& directory,
                     const std::vector<std::string>& command);

// The state in a job's state directory; nothing if there is none, or it is not a state. Reads
// without the lock: what a running skt-run last wrote, whole (write_whole).
std::optional<JobState> read_state(const std::string& directory);

// The words of a text, split at white space.
std::vector<std::string> split_words(const std::string& text);

// The job tag when none is given outside Slurm: one per directory, nodes, ranks per node and
// command ("run-" and 12 hex digits), so that the same command in the same place is the same job,
// and resumes it.
std::string default_job_tag(const std::string& directory, const std::vector<std::string>& nodes,
                            int ranks_per_node, const std::vector<std::string>& command);

// The state directory of a job when --state-dir is not given:
// ${XDG_STATE_HOME:-$HOME/.local/state}/skt-run/<job>.
std::string default_state_dir(const std::string& job);

// A file skt-run could not write (a full disk, a read-only directory); its message names the file
// and the system's reason.
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `text` to `path` whole: into path.new, then renamed into place, so that a reader never
// sees half of it. Throws WriteError, and leaves no path.new behind.
void write_whole(const std::string& path, const std::string& text);

// A job's state directory, locked while this object lives.
class StateDir {
 public:
  // Creates the directory if needed and takes its lock; throws std::runtime_error naming the
  // process that holds it when another skt-run drives the job.
  explicit StateDir(std::string path);
  ~StateDir();
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::optional<JobState> load() const;
  // Written whole (write_whole); throws WriteError.
  void save(const JobState& state) const;

 private:
  std::string path_;
  int lock_fd_ = -1;
};

}  // namespace skt::run
