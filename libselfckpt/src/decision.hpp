// What a relaunched job restores, as pure functions of what every rank found and verified, so that
// every rank reaches the same answer from the same gathered facts.
//
// Recovery trusts no byte it has not verified. Each epoch's data and checksum carry a CRC per block
// (its digest), so a rank can tell, block by block, whether its workspace W or its committed copy
// B still holds an epoch, whatever the program wrote before recovering and whatever flipped in
// memory. Blocks that neither holds, and checksum blocks that do not match, are erasures of their
// rows, as are all the items of a member that lost its memory; an epoch can be restored when no
// row of any group has more erasures than its code tolerates. The candidates are the newest epoch
// the protocol may have committed, then the one before.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/planner.hpp"
#include "libselfckpt/src/config.hpp"

namespace skt {

// What one rank tells the others at a relaunch, before anything is decided.
struct Finding {
  std::int32_t valid = 0;  // its segments survived and match this launch's declarations
  ControlState state;
  // What its checkpoint recorded of its group (when valid).
  std::int32_t groups = 0;
  std::int32_t group = -1;
  std::int32_t member = -1;
  std::int32_t group_size = 0;
  std::int32_t members[kMaxGroupSize] = {};
  std::uint64_t recorded_layouts[kMaxGroupSize] = {};  // every member's layout, as recorded
  std::uint64_t lineage = 0;                           // the start it descends from (when valid)
  // Its segments were written by another command, or from another directory, than this launch's,
  // and SKT_RESTART is unset (or auto): nothing says this launch is a relaunch of that run.
  std::int32_t other_command = 0;
  // What this launch declared.
  std::uint64_t layout_hash = 0;
  std::uint64_t stage_bytes = 0;
  std::uint64_t regions_bytes = 0;
};

// Ranks whose segments come from an earlier start of the job than the others' (the newest lineage
// found): a node that was out of reach while the job was removed and started again under its tag,
// and is back. Their epochs count the other start's checkpoints, and the same number may name
// other data, so they are no checkpoint of this one: the ranks are rebuilt as if lost.
std::vector<int> stale_ranks(std::span<const Finding> findings);

// Whether any rank's segments hold data of an epoch (encoded, agreed or committed): another
// command's segments that hold none are what a run left that stopped before its first checkpoint
// (a mistyped argument, a crash at once), nobody's checkpoint, and a launch may take them as
// nothing.
bool holds_epoch(std::span<const Finding> findings);

// A checkpoint segment of the job that a node of this launch holds for a rank this launch places
// on another node: the ranks were mapped to the nodes in another order (another host order or
// mapping policy), or the job moved to a shifted set of nodes (a batch job requeued elsewhere).
// The first rank of this launch on the node reports it.
struct Misplaced {
  std::int32_t rank = -1;       // whose checkpoint it is
  std::int32_t holder = -1;     // the rank of this launch on the node that holds it
  std::int64_t newest = -1;     // the newest epoch it may hold; none once the job finished
  std::int64_t committed = -1;  // the newest it holds for certain
  std::uint64_t lineage = 0;
};

// The misplaced checkpoints this launch would need: of ranks that found nothing valid in place,
// holding an epoch, of the newest lineage found. Once the job completed, none.
std::vector<Misplaced> needed_elsewhere(std::span<const Finding> findings,
                                        std::span<const Misplaced> misplaced);

// Why a launch that would start afresh, or could not restore, without the checkpoints it needs
// elsewhere is refused instead, and how to relaunch.
std::string misplacement_refusal(std::span<const Misplaced> needed,
                                 const std::vector<std::string>& nodes, const std::string& job);

// The epochs to try, newest first; none: nothing was ever committed, start afresh.
struct Candidates {
  std::vector<std::int64_t> epochs;
  // Single mode: the first epoch is one whose update of the only copy was interrupted; it can be
  // finished only from every rank's data, without the checksum (which the update was rewriting).
  bool redo = false;
};
Candidates restore_candidates(Mode mode, std::span<const Finding> findings);

// The epoch after which an earlier run completed the job, if any rank's checkpoint says so: each
// rank records it once every rank has finished (skt_finalize discarding the job), before any
// removes its segments, so the job was complete whatever is left of the others'.
std::optional<std::int64_t> completed_epoch(std::span<const Finding> findings);

// The groups the surviving checkpoints recorded, each rank vouching for its group's member list.
// Throws skt::Error: SKT_ERR_UNRECOVERABLE when a whole group vanished (nobody is left to say who
// was in it), SKT_ERR_MISMATCH when the records disagree or a rank declared regions that differ
// from what its group recorded for it.
GroupPlan recorded_plan(std::span<const Finding> findings, const std::vector<std::string>& nodes,
                        const std::string& job);

// A run of chunks [begin, end).
struct ChunkRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  bool operator==(const ChunkRange&) const = default;
};

// What a rank can serve of one epoch, once it has verified its memory against the digest.
struct Holdings {
  bool whole = false;                   // it holds the epoch's digest; otherwise it counts as lost
  std::vector<ChunkRange> data_erased;  // stream chunks with a block that neither W nor B holds
  std::vector<ChunkRange> parity_erased;  // checksum chunks with a block that does not match
  std::uint64_t written_blocks = 0;       // W blocks that differ from the epoch (B held them)
  // For messages: what its first erased data chunk holds, and whether W was written there.
  std::string first_erased;
  bool first_erased_written = false;

  std::vector<std::byte> serialize() const;
  static Holdings deserialize(std::span<const std::byte> bytes);
};

// One group as every rank can compute it.
struct GroupShape {
  std::vector<int> ranks;              // by member index
  std::vector<std::uint64_t> chunks;   // each member's stream length in chunks
  std::vector<std::uint64_t> layouts;  // each member's layout hash (what it declared)
  enc::StripeGeometry geometry;
  int tolerance = 0;
};

// Whether an epoch can be restored, and how.
struct Verdict {
  bool feasible = true;
  std::string reason;  // when not: which group and row, and why
  // Per group: the members lost as a whole (rebuilt row after row), and the rows that scattered
  // erasures make different (each repaired on its own, the lost members' items there included).
  std::vector<std::vector<int>> lost;
  std::vector<std::vector<enc::RowRepair>> repairs;
};

// `holdings[r]` is rank r's; with `redo`, no checksum is used: every rank must hold all its data.
Verdict assess(std::span<const GroupShape> groups, std::span<const Holdings> holdings, bool redo,
               std::int64_t epoch, const std::vector<std::string>& nodes);

// Every group's shape: its members, their stream lengths, its geometry.
std::vector<GroupShape> group_shapes(const GroupPlan& plan,
                                     std::span<const std::uint64_t> chunks_by_rank, int parity,
                                     std::size_t chunk_bytes, int tolerance);

// Under sum, the stage fills whole periods of a group's rows (layout.hpp); else it is not padded.
std::uint64_t stage_period(enc::Scheme scheme, int group_size, int parity) noexcept;

// What a relaunch restores from, once every rank's finding is known: the candidate epochs, the
// groups (recorded, or planned afresh when there is nothing to restore) and their shapes. Throws
// as recorded_plan and plan_groups do, alike on every rank.
struct RestorePlan {
  Candidates candidates;
  GroupPlan groups;
  std::vector<GroupShape> shapes;
  std::uint64_t lineage = 0;  // of the checkpoint restored; none on a fresh start

  bool fresh() const noexcept { return candidates.epochs.empty(); }
};
RestorePlan plan_restore(std::span<const Finding> findings, const std::vector<std::string>& nodes,
                         const Config& config);

}  // namespace skt
