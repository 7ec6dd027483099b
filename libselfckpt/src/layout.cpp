#include "libselfckpt/src/layout.hpp"

#include <algorithm>

#include "libselfckpt/src/format.hpp"

namespace skt {

WorkspaceLayout WorkspaceLayout::plan(std::vector<RegionSpec> regions, std::size_t chunk_bytes,
                                      std::uint64_t first_period) {
  WorkspaceLayout l;
  l.chunk_bytes = chunk_bytes;
  l.regions = std::move(regions);
  std::uint64_t hash = 0;
  for (const auto& r : l.regions) {
    l.copy_offset.push_back(l.copy_bytes);
    l.first_chunk.push_back(l.chunks);
    l.copy_bytes += (r.bytes + 63) / 64 * 64;
    l.workspace_bytes += r.bytes;
    std::uint64_t count = (r.bytes + chunk_bytes - 1) / chunk_bytes;
    if (l.chunk_count.empty()) count = (count + first_period - 1) / first_period * first_period;
    l.chunk_count.push_back(count);
    l.chunks += count;
    const std::uint64_t size = r.bytes;
    hash = crc64(r.name.data(), r.name.size(), hash);
    hash = crc64(&size, sizeof size, hash);
  }
  l.hash = hash;
  return l;
}

enc::ChunkList WorkspaceLayout::chunks_at(std::span<std::byte* const> region_starts) const {
  enc::ChunkList list;
  list.data.reserve(chunks);
  list.bytes.reserve(chunks);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const std::size_t size = regions[i].bytes;
    for (std::uint64_t c = 0; c < chunk_count[i]; ++c) {
      const std::size_t offset = c * chunk_bytes;
      if (offset < size) {
        list.add(region_starts[i] + offset,
                 static_cast<std::uint32_t>(std::min(chunk_bytes, size - offset)));
      } else {
        list.add(nullptr, 0);
      }
    }
  }
  return list;
}

enc::ChunkList WorkspaceLayout::copy_chunks(std::byte* copy) const {
  std::vector<std::byte*> starts;
  for (const auto offset : copy_offset)
    starts.push_back(copy + offset);
  return chunks_at(starts);
}

}  // namespace skt
