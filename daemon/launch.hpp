// How skt-run launches a job: the nodes and spares it plans with, the launcher's command line, and
// what a resumed job's layout becomes on the nodes given now.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/cli.hpp"
#include "daemon/log.hpp"
#include "daemon/probe.hpp"
#include "daemon/process.hpp"
#include "daemon/state.hpp"

namespace skt::run {

// For display only: the command as a shell would need it quoted.
std::string shell_quoted(const std::vector<std::string>& argv);

// A tool of this project: next to skt-run (installed), in the build tree's tools, or on PATH;
// empty when none is found.
std::string locate_tool(const std::string& name);

struct Plan {
  std::vector<std::string> ranklist;
  std::vector<std::string> spares;
  bool local = true;
  std::unique_ptr<Probe> probe;
  std::string slurm_job;  // the Slurm job skt-run runs in, if any
};

// The first plan of a job from its options (and the Slurm allocation it runs in), which it
// completes: the job tag, state directory, registry and directory where skt-run started.
Plan plan_from(Options& o, Log& log);

// The launcher and its own arguments, then, for real nodes, rank r placed on ranklist[r].
std::vector<std::string> launcher_prefix(const Options& o,
                                         const std::vector<std::string>* ranklist);

// The whole command that launches the job as planned.
std::vector<std::string> launch_command(const Options& o, const Plan& plan);

// Whether a job with this state resumes from its checkpoint (else it starts afresh).
bool resumes(const std::optional<JobState>& loaded);

// A resumed job's layout: its last one on the nodes this command gives, which need not be the
// last launch's (Slurm runs a requeued job on whatever nodes are free, and an operator may edit
// --nodes); each move is logged. Throws OutOfSpares, saying so, when too few nodes are given.
void resume_plan(const std::vector<std::string>& last_ranklist, const Options& o, Plan& plan,
                 Log& log);

// What differs between the last launch of a job and this command (command_changed).
std::string command_change(const JobState& last, const Options& o);

void write_ranklist(const std::string& path, const std::vector<std::string>& ranklist);

extern const char* const kShmemHugePages;

// The kernel's setting of huge pages for shared memory, when it gives them to nobody ("never",
// "deny"); nothing when it gives them to the library's segments, or cannot be read.
std::optional<std::string> shared_memory_huge_pages_off();

// Open MPI's shared-memory transport keeps a 4 MiB file per rank in its backing directory
// (/dev/shm: memory), which only a launcher that ends by itself removes. skt-run ends a failed run
// with SIGKILL, so on virtual nodes, where that directory is this host's, every such run left its
// ranks' files behind. Each launch there gets a directory of its own under it instead, removed
// with what it holds once the launch has ended (ranks still mapping a file keep it until they
// end); those that a killed skt-run left are removed by the next one (remove_orphans).
class TransportDir {
 public:
  TransportDir() = default;
  explicit TransportDir(int launch);
  ~TransportDir();
  TransportDir(const TransportDir&) = delete;
  TransportDir& operator=(const TransportDir&) = delete;

  // The variable that gives the ranks' transport this directory; none without one.
  EnvChanges environment() const;

  // Removes the directories of skt-runs that no longer exist.
  static void remove_orphans();

 private:
  static constexpr const char* kVariable = "OMPI_MCA_btl_vader_backing_directory";
  static constexpr std::string_view kPrefix = "skt-run.";

  // Open MPI's backing directory: the variable's, else its default.
  static std::filesystem::path base();

  std::filesystem::path path_;
};

}  // namespace skt::run
