// The state behind an skt_context: the job (job.hpp), what the program declared (declarations.hpp),
// the rank's checkpoint segment, its group, the protocol that runs over them, and the storage
// level beside it (storage_level.hpp). A facade: the protocol's crash consistency lives in
// protocol.hpp, what recovery decides in decision.hpp, what a launch admits in admission.hpp, where
// bytes are in layout.hpp and arena.hpp. Its recovery is in recovery.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encoders/codec.hpp"
#include "libselfckpt/internal/call_order.hpp"
#include "libselfckpt/internal/layout.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "libselfckpt/src/admission.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/declarations.hpp"
#include "libselfckpt/src/job.hpp"
#include "libselfckpt/src/protocol.hpp"
#include "libselfckpt/src/storage_level.hpp"
#include "selfckpt/selfckpt.h"

namespace skt {

class Session : private MemoryLevel {
 public:
  // Collective over comm.
  Session(MPI_Comm comm, const std::string& config_path);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void* alloc(const std::string& name, std::size_t bytes) {
    return declarations_.alloc(name, bytes);
  }
  void protect(const std::string& name, void* ptr, std::size_t bytes) {
    declarations_.protect(name, ptr, bytes);
  }
  std::uint64_t recover();
  // Collective. With `dirty`, only those ranges changed since the last checkpoint (the private
  // objects always count as changed); null means everything may have changed.
  void checkpoint(const std::vector<DirtyRange>* dirty = nullptr);
  // Collective: whether the optimum interval since the last checkpoint has passed.
  bool need_checkpoint();
  // Collective when discard is set: every rank reaches the end before any segment goes.
  void finalize(bool discard);
  skt_stats stats() const;
  const skt_recovery& recovery() const noexcept { return clocks_.recovery; }

  // The drop-in allocator (declarations.hpp).
  void* allocate_next(std::size_t bytes) { return declarations_.allocate_next(bytes); }
  void set_scope(const std::string& scope) { declarations_.set_scope(scope); }
  const std::string& scope() const noexcept { return declarations_.scope(); }
  void* reallocate(void* ptr, std::size_t bytes) { return declarations_.reallocate(ptr, bytes); }
  bool release(void* ptr) { return declarations_.release(ptr); }
  void mark_static(const void* ptr) { declarations_.mark_static(ptr); }

 private:
  // Where the time of checkpoints and recoveries goes (skt_stats, skt_recovery, the interval).
  struct Clocks {
    double last_checkpoint = 0;  // slowest rank's time for the last checkpoint
    double last_recover = 0;
    double recorded_checkpoint = 0;  // a checkpoint's cost before the relaunch
    double last_verify = 0;          // of the last recovery
    skt_recovery recovery{};         // where the last recovery's time went on this rank
    double segments = 0;             // of this recovery: attaching, creating segments
    double join = 0;                 // of this recovery: planning and joining the group
    double last_commit = 0;          // now_seconds() when the last checkpoint or recovery ended
    std::uint64_t last_changed_bytes = 0;  // of the stream, encoded by the last checkpoint
    double last_scan = 0;                  // this rank's time finding what changed
  };
  // skt_checkpoint_dirty's ranges, as checked against what changed (check_declared).
  struct DeclaredRanges {
    std::uint64_t checks = 0;  // incremental calls checked so far
    // The ranges missed a change once: every later call compares the whole workspace.
    bool untrusted = false;
  };

  // Collective, first in every collective call: the same error on every rank when the ranks made
  // different calls (call_order.hpp), and a warning from a rank that waits long for the others.
  void enter(CollectiveCall call);
  void require_recovered(const char* call) const;

  int copies() const noexcept { return job_.config().mode == Mode::twin ? 2 : 1; }
  Finding inspect_checkpoint();
  // Of a checkpoint segment found: refuses one of other settings or regions; nothing when its
  // description is unreadable (the rank counts as lost).
  std::optional<CheckpointInfo> read_checkpoint_info(const StreamLayout& declared) const;
  // Every rank's finding, with those of an earlier start, another command or a completed job
  // judged: returns them, `mine` updated; `completed` the epoch a completed run ended at.
  std::vector<Finding> judge_findings(Finding& mine, std::optional<std::int64_t>& completed);
  // Where the group's stream puts this rank's bytes, and the checkpoint areas that hold them.
  std::pair<StreamLayout, CheckpointAreas> plan_store(const GroupShape& shape) const;
  // The store of this rank's part of the group: where its stream lies in W, and (with
  // `keep_existing`) in the checkpoint segment that survived.
  void set_up_store(const GroupShape& shape, int member, bool keep_existing);
  // A new checkpoint segment for the store, populated as `population` says, in place of any.
  void create_checkpoint(const GroupShape& shape, int group, int member, int groups,
                         std::uint64_t lineage, Segment::Population population);
  void describe_checkpoint(const GroupShape& shape, int group, int member, int groups,
                           std::uint64_t lineage);
  void place_checkpoint();
  // The checkpoint segment of a rank that its group rebuilds (RestoreInputs::prepare).
  void prepare_checkpoint(const RestorePlan& setup);
  std::uint64_t restore();
  // Collective: checkpoints of the job left on other nodes of this launch. Those the launch needs
  // (of ranks that found nothing in place) refuse it, or with drains hand it to storage: the
  // shortfall returned.
  std::optional<MemoryShortfall> admit_misplaced(const std::vector<Finding>& findings);
  // The memory level restores what it can; where it cannot and storage may serve, the shortfall
  // is returned (nothing: memory served, or the start is fresh, as `setup` says).
  std::optional<MemoryShortfall> restore_from_memory(const Finding& mine,
                                                     const std::vector<Finding>& findings,
                                                     RestorePlan& setup);
  // Storage serves (StorageLevel::restore): W as drained, then the memory level anew.
  bool restore_from_storage(const std::vector<Finding>& findings, const MemoryShortfall& shortfall);
  // Where a recovery found its epoch.
  enum class Source { none, memory, storage };
  // The log lines that end a recovery.
  void report_recovery(const Finding& mine, const RestorePlan& setup, Source source,
                       bool completed);
  // Whether this rank took over memory reserved for it on this node (a warm spare).
  bool warm_spare();
  // Fills clocks_.recovery from the clocks of the recovery just ended.
  void account_recovery(bool lost);
  // Collective: rank 0 logs the job's recovery in one line, every rank's part in it.
  void log_job_recovery();
  // Joins the group the plan gives this rank and sets up its store and protocol, over the
  // segments that survived (with their control state) or new ones. Returns the group. The
  // misplaced segments go first: the launch goes ahead without them, and the memory they hold is
  // what the new segments may need.
  int establish(const RestorePlan& setup, std::optional<ControlState> survived);
  // The bytes of memory this rank is about to take as it joins `shape` without surviving segments.
  std::uint64_t bytes_to_create(const GroupShape& shape) const;
  // Collective: puts new segments in place of this rank's segments removed from outside while the
  // job runs, before a checkpoint writes into them.
  void renew_removed_segments();
  // Adds to `declared` (the blocks of skt_checkpoint_dirty's ranges) the blocks that changed
  // outside them, found by comparing W with the copy of epoch `next` as the configuration's
  // check_declared says, and warns of them once.
  void check_declared(std::vector<std::uint64_t>& declared, std::uint64_t next);
  // What this launch created and has not committed anything to.
  void remove_created_segments();

  // MemoryLevel, for the storage level.
  bool joined() const override { return protocol_ != nullptr; }
  int join_afresh(const RestorePlan& setup) override;
  const RankStore& store() const override { return store_; }
  void load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) override;

  Job job_;
  Declarations declarations_;
  StorageLevel storage_;
  bool recovered_ = false;
  // Found by restore for establish to remove: of no use to this launch or a later one.
  std::vector<Misplaced> misplaced_;
  std::uint64_t epoch_ = 0;
  // This rank's checkpoint segment, and whether this launch created it.
  struct Checkpoint {
    Segment segment;
    bool created = false;
    CheckpointInfo info;
    std::uint64_t declared_layout_hash = 0;  // of what this launch declared, byte for byte
  } checkpoint_;
  std::unique_ptr<enc::Codec> codec_;
  RankStore store_;
  std::unique_ptr<Protocol> protocol_;
  Clocks clocks_;
  DeclaredRanges declared_ranges_;
};

}  // namespace skt
