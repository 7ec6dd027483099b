// The state behind an skt_context: configuration, the rank's two segments (the workspace arena and
// the checkpoint), its group, and the protocol that runs over them. A facade: the protocol's
// crash consistency lives in protocol.hpp, what recovery decides in decision.hpp, where bytes are
// in layout.hpp and arena.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "encoders/codec.hpp"
#include "common/mpi.hpp"
#include "libselfckpt/src/arena.hpp"
#include "libselfckpt/src/call_order.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/drain.hpp"
#include "libselfckpt/src/fault.hpp"
#include "libselfckpt/src/layout.hpp"
#include "libselfckpt/src/log.hpp"
#include "libselfckpt/src/memory.hpp"
#include "libselfckpt/src/monitor.hpp"
#include "libselfckpt/src/mpi_effects.hpp"
#include "libselfckpt/src/protocol.hpp"
#include "libselfckpt/src/segment.hpp"
#include "selfckpt/selfckpt.h"

namespace skt {

class Session {
 public:
  // Collective over comm.
  Session(MPI_Comm comm, const std::string& config_path);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void* alloc(const std::string& name, std::size_t bytes);
  void protect(const std::string& name, void* ptr, std::size_t bytes);
  std::uint64_t recover();
  // Collective. With `dirty`, only those ranges changed since the last checkpoint (the private
  // objects always count as changed); null means everything may have changed.
  void checkpoint(const std::vector<DirtyRange>* dirty = nullptr);
  // Collective: whether the optimum interval since the last checkpoint has passed.
  bool need_checkpoint();
  // Collective when discard is set: every rank reaches the end before any segment goes.
  void finalize(bool discard);
  skt_stats stats() const;
  const skt_recovery& recovery() const noexcept { return recovery_; }

  // The drop-in allocator's bookkeeping: region names by allocation order.
  void* allocate_next(std::size_t bytes);
  // The scope that names the next unnamed allocations (skt_malloc_scope).
  void set_scope(const std::string& scope);
  const std::string& scope() const noexcept { return scope_; }
  // A region allocated by allocate_next, grown or shrunk into the next one; throws if ptr is not
  // one of this session's regions.
  void* reallocate(void* ptr, std::size_t bytes);
  bool release(void* ptr);
  // The region starting at ptr no longer changes from the next checkpoint on: that one compares
  // it a last time, later ones skip it.
  void mark_static(const void* ptr);

 private:
  struct PrivateObject {
    std::string name;
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
  };

  // Collective, first in every collective call: the same error on every rank when the ranks made
  // different calls (call_order.hpp), and a warning from a rank that waits long for the others.
  void enter(CollectiveCall call);
  void require_recovered(const char* call) const;
  std::string next_unnamed() const;
  void check_declaration(const char* call, const std::string& name) const;
  // A segment of this job on this rank's node: this rank's (identity), or another's.
  SegmentIdentity identity_of(int rank, SegmentKind kind) const;
  SegmentIdentity identity(SegmentKind kind) const { return identity_of(rank_, kind); }
  void check_not_stale(SegmentKind kind) const;
  Arena& arena();

  int copies() const noexcept { return config_.mode == Mode::twin ? 2 : 1; }
  std::size_t stage_entry_bytes(std::size_t bytes) const;
  // The staged objects and the regions, as the stream places them.
  std::vector<RegionEntry> entries() const;
  Finding inspect_checkpoint();
  // Collective: the checkpoints of the job on this launch's nodes held for ranks it places
  // elsewhere (each node's first rank reports those of its node).
  std::vector<Misplaced> gather_misplaced();
  // Once a launch goes ahead without them, the misplaced segments (both kinds) are of no use and
  // would hold their nodes' memory: the rank that reported each removes it.
  void remove_misplaced(std::span<const Misplaced> misplaced);
  // Where the group's stream puts this rank's bytes, and the checkpoint areas that hold them.
  std::pair<StreamLayout, CheckpointAreas> plan_store(const GroupShape& shape) const;
  // With SKT_RESTART unset, a checkpoint (in memory or drained) whose rank ran another command
  // (`recorded`: CheckpointInfo::command) is not resumed: throws SKT_ERR_MISMATCH, naming
  // `removal`, the command that removes it.
  void refuse_another_command(std::uint64_t recorded, const std::string& removal) const;
  bool another_command(std::uint64_t recorded) const;
  Error another_command_error(const std::string& removal) const;
  // The store of this rank's part of the group: where its stream lies in W, and (with
  // `keep_existing`) in the checkpoint segment that survived.
  void set_up_store(const GroupShape& shape, int member, bool keep_existing);
  // A new checkpoint segment for the store, populated as `population` says, in place of any.
  void create_checkpoint(const GroupShape& shape, int group, int member, int groups,
                         std::uint64_t lineage, Segment::Population population);
  void place_checkpoint();
  // The checkpoint segment of a rank that its group rebuilds (RestoreInputs::prepare).
  void prepare_checkpoint(const RestorePlan& setup);
  // The bytes of memory this job's ranks are about to take: those on this rank's machine, and
  // those in each limited memory cgroup holding this rank (a batch system's limit on the job).
  struct MemoryDemand {
    std::uint64_t machine = 0;
    // What other processes' segments on this machine may still take (promised_to_others).
    std::uint64_t elsewhere = 0;
    std::vector<std::pair<MemoryLimit, std::uint64_t>> cgroups;
  };
  // Collective: the demand, of which `mine` here.
  MemoryDemand memory_demand(std::uint64_t mine);
  // Refuses (SKT_ERR_NOMEM) what the machine or a cgroup cannot hold: a segment the kernel grants
  // each rank alone can, with the others', exhaust the memory while its pages are mapped.
  void refuse_beyond_memory(const MemoryDemand& demand) const;
  std::uint64_t restore();
  // Fills recovery_ from the clocks of the recovery just ended.
  void account_recovery(bool lost);
  // Collective: rank 0 logs the job's recovery in one line, every rank's part in it.
  void log_job_recovery();
  // Joins the group the plan gives this rank and sets up its store and protocol, over the
  // segments that survived (with their control state) or new ones. Returns the group. The
  // misplaced segments go first: the launch goes ahead without them, and the memory they hold is
  // what the new segments may need.
  int establish(const RestorePlan& setup, std::optional<ControlState> survived);
  // A fresh start's warning where the groups are not of the size asked: larger (the job's ranks
  // would leave a group too small), smaller (a node holds more ranks than groups of that size
  // make), or one group of the whole job.
  void warn_of_other_group_sizes(const GroupPlan& plan) const;
  // The storage level: restores the newest completely drained epoch when memory could not serve
  // (`memory_failure` says why) or held nothing (empty). False: storage holds nothing either, on a
  // fresh start; with a memory failure that is an AgreedError, as any refusal. Where memory could
  // not serve because the ranks were placed away from their checkpoints, `misplaced_epoch` is the
  // epoch those committed: storage serves only as new an epoch, or the launch is refused unchanged.
  bool restore_from_storage(const std::vector<Finding>& findings, const std::string& memory_failure,
                            std::int64_t misplaced_epoch);
  // The same from drains with checksums (SKT_DRAIN_WRITE=copy+checksum), where each rank sees only
  // its own files: the newest epoch whose groups hold enough whole files, the others rebuilt from
  // them as a lost member's memory would be.
  bool restore_from_group_files(const std::vector<Finding>& findings,
                                const std::string& memory_failure, std::int64_t misplaced_epoch);
  // Refuses (SKT_ERR_MISMATCH, on every rank: `drained` is agreed) a restore from storage that
  // would go back before the epoch of checkpoints left on the wrong nodes (see above).
  void refuse_older_than_misplaced(const std::string& misplacement, std::int64_t misplaced_epoch,
                                   std::int64_t drained) const;
  // Bytes of a drained copy B at `offset`, into W's stage or regions.
  void load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n);
  // Collective: whether the epoch just committed is drained (SKT_DRAIN_EVERY).
  bool drain_due();
  void start_drain();
  // Collective: waits for the drain in flight, and completes its epoch when every rank's file is.
  void settle_drain();
  // Collective: warns (rank 0, once) when systemd-logind would remove the job's segments between
  // launches on some node (see logind.hpp).
  void warn_of_logind_removal() const;
  // Collective: puts new segments in place of this rank's segments removed from outside while the
  // job runs, before a checkpoint writes into them.
  void renew_removed_segments();
  // Adds to `declared` (the blocks of skt_checkpoint_dirty's ranges) the blocks that changed
  // outside them, found by comparing W with the copy of epoch `next` as config_.check_declared
  // says, and warns of them once.
  void check_declared(std::vector<std::uint64_t>& declared, std::uint64_t next);
  std::size_t staged_bytes() const;
  // What this launch created and has not committed anything to.
  void remove_created_segments();
  // Every drained epoch of the job this rank can reach (its own files, or the shared directory).
  void remove_drained_epochs();
  void stage_private_objects(std::byte* at, const Progress& progress) const;
  void restore_private_objects(const std::byte* at) const;

  // Gives up this process's hold on a job tag, taken while its context is open.
  struct ReleaseJob {
    void operator()(const std::string* job) const;
  };

  Comm comm_;
  int rank_ = 0;
  int nranks_ = 0;
  Config config_;
  bool ephemeral_job_ = false;
  std::unique_ptr<const std::string, ReleaseJob> open_job_;
  std::unique_ptr<Logger> log_;
  std::unique_ptr<FaultInjector> fault_;
  std::vector<std::string> nodes_;
  std::unique_ptr<MpiEffects> effects_;
  std::unique_ptr<Monitor> monitor_;  // when a supervisor listens (SKT_MONITOR)

  std::unique_ptr<Arena> arena_;
  std::exception_ptr refusal_;  // what refused the arena this rank found, said at skt_recover
  std::vector<PrivateObject> privates_;
  std::set<std::string> found_names_;  // regions a relaunch got back from the arena it found
  // Unnamed allocations (skt_malloc, skt::allocator) are named <scope>.<k>, k counting in each
  // scope: a relaunch gets each back if it allocates in the same order within its scope.
  std::string scope_ = "malloc";
  std::map<std::string, int> unnamed_counts_;
  std::set<const void*> released_;  // freed after recovery: still in the workspace until finalize

  bool recovered_ = false;
  // Found by restore for establish to remove: of no use to this launch or a later one.
  std::vector<Misplaced> misplaced_;
  std::uint64_t epoch_ = 0;
  Segment checkpoint_;
  bool checkpoint_created_ = false;  // by this launch
  CheckpointInfo info_;
  std::unique_ptr<enc::Codec> codec_;
  RankStore store_;
  std::unique_ptr<Protocol> protocol_;
  std::uint64_t declared_layout_hash_ = 0;  // of what this launch declared, byte for byte

  DrainWriter drain_;
  bool draining_ = false;         // a drain was started and has not been settled
  std::uint64_t run_id_ = 0;      // names this run's drained files (and a fresh start's lineage)
  double last_drain_start_ = -1;  // MPI_Wtime; -1: none yet
  bool drain_failure_reported_ = false;  // a failed drain is reported once per launch

  double last_checkpoint_seconds_ = 0;  // slowest rank's time for the last checkpoint
  double last_recover_seconds_ = 0;
  double recorded_checkpoint_seconds_ = 0;  // a checkpoint's cost before the relaunch
  double last_verify_seconds_ = 0;          // of the last recovery
  skt_recovery recovery_{};                 // where the last recovery's time went on this rank
  double segment_seconds_ = 0;              // of this recovery: attaching, creating segments
  double join_seconds_ = 0;                 // of this recovery: planning and joining the group
  double last_commit_time_ = 0;             // MPI_Wtime when the last checkpoint or recovery ended
  std::uint64_t last_changed_bytes_ = 0;    // of the stream, encoded by the last checkpoint
  double last_scan_seconds_ = 0;            // this rank's time finding what changed
  // Regions skt_mark_static named: compared by the next checkpoint, then settled (not compared).
  std::set<std::string> static_marked_;
  std::set<std::string> static_settled_;
  std::uint64_t declared_checks_ = 0;  // incremental skt_checkpoint_dirty calls checked so far
  // The declared ranges missed a change once: every later call compares the whole workspace.
  bool declared_untrusted_ = false;
};

}  // namespace skt
