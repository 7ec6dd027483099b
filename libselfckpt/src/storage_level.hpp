// The storage level beside the memory level: drains of committed epochs to files (SKT_DRAIN_*),
// and the restore of the newest completely drained epoch when memory cannot serve (more losses
// than a group tolerates, ranks placed away from their checkpoints) or holds nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libselfckpt/internal/drain.hpp"
#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/job.hpp"
#include "libselfckpt/src/protocol.hpp"

namespace skt {

// The memory level as a restore from storage fills it (the Session).
class MemoryLevel {
 public:
  // Whether a restore in memory got as far as joining the groups.
  virtual bool joined() const = 0;
  // Joins the groups of `setup` over new segments (as if every rank were lost), and readies the
  // protocol for the bytes to come: returns this rank's group.
  virtual int join_afresh(const RestorePlan& setup) = 0;
  virtual const RankStore& store() const = 0;
  // Bytes of a drained copy B at `offset`, into W's stage or regions.
  virtual void load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) = 0;

 protected:
  ~MemoryLevel() = default;
};

// Why the memory level did not serve a restore, for the storage level's choice and messages.
struct MemoryShortfall {
  std::string failure;  // empty: memory held nothing (a fresh start)
  // Where ranks were placed away from their checkpoints: the epoch those committed. Storage
  // serves only as new an epoch, or the launch is refused unchanged (0: none).
  std::int64_t misplaced_epoch = 0;
};

class StorageLevel {
 public:
  explicit StorageLevel(Job& job) : job_(job) {}

  // Collective: whether the epoch just committed is drained (SKT_DRAIN_EVERY).
  bool due(std::uint64_t epoch);
  // Starts draining `epoch`'s committed copy (and its checksums, with SKT_DRAIN_WRITE's
  // copy+checksum) as `info` and `store` place it; `layout_hash` is what this launch declared.
  void start(std::uint64_t epoch, const CheckpointInfo& info, const RankStore& store,
             std::uint64_t layout_hash);
  // Collective: waits for the drain in flight, and completes its epoch when every rank's file is.
  void settle();
  // At a finalize without discard: the drain in flight is finished, with no agreement (another
  // rank may have failed), so that a program stopping to resume elsewhere finds its last epoch.
  void finish_in_flight();
  // The job is complete: its drained epochs are of no more use.
  void abandon() { drain_.abandon(); }
  // Every drained epoch of the job this rank can reach (its own files, or the shared directory).
  void remove_drained_epochs() const;

  // Collective: restores the newest completely drained epoch into `memory` (the stage and regions
  // of W; with checksums, the lost members rebuilt), and returns it. Nothing: storage holds
  // nothing either, on a fresh start; with a memory failure that is an AgreedError, as any
  // refusal. `findings` are every rank's, as the memory level judged them.
  std::optional<std::uint64_t> restore(std::span<const Finding> findings,
                                       const MemoryShortfall& shortfall, MemoryLevel& memory);

 private:
  // Without checksums: the newest epoch whose every file the shared directory holds (rank 0's
  // view, which every rank must share); nothing where storage holds none on a fresh start.
  std::optional<DrainedEpoch> choose_complete_epoch(const MemoryShortfall& shortfall);
  std::optional<std::uint64_t> restore_whole_files(std::span<const Finding> findings,
                                                   const MemoryShortfall& shortfall,
                                                   MemoryLevel& memory);
  // With checksums drained (each rank sees only its own files): the newest epoch whose groups hold
  // enough whole files, the others rebuilt from them as a lost member's memory would be.
  std::optional<std::uint64_t> restore_group_files(std::span<const Finding> findings,
                                                   const MemoryShortfall& shortfall,
                                                   MemoryLevel& memory);
  // Every rank's drained files with checksums, as each tells the others.
  std::vector<std::vector<DrainFileHeader>> gather_group_files();
  // Of `files`, the newest epoch the groups can rebuild, each file it takes read whole.
  DrainedCandidate choose_group_epoch(std::vector<std::vector<DrainFileHeader>>& files,
                                      std::span<const Finding> findings,
                                      const MemoryShortfall& shortfall);
  void refuse_other_candidate(const DrainedCandidate& c,
                              const std::vector<std::vector<DrainFileHeader>>& files,
                              std::span<const Finding> findings) const;
  RestorePlan plan_of(const DrainedCandidate& c, std::span<const Finding> findings) const;
  // Joins the groups of `setup` afresh and loads candidate `c`'s files into `memory`: each rank
  // its own copy and checksums, the members without a whole file rebuilt by their groups.
  void load_group_files(const DrainedCandidate& c, const RestorePlan& setup, MemoryLevel& memory);
  // Refuses (SKT_ERR_MISMATCH, on every rank: `drained` is agreed) a restore from storage that
  // would go back before the epoch of checkpoints left on the wrong nodes.
  void refuse_older_than_misplaced(const MemoryShortfall& shortfall, std::int64_t drained) const;
  // Refuses (SKT_ERR_STALE) drained epochs of an earlier run at a first launch (SKT_RESTART=0).
  void refuse_at_first_launch(const std::string& what) const;
  void warn_of_restore(const MemoryShortfall& shortfall, std::uint64_t epoch,
                       const std::string& rebuilt) const;
  std::string where() const;

  Job& job_;
  DrainWriter drain_;
  bool draining_ = false;          // a drain was started and has not been settled
  double last_drain_start_ = -1;   // now_seconds(); -1: none yet
  bool failure_reported_ = false;  // a failed drain is reported once per launch
};

}  // namespace skt
