// Where a rank's bytes are: its workspace W as one logical stream of chunks, its committed copy B,
// and the areas of its checkpoint segment. Pure functions, no I/O.
//
// W lives in one segment (the arena): the regions packed one after the other in the regions'
// area, and the private objects staged in the stage area. The stream is the stage first, then the
// regions' area, each cut into chunks; under the sum scheme the stage is padded with empty chunks
// to a whole number of periods (G-m chunks), so that every member's stage lands in the same rows,
// which then hold nothing else and whose sums are exact. B holds the same two areas back to back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/internal/format.hpp"

namespace skt {

// A region (skt_alloc) or a private object (skt_protect), where the stream holds it.
struct RegionEntry {
  std::string name;
  bool staged = false;       // a private object, in the stage area
  std::uint64_t offset = 0;  // in its area
  std::uint64_t bytes = 0;   // its size (a staged object may take more room in the stage)

  bool operator==(const RegionEntry&) const = default;
};

// Bytes of a region that changed since the last checkpoint.
struct DirtyRange {
  std::string region;
  std::size_t offset = 0;
  std::size_t length = 0;
};

// A copy between two memory areas of one rank.
struct Piece {
  std::byte* to;
  const std::byte* from;
  std::size_t bytes;
};

struct StreamLayout {
  std::size_t chunk_bytes = 0;
  std::vector<RegionEntry> entries;  // staged objects, then regions, each in offset order
  std::size_t stage_bytes = 0;
  std::uint64_t stage_chunks = 0;  // chunks before the regions' area, padding included
  std::size_t regions_bytes = 0;
  std::uint64_t chunks = 0;
  std::uint64_t hash = 0;  // of the entries and the areas' sizes

  // The stage is padded to a multiple of `stage_period` chunks (when it is not empty).
  static StreamLayout plan(std::vector<RegionEntry> entries, std::size_t stage_bytes,
                           std::size_t regions_bytes, std::size_t chunk_bytes,
                           std::uint64_t stage_period = 1);
  // The layout a checkpoint description records, with the entries of its region table.
  static StreamLayout recorded(std::vector<RegionEntry> entries, const CheckpointInfo& info);

  // |W|: what the stream holds.
  std::size_t workspace_bytes() const noexcept { return stage_bytes + regions_bytes; }
  // Where the regions' area starts in B.
  std::size_t copy_regions_offset() const noexcept { return (stage_bytes + 63) / 64 * 64; }
  std::size_t copy_bytes() const noexcept { return copy_regions_offset() + regions_bytes; }

  // The chunks of the stream, given where the two areas are; padding chunks are empty.
  enc::ChunkList chunks_at(std::byte* stage, std::byte* regions) const;
  enc::ChunkList copy_chunks(std::byte* copy) const {
    return chunks_at(copy, copy + copy_regions_offset());
  }

  const RegionEntry* region(const std::string& name) const;
  // Per stream chunk, the blocks that these ranges of regions touch, and the whole stage.
  std::vector<std::uint64_t> changed_blocks(const enc::StripeGeometry& geometry,
                                            const std::vector<DirtyRange>& dirty) const;
  // Per stream chunk, the blocks in which the regions of `workspace` differ from those of the
  // committed copy `copy`, found by comparing them byte for byte (exact: no hash can collide), and
  // the whole stage, which every checkpoint stages anew. Regions that `settled` names are not
  // compared: the program declared that they no longer change. Only the stream chunks j with
  // j % period == phase are compared (a sample; the others read as unchanged).
  std::vector<std::uint64_t> differing_blocks(const enc::StripeGeometry& geometry,
                                              const enc::ChunkList& workspace,
                                              const enc::ChunkList& copy,
                                              const std::set<std::string>& settled,
                                              std::uint64_t period = 1,
                                              std::uint64_t phase = 0) const;
  // Blocks that `actual` marks (found changed) and `declared` does not (the program's ranges): the
  // first of them as describe() says it, and the bytes of them all in `stream`. Nothing when the
  // declared blocks cover every change.
  struct Undeclared {
    std::string first;
    std::uint64_t bytes = 0;
  };
  std::optional<Undeclared> undeclared(const enc::StripeGeometry& geometry,
                                       const enc::ChunkList& stream,
                                       const std::vector<std::uint64_t>& actual,
                                       const std::vector<std::uint64_t>& declared) const;
  // The bytes of `stream` (its chunks as chunks_at cut them) that blocks marked in `changed` cover.
  static std::uint64_t changed_bytes(const enc::StripeGeometry& geometry,
                                     const enc::ChunkList& stream,
                                     const std::vector<std::uint64_t>& changed);
  // What bytes [first, last) of stream chunk `chunk` hold, for messages: "region 'a' bytes
  // 8192..8199", "private object 'step'", "padding".
  std::string describe(std::uint64_t chunk, std::size_t first, std::size_t last) const;
};

// The table of entries a segment keeps, so that a relaunch (the workspace) and a reader without
// the program (the checkpoint: skt-shm) find every region: count, entries, CRC.
std::size_t region_table_bytes(const std::vector<RegionEntry>& entries) noexcept;
void encode_region_table(std::byte* at, const std::vector<RegionEntry>& entries);
// Nothing if the table is cut short by `available` or its CRC does not match.
std::optional<std::vector<RegionEntry>> decode_region_table(const std::byte* at,
                                                            std::size_t available);

// One epoch's block CRCs in a checkpoint segment: a header (DigestState), then the data blocks'
// CRCs chunk by chunk of the stream, then the checksum blocks' CRCs chunk by chunk.
struct DigestSlot {
  std::byte* base = nullptr;
  std::uint64_t chunks = 0;
  std::uint64_t parity_chunks = 0;
  int blocks = 0;  // per chunk

  static std::size_t bytes(std::uint64_t chunks, std::uint64_t parity_chunks, int blocks) noexcept;
  std::uint32_t* data() const noexcept {
    return reinterpret_cast<std::uint32_t*>(base + kDigestHeaderBytes);
  }
  std::uint32_t* parity() const noexcept {
    return data() + chunks * static_cast<std::uint64_t>(blocks);
  }
  std::optional<DigestState> state() const { return read_digest_state(base); }
  // Whether the slot holds complete CRCs of `epoch`'s data (and of its checksum, if asked).
  bool holds(std::int64_t epoch, bool with_parity) const;
  void set(const DigestState& state) const { write_digest_state(base, state); }
  // Marks the slot as holding nothing, before it is rewritten.
  void clear() const { write_digest_state(base, DigestState{}); }
};

// Where things sit in a checkpoint segment's data: each copy B followed by a checksum area, then
// (self mode) a second checksum area, then two digest slots, then the region table; each area
// starts on a page.
struct CheckpointAreas {
  std::size_t copy_bytes = 0;    // one B, page-rounded
  std::size_t parity_bytes = 0;  // one C or D, page-rounded
  std::size_t digest_bytes = 0;  // one digest slot, page-rounded
  int copies = 1;
  bool pending = false;

  std::size_t copy_offset(int copy) const noexcept;
  std::size_t checksum_offset(int copy) const noexcept { return copy_offset(copy) + copy_bytes; }
  std::size_t pending_offset() const noexcept { return copy_offset(copies); }
  std::size_t digest_offset(std::uint64_t epoch) const noexcept;
  std::size_t table_offset() const noexcept;
  std::size_t data_bytes(std::size_t table_bytes) const noexcept;
  // The copy that holds an epoch: copies alternate.
  int copy_of_epoch(std::uint64_t epoch) const noexcept {
    return static_cast<int>(epoch % static_cast<std::uint64_t>(copies));
  }
  // Where the checksum of an epoch sits, committed (C) or being written (D). In the self mode the
  // two checksum areas alternate: epoch e's is written over epoch e-2's, so that committing epoch
  // e needs no copy of D into C; the roles follow from the epoch numbers the control block keeps.
  std::size_t checksum_of_epoch(std::uint64_t epoch) const noexcept {
    if (pending) return epoch % 2 == 0 ? checksum_offset(0) : pending_offset();
    return checksum_offset(copy_of_epoch(epoch));
  }
};

CheckpointAreas checkpoint_areas(const StreamLayout& layout, const enc::StripeGeometry& geometry,
                                 int copies, bool pending) noexcept;

// The stripe geometry a checkpoint description records for its group.
enc::StripeGeometry recorded_geometry(const CheckpointInfo& info) noexcept;

std::size_t page_round(std::size_t bytes) noexcept;

}  // namespace skt
