// A rank's workspace W as one logical stream: its regions in name order, then the staged private
// regions. Each region starts on a chunk boundary of the stream, so a chunk never spans two
// regions; in the committed copy B the regions are packed at 64-byte boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "encoders/group.hpp"

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
  std::uint64_t chunks = 0;
  std::size_t workspace_bytes = 0;  // sum of region sizes: |W|
  std::size_t copy_bytes = 0;       // size of B
  std::uint64_t hash = 0;           // of the names and sizes, in order

  // `regions` in the order they form the stream.
  static WorkspaceLayout plan(std::vector<RegionSpec> regions, std::size_t chunk_bytes);

  // The chunks of the stream, given where each region starts in memory.
  enc::ChunkList chunks_at(std::span<std::byte* const> region_starts) const;
  // The same for the committed copy starting at `copy`.
  enc::ChunkList copy_chunks(std::byte* copy) const;
};

}  // namespace skt
