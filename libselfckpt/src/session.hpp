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
  void checkpoint();
  // Collective when discard is set: every rank reaches the end before any segment goes.
  void finalize(bool discard);
  skt_stats stats() const;

  // The drop-in allocator's bookkeeping: region names by allocation order.
  void* allocate_next(std::size_t bytes);
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
  struct Finding;

  // Runs `step` on every rank and turns any local failure into the same exception on all ranks,
  // naming the first rank that failed.
  void agree(const std::function<void()>& step);
  void require_recovered(const char* call) const;
  void check_declaration(const char* call, const std::string& name) const;
  void check_job_shape(const SegmentHeader& header) const;

  SegmentIdentity identity(SegmentKind kind, const std::string& name) const;
  void check_not_stale(const SegmentIdentity& id, bool found) const;
  Segment open_region(const std::string& name, std::size_t bytes, SegmentKind kind, bool* found);

  Finding inspect_local_state();
  GroupPlan recorded_plan(const Finding& mine, int groups);
  void join_group(const GroupPlan& plan, const RecoveryDecision& decision, const Finding& mine);
  void ensure_checkpoint_segment(bool keep_existing);
  void write_state();
  void copy_chunks(const enc::ChunkList& from, const enc::ChunkList& to,
                   const std::function<void(std::uint64_t, std::uint64_t)>& progress);
  void stage_private_regions(std::uint64_t epoch);
  void restore_private_regions();
  void rebuild_and_settle(const GroupPlan& plan, const RecoveryDecision& decision);

  Comm comm_;
  int rank_ = 0;
  int nranks_ = 0;
  Config config_;
  bool ephemeral_job_ = false;
  std::unique_ptr<Logger> log_;
  std::unique_ptr<FaultInjector> fault_;

  std::vector<WorkRegion> regions_;
  std::vector<PrivateRegion> privates_;
  int next_malloc_ = 0;

  bool recovered_ = false;
  std::uint64_t epoch_ = 0;
  WorkspaceLayout layout_;
  std::vector<std::byte*> workspace_starts_;  // region starts in stream order
  Segment stage_;
  bool stage_found_ = false;
  Segment checkpoint_;
  CheckpointInfo info_;
  ControlState state_;
  std::vector<std::string> nodes_;

  Comm group_comm_;
  enc::StripeGeometry geometry_;
  std::unique_ptr<enc::Codec> codec_;
  enc::ChunkList workspace_chunks_;
  enc::ChunkList copy_chunks_;
  std::byte* copy_ = nullptr;      // B
  std::byte* checksum_ = nullptr;  // C
  std::byte* pending_ = nullptr;   // D

  double last_checkpoint_seconds_ = 0;
  double last_recover_seconds_ = 0;
};

}  // namespace skt
