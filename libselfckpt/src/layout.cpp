#include "libselfckpt/internal/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "libselfckpt/internal/format.hpp"

namespace skt {

std::size_t page_round(std::size_t bytes) noexcept {
  return (bytes + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
}

StreamLayout StreamLayout::plan(std::vector<RegionEntry> entries, std::size_t stage_bytes,
                                std::size_t regions_bytes, std::size_t chunk_bytes,
                                std::uint64_t stage_period) {
  StreamLayout l;
  l.chunk_bytes = chunk_bytes;
  l.entries = std::move(entries);
  std::stable_sort(l.entries.begin(), l.entries.end(), [](const auto& a, const auto& b) {
    return std::make_pair(!a.staged, a.offset) < std::make_pair(!b.staged, b.offset);
  });
  l.stage_bytes = stage_bytes;
  l.regions_bytes = regions_bytes;
  std::uint64_t stage = (stage_bytes + chunk_bytes - 1) / chunk_bytes;
  if (stage > 0 && stage_period > 1)
    stage = (stage + stage_period - 1) / stage_period * stage_period;
  l.stage_chunks = stage;
  l.chunks = stage + (regions_bytes + chunk_bytes - 1) / chunk_bytes;
  std::uint64_t hash = 0;
  for (const auto& e : l.entries) {
    const std::uint64_t fields[3] = {e.staged ? 1u : 0u, e.offset, e.bytes};
    hash = crc64(fields, sizeof fields, hash);
    hash = crc64(e.name.data(), e.name.size(), hash);
  }
  const std::uint64_t sizes[2] = {stage_bytes, regions_bytes};
  l.hash = crc64(sizes, sizeof sizes, hash);
  return l;
}

StreamLayout StreamLayout::recorded(std::vector<RegionEntry> entries, const CheckpointInfo& info) {
  StreamLayout l = plan(std::move(entries), info.stage_bytes, info.regions_bytes, info.chunk_bytes);
  l.chunks += info.stage_chunks - l.stage_chunks;
  l.stage_chunks = info.stage_chunks;
  return l;
}

enc::ChunkList StreamLayout::chunks_at(std::byte* stage, std::byte* regions) const {
  enc::ChunkList list;
  list.data.reserve(chunks);
  list.bytes.reserve(chunks);
  auto cut = [&](std::byte* base, std::size_t size, std::uint64_t count) {
    for (std::uint64_t c = 0; c < count; ++c) {
      const std::size_t offset = c * chunk_bytes;
      if (offset < size) {
        list.add(base + offset, static_cast<std::uint32_t>(std::min(chunk_bytes, size - offset)));
      } else {
        list.add(nullptr, 0);
      }
    }
  };
  cut(stage, stage_bytes, stage_chunks);
  cut(regions, regions_bytes, chunks - stage_chunks);
  return list;
}

const RegionEntry* StreamLayout::region(const std::string& name) const {
  for (const auto& e : entries) {
    if (!e.staged && e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::uint64_t> StreamLayout::changed_blocks(
    const enc::StripeGeometry& geometry, const std::vector<DirtyRange>& dirty) const {
  std::vector<std::uint64_t> changed(chunks, 0);
  const std::uint64_t whole = geometry.block_mask(0, chunk_bytes);
  for (std::uint64_t c = 0; c < stage_chunks; ++c)
    changed[c] = whole;
  for (const auto& d : dirty) {
    const RegionEntry* e = region(d.region);
    if (e == nullptr || d.length == 0) continue;
    if (d.offset >= e->bytes) continue;
    const std::size_t begin = e->offset + d.offset;
    const std::size_t end = e->offset + std::min<std::size_t>(e->bytes, d.offset + d.length);
    for (std::size_t c = begin / chunk_bytes; c <= (end - 1) / chunk_bytes; ++c) {
      const std::size_t from = c * chunk_bytes;
      changed[stage_chunks + c] |= geometry.block_mask(std::max(begin, from) - from,
                                                       std::min(end, from + chunk_bytes) - from);
    }
  }
  return changed;
}

std::vector<std::uint64_t> StreamLayout::differing_blocks(const enc::StripeGeometry& geometry,
                                                          const enc::ChunkList& workspace,
                                                          const enc::ChunkList& copy,
                                                          const std::set<std::string>& settled,
                                                          std::uint64_t period,
                                                          std::uint64_t phase) const {
  std::vector<std::uint64_t> changed(chunks, 0);
  const std::uint64_t whole = geometry.block_mask(0, chunk_bytes);
  for (std::uint64_t c = 0; c < stage_chunks; ++c)
    changed[c] = whole;
  const std::size_t block = geometry.block_bytes();
  for (const auto& e : entries) {
    if (e.staged || e.bytes == 0 || settled.count(e.name) > 0) continue;
    const std::size_t begin = e.offset;
    const std::size_t end = e.offset + e.bytes;
    for (std::size_t c = begin / chunk_bytes; c <= (end - 1) / chunk_bytes; ++c) {
      const std::uint64_t j = stage_chunks + c;
      if (j % period != phase) continue;
      const std::size_t from = c * chunk_bytes;
      const std::size_t low = std::max(begin, from) - from;
      const std::size_t high = std::min(end, from + chunk_bytes) - from;
      // A block shared with the region before was compared for that region's bytes only.
      for (std::size_t b = low / block; b * block < high; ++b) {
        const std::size_t first = std::max(low, b * block);
        const std::size_t last = std::min(high, (b + 1) * block);
        const std::uint64_t bit = geometry.block_mask(first, last);
        if ((changed[j] & bit) != 0) continue;
        if (std::memcmp(workspace.data[j] + first, copy.data[j] + first, last - first) != 0) {
          changed[j] |= bit;
        }
      }
    }
  }
  return changed;
}

std::uint64_t StreamLayout::changed_bytes(const enc::StripeGeometry& geometry,
                                          const enc::ChunkList& stream,
                                          const std::vector<std::uint64_t>& changed) {
  std::uint64_t bytes = 0;
  for (std::uint64_t j = 0; j < changed.size(); ++j) {
    const std::size_t valid = stream.bytes[j];  // padding does not count
    for (const auto& run : geometry.segments(changed[j], changed[j]))
      bytes += std::min(run.end, valid) - std::min(run.begin, valid);
  }
  return bytes;
}

std::optional<StreamLayout::Undeclared> StreamLayout::undeclared(
    const enc::StripeGeometry& geometry, const enc::ChunkList& stream,
    const std::vector<std::uint64_t>& actual, const std::vector<std::uint64_t>& declared) const {
  std::vector<std::uint64_t> missed(actual.size(), 0);
  std::optional<Undeclared> out;
  for (std::size_t j = 0; j < actual.size(); ++j) {
    missed[j] = actual[j] & ~declared[j];
    if (missed[j] == 0 || out) continue;
    const std::size_t block = geometry.block_bytes();
    const auto first = static_cast<std::size_t>(std::countr_zero(missed[j]));
    out = Undeclared{describe(j, first * block, (first + 1) * block), 0};
  }
  if (out) out->bytes = changed_bytes(geometry, stream, missed);
  return out;
}

std::string StreamLayout::describe(std::uint64_t chunk, std::size_t first, std::size_t last) const {
  if (chunk >= chunks) return "beyond its stream (reads as zero)";
  const bool in_stage = chunk < stage_chunks;
  const std::size_t begin = (in_stage ? chunk : chunk - stage_chunks) * chunk_bytes + first;
  const std::size_t area = in_stage ? stage_bytes : regions_bytes;
  if (begin >= area) return "padding (reads as zero)";
  const std::size_t end = std::min(area, begin + (last - first));
  for (const auto& e : entries) {
    if (e.staged != in_stage || begin < e.offset || begin >= e.offset + e.bytes) continue;
    if (in_stage) return fmt::format("private object '{}'", e.name);
    const std::size_t from = begin - e.offset;
    const std::size_t to = std::min<std::size_t>(end, e.offset + e.bytes) - e.offset;
    return fmt::format("region '{}' byte{} {}{}", e.name, to - from == 1 ? "" : "s", from,
                       to - from == 1 ? std::string() : fmt::format("..{}", to - 1));
  }
  return in_stage ? "the staged private objects' padding" : "the alignment gap between regions";
}

std::size_t region_table_bytes(const std::vector<RegionEntry>& entries) noexcept {
  std::size_t bytes = sizeof(std::uint32_t) * 2;  // count, CRC
  for (const auto& e : entries)
    bytes += 1 + 2 * sizeof(std::uint64_t) + sizeof(std::uint32_t) + e.name.size();
  return bytes;
}

void encode_region_table(std::byte* at, const std::vector<RegionEntry>& entries) {
  std::byte* p = at;
  auto put = [&p](const void* v, std::size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  const auto count = static_cast<std::uint32_t>(entries.size());
  put(&count, sizeof count);
  for (const auto& e : entries) {
    const std::uint8_t staged = e.staged ? 1 : 0;
    const auto length = static_cast<std::uint32_t>(e.name.size());
    put(&staged, sizeof staged);
    put(&e.offset, sizeof e.offset);
    put(&e.bytes, sizeof e.bytes);
    put(&length, sizeof length);
    put(e.name.data(), e.name.size());
  }
  const std::uint32_t crc = crc32(at, static_cast<std::size_t>(p - at));
  put(&crc, sizeof crc);
}

std::optional<std::vector<RegionEntry>> decode_region_table(const std::byte* at,
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
  std::vector<RegionEntry> entries;
  for (std::uint32_t i = 0; i < count; ++i) {
    RegionEntry e;
    std::uint8_t staged = 0;
    std::uint32_t length = 0;
    if (!get(&staged, sizeof staged) || !get(&e.offset, sizeof e.offset) ||
        !get(&e.bytes, sizeof e.bytes) || !get(&length, sizeof length) || staged > 1 ||
        available - used < length) {
      return std::nullopt;
    }
    e.staged = staged == 1;
    e.name.assign(reinterpret_cast<const char*>(at + used), length);
    used += length;
    entries.push_back(std::move(e));
  }
  const std::uint32_t computed = crc32(at, used);
  std::uint32_t crc = 0;
  if (!get(&crc, sizeof crc) || crc != computed) return std::nullopt;
  return entries;
}

std::size_t DigestSlot::bytes(std::uint64_t chunks, std::uint64_t parity_chunks,
                              int blocks) noexcept {
  return kDigestHeaderBytes +
         (chunks + parity_chunks) * static_cast<std::uint64_t>(blocks) * sizeof(std::uint32_t);
}

bool DigestSlot::holds(std::int64_t epoch, bool with_parity) const {
  const auto s = state();
  return s && s->epoch == epoch && s->data && (!with_parity || s->parity);
}

std::size_t CheckpointAreas::copy_offset(int copy) const noexcept {
  return static_cast<std::size_t>(copy) * (copy_bytes + parity_bytes);
}

std::size_t CheckpointAreas::digest_offset(std::uint64_t epoch) const noexcept {
  return pending_offset() + (pending ? parity_bytes : 0) + (epoch % 2) * digest_bytes;
}

std::size_t CheckpointAreas::table_offset() const noexcept {
  return pending_offset() + (pending ? parity_bytes : 0) + 2 * digest_bytes;
}

std::size_t CheckpointAreas::data_bytes(std::size_t table_bytes) const noexcept {
  return table_offset() + page_round(table_bytes);
}

CheckpointAreas checkpoint_areas(const StreamLayout& layout, const enc::StripeGeometry& geometry,
                                 int copies, bool pending) noexcept {
  CheckpointAreas a;
  a.copy_bytes = page_round(layout.copy_bytes());
  a.parity_bytes = page_round(geometry.parity_bytes());
  a.digest_bytes = page_round(
      DigestSlot::bytes(layout.chunks, geometry.parity_chunks(), geometry.blocks_per_chunk()));
  a.copies = copies;
  a.pending = pending;
  return a;
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
