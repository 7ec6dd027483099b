// What every part of a context shares: the job's identity (its tag, settings, ranks and their
// nodes), where it logs, its fault points, and the Effects through which its ranks agree. Built
// collectively by skt_init; the parts of a Session (declarations, admission, the storage level)
// read it and never change it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mpi.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/fault.hpp"
#include "libselfckpt/src/log.hpp"
#include "libselfckpt/src/monitor.hpp"
#include "libselfckpt/src/mpi_effects.hpp"

namespace skt {

// Seconds on a steady clock, for durations.
double now_seconds();

// Whether this process has not yet said `message`. A program that opens several contexts over the
// same ranks (skt-hpl: one for its record of the run, one for each test) would otherwise be told
// the same thing by each.
bool first_time_in_process(const std::string& message);

class Job {
 public:
  // Collective over comm: reads the configuration, agrees on the job's tag and settings, and
  // learns every rank's node.
  Job(MPI_Comm comm, const std::string& config_path);
  // A job whose ranks meet through `effects` without MPI (the simulator's), with `config` as every
  // rank read it and `nodes` each rank's node.
  Job(Effects& effects, Config config, int rank, int nranks, std::vector<std::string> nodes);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  Effects& effects() noexcept { return *effects_; }
  const Config& config() const noexcept { return config_; }
  Logger& log() const noexcept { return *log_; }
  FaultInjector& fault() const noexcept { return *fault_; }
  Monitor* monitor() const noexcept { return monitor_.get(); }  // when a supervisor listens
  int rank() const noexcept { return rank_; }
  int nranks() const noexcept { return nranks_; }
  const std::vector<std::string>& nodes() const noexcept { return nodes_; }
  const std::string& node_of(int rank) const { return nodes_[static_cast<std::size_t>(rank)]; }
  // No stable name (no SKT_JOB, no Slurm job): a relaunch cannot find the segments, so they are
  // removed with the process.
  bool ephemeral() const noexcept { return ephemeral_; }
  // Names this run's drained files, and a fresh start's lineage.
  std::uint64_t run_id() const noexcept { return run_id_; }

  // A segment of this job on this rank's node: `rank`'s, of `kind`.
  SegmentIdentity identity_of(int rank, SegmentKind kind) const;
  SegmentIdentity identity(SegmentKind kind) const { return identity_of(rank_, kind); }
  // Throws SKT_ERR_STALE when SKT_RESTART=0 says this is a first launch and a segment of `kind`
  // exists from an earlier run.
  void refuse_stale(SegmentKind kind) const;
  // With SKT_RESTART unset, a checkpoint (in memory or drained) whose rank ran another command
  // (`recorded`: CheckpointInfo::command) is not resumed.
  bool another_command(std::uint64_t recorded) const;
  // The refusal of such a checkpoint (SKT_ERR_MISMATCH), naming `removal`, the command that
  // removes it.
  Error another_command_error(const std::string& removal) const;
  void refuse_another_command(std::uint64_t recorded, const std::string& removal) const;
  // This process's own command, as a checkpoint records it.
  static std::uint64_t command_print();

 private:
  // Gives up this process's hold on a job tag, taken while its context is open.
  struct ReleaseJob {
    void operator()(const std::string* job) const;
  };
  void agree_on_tag();
  // Returns the settings every rank shares.
  std::string agree_on_settings();
  void warn_of_logind_removal() const;

  Comm comm_;
  int rank_ = 0;
  int nranks_ = 0;
  Config config_;
  bool ephemeral_ = false;
  std::unique_ptr<const std::string, ReleaseJob> open_job_;
  std::unique_ptr<Logger> log_;
  std::unique_ptr<FaultInjector> fault_;
  std::vector<std::string> nodes_;  // before mpi_effects_, which refers to it
  std::unique_ptr<MpiEffects> mpi_effects_;
  Effects* effects_ = nullptr;  // mpi_effects_, or the simulator's
  std::unique_ptr<Monitor> monitor_;
  std::uint64_t run_id_ = 0;
};

}  // namespace skt
