// The state behind an skt_context: the rank's segments, its group, and the checkpoint protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "encoders/mpi_util.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/fault.hpp"
#include "libselfckpt/src/format.hpp"
#include "libselfckpt/src/layout.hpp"
#include "libselfckpt/src/log.hpp"
#include "libselfckpt/src/segment.hpp"
#include "selfckpt/selfckpt.h"

namespace skt {

// Bytes of a region that changed since the last checkpoint.
struct DirtyRange {
  std::string region;
  std::size_t offset = 0;
  std::size_t length = 0;
};

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
  // regions always count as changed); null means everything may have changed.
  void checkpoint(const std::vector<DirtyRange>* dirty = nullptr);
  // Collective: whether the optimum interval since the last checkpoint has passed.
  bool need_checkpoint();
  // Collective when discard is set: every rank reaches the end before any segment goes.
  void finalize(bool discard);
  skt_stats stats() const;

  // The drop-in allocator's bookkeeping: region names by allocation order.
  void* allocate_next(std::size_t bytes);
  // A region allocated by allocate_next, grown or shrunk into the next one; throws if ptr is not
  // one of this session's regions.
  void* reallocate(void* ptr, std::size_t bytes);
  bool release(void* ptr);

 private:
  struct WorkRegion {
    std::string name;
    std::size_t bytes = 0;
    Segment segment;
    bool found = false;  // existed before this launch
    bool released = false;
  };
  struct PrivateRegion {
    std::string name;
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
  };
  // One full checkpoint copy and its checksum: B and C.
  struct Copy {
    std::byte* data = nullptr;
    enc::ChunkList chunks;
  };
  struct Piece {
    std::byte* to;
    const std::byte* from;
    std::size_t bytes;
  };
  using Progress = std::function<void(std::uint64_t, std::uint64_t)>;
  struct Finding;

  // Runs `step` on every rank and turns any local failure into the same exception on all ranks,
  // naming the first rank that failed.
  void agree(const std::function<void()>& step);
  void require_recovered(const char* call) const;
  void check_declaration(const char* call, const std::string& name) const;
  void check_job_shape(const SegmentHeader& header) const;

  SegmentIdentity identity(SegmentKind kind, const std::string& name) const;
  void check_not_stale(const SegmentIdentity& id) const;
  Segment open_region(const std::string& name, std::size_t bytes, SegmentKind kind, bool* found);

  int copies() const noexcept { return config_.mode == Mode::twin ? 2 : 1; }
  std::size_t stage_entry_bytes(std::size_t bytes) const;
  std::vector<RegionSpec> stream_regions() const;
  Finding inspect_local_state();
  GroupPlan recorded_plan(const Finding& mine, int groups);
  RecoveryDecision decide(const std::vector<RankFinding>& findings, const GroupPlan& plan) const;
  void join_group(const GroupPlan& plan, const RecoveryDecision& decision, const Finding& mine);
  CheckpointAreas areas() const;
  // The checksum area of an epoch, committed or being written.
  std::byte* checksum_of(std::uint64_t epoch) const;
  void ensure_checkpoint_segment(bool keep_existing);
  void write_state();
  // skt_recover's work; recover() adds the clean-up of a refused launch.
  std::uint64_t restore();
  // What this launch created and has not committed anything to.
  void remove_created_segments();

  // Returns the bytes copied.
  static std::uint64_t copy_pieces(const std::vector<Piece>& pieces, const Progress& progress);
  std::vector<Piece> whole_stream(const enc::ChunkList& from, const enc::ChunkList& to) const;
  std::vector<Piece> dirty_pieces(const std::vector<DirtyRange>& dirty) const;
  void stage_private_regions(std::uint64_t epoch);
  void restore_private_regions();
  // Returns the bytes this rank sent.
  std::uint64_t encode(const enc::ChunkList& source, std::byte* parity, std::uint64_t epoch,
                       const enc::Incremental* incremental);

  void checkpoint_self(std::uint64_t next, const std::vector<DirtyRange>* dirty);
  void checkpoint_copies(std::uint64_t next, bool stage);
  void settle_self(const GroupPlan& plan, const RecoveryDecision& decision);
  void settle_copies(const GroupPlan& plan, const RecoveryDecision& decision);
  std::vector<int> lost_members(const GroupPlan& plan, const RecoveryDecision& decision) const;

  Comm comm_;
  int rank_ = 0;
  int nranks_ = 0;
  Config config_;
  bool ephemeral_job_ = false;
  std::unique_ptr<Logger> log_;
  std::unique_ptr<FaultInjector> fault_;
  std::vector<std::string> nodes_;

  std::vector<WorkRegion> regions_;
  std::vector<PrivateRegion> privates_;
  int next_malloc_ = 0;

  bool recovered_ = false;
  std::uint64_t epoch_ = 0;
  WorkspaceLayout layout_;
  std::vector<std::byte*> stream_starts_;  // where each stream region starts, in stream order
  Segment stage_;
  bool stage_found_ = false;
  Segment checkpoint_;
  bool checkpoint_created_ = false;  // by this launch
  CheckpointInfo info_;
  ControlState state_;

  Comm group_comm_;
  enc::StripeGeometry geometry_;
  std::unique_ptr<enc::Codec> codec_;
  enc::ChunkList workspace_chunks_;
  std::vector<Copy> copies_;        // self and single: one; double: two
  enc::ScratchPool scratch_;        // encoding buffers, kept from one checkpoint to the next
  bool full_encode_needed_ = true;  // after a fresh start, B and C say nothing about W
  // Self mode: per parity chunk of this rank, the blocks the last checkpoint wrote into its
  // checksum area. The area the next epoch writes still holds the epoch before, so these blocks,
  // unless rewritten, are carried over from C. Meaningful only while full_encode_needed_ is false.
  std::vector<std::uint64_t> parity_written_;

  double last_checkpoint_seconds_ = 0;  // slowest rank's time for the last checkpoint
  double last_recover_seconds_ = 0;
  std::uint64_t last_sent_bytes_ = 0;
  std::uint64_t last_flushed_bytes_ = 0;
  double last_commit_time_ = 0;  // MPI_Wtime when the last checkpoint or recovery ended
};

}  // namespace skt
