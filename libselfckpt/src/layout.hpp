// A rank's workspace W as one logical stream: the staged private regions first, then the regions
// in name order. Each region starts on a chunk boundary of the stream, so a chunk never spans two
// regions; in the committed copy B the regions are packed at 64-byte boundaries.
//
// The first region is padded with empty chunks to a whole number of periods (G-m chunks): then
// every member's first period lands in the same rows, so the rows holding private state hold
// nothing else, and the sum scheme rebuilds that state exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/src/format.hpp"

namespace skt {

struct RegionSpec {
  std::string name;
  std::size_t bytes = 0;
};

struct WorkspaceLayout {
  std::size_t chunk_bytes = 0;
  std::vector<RegionSpec> regions;
  std::vector<std::size_t> copy_offset;    // where each region sits in B
  std::vector<std::uint64_t> first_chunk;  // first stream chunk of each region
  std::vector<std::uint64_t> chunk_count;  // stream chunks of each region, padding included
  std::uint64_t chunks = 0;
  std::size_t workspace_bytes = 0;  // sum of region sizes: |W|
  std::size_t copy_bytes = 0;       // size of B
  std::uint64_t hash = 0;           // of the names and sizes, in order

  // `regions` in the order they form the stream; the first is padded to a multiple of
  // `first_period` chunks.
  static WorkspaceLayout plan(std::vector<RegionSpec> regions, std::size_t chunk_bytes,
                              std::uint64_t first_period = 1);

  // The chunks of the stream, given where each region starts in memory; padding chunks are empty.
  enc::ChunkList chunks_at(std::span<std::byte* const> region_starts) const;
  // The same for the committed copy starting at `copy`.
  enc::ChunkList copy_chunks(std::byte* copy) const;
};

// The region table a checkpoint segment keeps, so that a reader without the program (skt-shm
// verify) finds every region in B: count, then each region's size and name, then a CRC.
std::size_t region_table_bytes(const std::vector<RegionSpec>& regions) noexcept;
void encode_region_table(std::byte* at, const std::vector<RegionSpec>& regions);
// Nothing if the table is cut short by `available` or its CRC does not match.
std::optional<std::vector<RegionSpec>> decode_region_table(const std::byte* at,
                                                           std::size_t available);

// Where things sit in a checkpoint segment's data: each copy B followed by a checksum area, then
// (self mode) a second checksum area, then the region table; each area starts on a page.
struct CheckpointAreas {
  std::size_t copy_bytes = 0;    // one B, page-rounded
  std::size_t parity_bytes = 0;  // one C or D, page-rounded
  int copies = 1;
  bool pending = false;

  std::size_t copy_offset(int copy) const noexcept;
  std::size_t checksum_offset(int copy) const noexcept { return copy_offset(copy) + copy_bytes; }
  std::size_t pending_offset() const noexcept { return copy_offset(copies); }
  std::size_t table_offset() const noexcept;
  std::size_t data_bytes(std::size_t table_bytes) const noexcept;
  // The copy that holds a committed epoch: copies alternate.
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

CheckpointAreas checkpoint_areas(std::size_t copy_bytes, std::size_t parity_bytes, int copies,
                                 bool pending) noexcept;

// The stripe geometry a checkpoint description records for its group.
enc::StripeGeometry recorded_geometry(const CheckpointInfo& info) noexcept;

}  // namespace skt
