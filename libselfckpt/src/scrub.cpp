#include "libselfckpt/internal/scrub.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "libselfckpt/internal/names.hpp"

namespace skt {

std::optional<CheckpointView> read_checkpoint_view(const Segment& segment, std::string* why) {
  auto fail = [&](std::string text) -> std::optional<CheckpointView> {
    if (why != nullptr) *why = std::move(text);
    return std::nullopt;
  };
  CheckpointView v;
  v.header = segment.header();
  if (v.header.identity.kind != SegmentKind::checkpoint) return fail("not a checkpoint segment");
  if (!decode_checkpoint_info(segment.base(), &v.info)) {
    return fail("its checkpoint description is corrupted (CRC mismatch)");
  }
  const auto& i = v.info;
  if (i.table_offset > v.header.data_bytes ||
      i.table_bytes > v.header.data_bytes - i.table_offset) {
    return fail("its region table lies outside the segment");
  }
  auto regions = decode_region_table(segment.data() + i.table_offset, i.table_bytes);
  if (!regions) return fail("its region table is corrupted (CRC mismatch)");
  if (i.chunk_bytes == 0 || i.scheme > static_cast<std::uint32_t>(enc::Scheme::reed_solomon) ||
      i.mode > static_cast<std::uint32_t>(Mode::twin) || i.parity >= i.group_size ||
      i.rows % i.group_size != 0) {
    return fail("its checkpoint description names an impossible code");
  }
  v.layout = StreamLayout::recorded(std::move(*regions), i);
  if (v.layout.hash != i.layout_hash || v.layout.chunks != i.member_chunks[i.member]) {
    return fail("its region table does not match its checkpoint description");
  }
  v.geometry = recorded_geometry(i);
  const auto mode = static_cast<Mode>(i.mode);
  v.areas = checkpoint_areas(v.layout, v.geometry, mode == Mode::twin ? 2 : 1, mode == Mode::self);
  if (v.areas.table_offset() != i.table_offset ||
      v.areas.data_bytes(i.table_bytes) != v.header.data_bytes) {
    return fail("its size does not match its checkpoint description");
  }
  v.state = read_control(segment.base());
  return v;
}

std::optional<std::string> copy_obstacle(const MemberStatus& m) {
  if (!m.state) return fmt::format("rank {}'s control block is unreadable", m.rank);
  const ControlState& s = *m.state;
  if (s.committed < 0) return "no checkpoint has been committed yet";
  const auto mode = static_cast<Mode>(m.info.mode);
  if ((mode == Mode::self && s.agreed > s.committed) ||
      (mode == Mode::single && s.encoded > s.committed)) {
    return fmt::format("rank {} is writing epoch {} into its copy", m.rank,
                       mode == Mode::self ? s.agreed : s.encoded);
  }
  return std::nullopt;
}

std::optional<std::string> scrub_obstacle(std::span<const MemberStatus> members,
                                          std::uint64_t* epoch) {
  if (members.empty()) return "no member found";
  const CheckpointInfo& first = members[0].info;
  std::vector<bool> present(first.group_size, false);
  for (const auto& m : members) {
    const auto& i = m.info;
    if (i.group != first.group || i.group_size != first.group_size || i.scheme != first.scheme ||
        i.parity != first.parity || i.mode != first.mode || i.chunk_bytes != first.chunk_bytes ||
        i.rows != first.rows || !std::equal(i.members, i.members + i.group_size, first.members) ||
        i.members[i.member] != m.rank || present[i.member]) {
      return fmt::format("its members' descriptions disagree (ranks {} and {})", members[0].rank,
                         m.rank);
    }
    present[i.member] = true;
  }
  std::string missing;
  for (std::uint32_t k = 0; k < first.group_size; ++k) {
    if (!present[k]) missing += fmt::format("{}{}", missing.empty() ? "" : " ", first.members[k]);
  }
  if (!missing.empty()) {
    return fmt::format(
        "the checkpoint segments of rank(s) {} were not found (run verify on every "
        "node of the job: mpirun with one process per node)",
        missing);
  }
  if (first.parity == 0) return "a group of one member keeps no checksum";
  // A member still writing its copy is the precise reason, whatever the others hold; only
  // then do differing committed epochs say that a commit is under way.
  for (const auto& m : members) {
    if (auto obstacle = copy_obstacle(m)) {
      return m.state && m.state->committed >= 0
                 ? *obstacle + "; verify again when the job is between checkpoints"
                 : obstacle;
    }
  }
  const std::int64_t committed = members[0].state->committed;
  for (const auto& m : members) {
    if (m.state->committed != committed) {
      return fmt::format(
          "a checkpoint is being committed (rank {} holds epoch {}, rank {} epoch "
          "{}); verify again when the job is between checkpoints",
          members[0].rank, committed, m.rank, m.state->committed);
    }
  }
  *epoch = static_cast<std::uint64_t>(committed);
  return std::nullopt;
}

std::optional<std::vector<BadItem>> check_digests(const CheckpointView& view, const std::byte* data,
                                                  std::uint64_t epoch, std::string* why) {
  const auto& g = view.geometry;
  const DigestSlot slot{const_cast<std::byte*>(data) + view.areas.digest_offset(epoch),
                        view.layout.chunks, g.parity_chunks(), g.blocks_per_chunk()};
  if (!slot.holds(static_cast<std::int64_t>(epoch), view.info.parity > 0)) {
    if (why != nullptr) *why = fmt::format("it keeps no complete digest of epoch {}", epoch);
    return std::nullopt;
  }
  std::vector<BadItem> out;
  const auto member = static_cast<std::int32_t>(view.info.member);
  const auto blocks = static_cast<std::uint64_t>(g.blocks_per_chunk());
  const enc::ChunkList copy = view.layout.copy_chunks(
      const_cast<std::byte*>(data) + view.areas.copy_offset(view.areas.copy_of_epoch(epoch)));
  for (std::uint64_t j = 0; j < copy.size(); ++j) {
    const std::uint64_t bad =
        enc::mismatched_blocks(g, copy.data[j], copy.bytes[j], slot.data() + j * blocks);
    if (bad != 0) out.push_back({member, 0, j, g.row_of_chunk(member, j), bad});
  }
  const std::byte* parity = data + view.areas.checksum_of_epoch(epoch);
  const auto chunk = static_cast<std::uint32_t>(g.chunk_bytes);
  for (std::uint64_t p = 0; p < g.parity_chunks(); ++p) {
    const std::uint64_t bad =
        enc::mismatched_blocks(g, parity + p * chunk, chunk, slot.parity() + p * blocks);
    if (bad != 0) out.push_back({member, 1, p, g.parity_row(member, p), bad});
  }
  return out;
}

std::optional<RowMismatch> check_row(const enc::Codec& codec, std::uint64_t row, int slot,
                                     std::span<const std::byte* const> sources,
                                     const std::byte* stored, std::size_t chunk_bytes,
                                     std::byte* scratch) {
  codec.encode_row(scratch, nullptr, sources, slot, chunk_bytes);
  if (std::memcmp(scratch, stored, chunk_bytes) == 0) return std::nullopt;
  RowMismatch m;
  m.row = row;
  m.slot = slot;
  m.first = chunk_bytes;
  for (std::size_t b = 0; b < chunk_bytes; ++b) {
    if (scratch[b] == stored[b]) continue;
    m.first = std::min(m.first, b);
    m.last = b + 1;
    ++m.differing;
  }
  return m;
}

}  // namespace skt
