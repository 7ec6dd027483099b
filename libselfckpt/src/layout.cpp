#include "libselfckpt/src/layout.hpp"

#include <algorithm>
#include <cstring>

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

namespace {

std::size_t page_round(std::size_t bytes) noexcept {
  return (bytes + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
}

}  // namespace

std::size_t region_table_bytes(const std::vector<RegionSpec>& regions) noexcept {
  std::size_t bytes = sizeof(std::uint32_t) * 2;  // count, CRC
  for (const auto& r : regions)
    bytes += sizeof(std::uint64_t) + sizeof(std::uint32_t) + r.name.size();
  return bytes;
}

void encode_region_table(std::byte* at, const std::vector<RegionSpec>& regions) {
  std::byte* p = at;
  auto put = [&p](const void* v, std::size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  const auto count = static_cast<std::uint32_t>(regions.size());
  put(&count, sizeof count);
  for (const auto& r : regions) {
    const std::uint64_t bytes = r.bytes;
    const auto length = static_cast<std::uint32_t>(r.name.size());
    put(&bytes, sizeof bytes);
    put(&length, sizeof length);
    put(r.name.data(), r.name.size());
  }
  const std::uint32_t crc = crc32(at, static_cast<std::size_t>(p - at));
  put(&crc, sizeof crc);
}

std::optional<std::vector<RegionSpec>> decode_region_table(const std::byte* at,
                                                           std::size_t available) {
  std::size_t used = 0;
  auto get = [&](void* v, std::size_t n) {
    if (available - used < n) return false;
    std::memcpy(v, at + used, n);
    used += n;
    return true;
  };
  std::uint32_t count = 0;
  if (!get(&count, sizeof count)) return std::nullopt;
  std::vector<RegionSpec> regions;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t bytes = 0;
    std::uint32_t length = 0;
    if (!get(&bytes, sizeof bytes) || !get(&length, sizeof length) || available - used < length) {
      return std::nullopt;
    }
    regions.push_back({std::string(reinterpret_cast<const char*>(at + used), length), bytes});
    used += length;
  }
  const std::uint32_t computed = crc32(at, used);
  std::uint32_t crc = 0;
  if (!get(&crc, sizeof crc) || crc != computed) return std::nullopt;
  return regions;
}

std::size_t CheckpointAreas::copy_offset(int copy) const noexcept {
  return static_cast<std::size_t>(copy) * (copy_bytes + parity_bytes);
}

std::size_t CheckpointAreas::table_offset() const noexcept {
  return pending_offset() + (pending ? parity_bytes : 0);
}

std::size_t CheckpointAreas::data_bytes(std::size_t table_bytes) const noexcept {
  return table_offset() + page_round(table_bytes);
}

CheckpointAreas checkpoint_areas(std::size_t copy_bytes, std::size_t parity_bytes, int copies,
                                 bool pending) noexcept {
  return {page_round(copy_bytes), page_round(parity_bytes), copies, pending};
}

enc::StripeGeometry recorded_geometry(const CheckpointInfo& info) noexcept {
  enc::StripeGeometry g;
  g.group_size = static_cast<int>(info.group_size);
  g.parity = static_cast<int>(info.parity);
  g.chunk_bytes = info.chunk_bytes;
  g.rows = info.rows;
  return g;
}

}  // namespace skt
