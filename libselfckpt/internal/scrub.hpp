// Scrubbing a committed checkpoint: reading a checkpoint segment without the program that wrote
// it, deciding whether a group's copies can be checked now, and checking a row of B against C.
// Pure functions; skt-shm verify moves the chunks between nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/layout.hpp"
#include "libselfckpt/internal/segment.hpp"

namespace skt {

// A checkpoint segment as a reader sees it: where its copies, checksums and regions are.
struct CheckpointView {
  SegmentHeader header;
  CheckpointInfo info;
  std::optional<ControlState> state;
  StreamLayout layout;
  CheckpointAreas areas;
  enc::StripeGeometry geometry;
};

// Nothing, with the reason in *why, if the segment's description, region table or sizes do not
// hold together.
std::optional<CheckpointView> read_checkpoint_view(const Segment& segment, std::string* why);

// What a scrub needs to know of each member of a group, whichever node holds it.
struct MemberStatus {
  int rank = 0;
  CheckpointInfo info;
  std::optional<ControlState> state;
};

// Why a member's committed copy cannot be read as its committed epoch now (its control block
// unreadable, no checkpoint yet, a checkpoint being written into it), or nothing.
std::optional<std::string> copy_obstacle(const MemberStatus& member);

// Why the group's committed copies cannot be compared with their checksums now (missing members,
// members that disagree, no checkpoint yet, a checkpoint being written), or nothing; then *epoch
// is the committed epoch. `members` are those found, in any order.
std::optional<std::string> scrub_obstacle(std::span<const MemberStatus> members,
                                          std::uint64_t* epoch);

// An item of a member's committed state, a data chunk of its copy B or a chunk of its checksum C,
// whose blocks do not all match the CRCs that the epoch's digest keeps for them.
struct BadItem {
  std::int32_t member = 0;
  std::int32_t parity = 0;  // 1: a checksum chunk
  std::uint64_t index = 0;  // the stream chunk, or the checksum chunk
  std::uint64_t row = 0;
  std::uint64_t blocks = 0;  // the blocks that do not match

  bool operator==(const BadItem&) const = default;
};

// Compares a member's copy and checksum of `epoch` (in `data`, its checkpoint segment's data) with
// the epoch's digest, block by block. Nothing, with the reason in *why, when the segment keeps no
// complete digest of that epoch.
std::optional<std::vector<BadItem>> check_digests(const CheckpointView& view, const std::byte* data,
                                                  std::uint64_t epoch, std::string* why);

// Where a recomputed checksum chunk differs from the stored one.
struct RowMismatch {
  std::uint64_t row = 0;
  int slot = 0;
  std::size_t first = 0;  // first and one past the last differing byte of the chunk
  std::size_t last = 0;
  std::size_t differing = 0;  // bytes that differ
};

// Recomputes parity slot `slot` of `row` from the row's data chunks (in data-position order, each
// a whole chunk) into `scratch` and compares it with `stored`.
std::optional<RowMismatch> check_row(const enc::Codec& codec, std::uint64_t row, int slot,
                                     std::span<const std::byte* const> sources,
                                     const std::byte* stored, std::size_t chunk_bytes,
                                     std::byte* scratch);

}  // namespace skt
