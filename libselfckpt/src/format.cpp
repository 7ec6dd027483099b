#include "libselfckpt/internal/format.hpp"

#include <isa-l.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace skt {

namespace {

constexpr char kMagic[8] = {'S', 'E', 'L', 'F', 'C', 'K', 'P', 'T'};
// The first page of a segment: its header, then (checkpoint segments) the description and the
// control block, or (workspace segments) the arena record.
constexpr std::size_t kInfoOffset = 1024;
constexpr std::size_t kControlOffset = 3072;
constexpr std::uint32_t kDigestMagic = 0x44475354;  // "DGST"

void write_header_fields(FieldWriter& w, const SegmentHeader& h) {
  for (const char c : kMagic)
    w.put(c);
  w.put(h.version);
  w.put(static_cast<std::uint32_t>(h.identity.kind));
  w.put(h.identity.uid);
  w.put(static_cast<std::int32_t>(h.identity.rank));
  w.put(static_cast<std::int32_t>(h.nranks));
  w.put(std::uint32_t{0});
  w.put(h.data_bytes);
  w.put(h.segment_bytes);
  w.text(h.identity.job);
  w.text(h.identity.domain);
  w.text(h.identity.name);
}

void write_info_fields(FieldWriter& w, const CheckpointInfo& i) {
  w.put(i.scheme);
  w.put(i.parity);
  w.put(i.requested_group_size);
  w.put(i.groups);
  w.put(i.group);
  w.put(i.member);
  w.put(i.group_size);
  w.put(i.mode);
  w.put(i.chunk_bytes);
  w.put(i.rows);
  w.put(i.stage_bytes);
  w.put(i.stage_chunks);
  w.put(i.regions_bytes);
  w.put(i.layout_hash);
  w.put(i.table_offset);
  w.put(i.table_bytes);
  w.put(i.lineage);
  w.put(i.command);
  for (const auto v : i.members)
    w.put(v);
  for (const auto v : i.member_chunks)
    w.put(v);
  for (const auto v : i.member_layouts)
    w.put(v);
}

struct Slot {
  std::uint64_t sequence;
  ControlState state;
  bool valid;
};

constexpr std::size_t kSlotBytes = 64;

Slot read_slot(const std::byte* p) {
  FieldReader r(p);
  Slot s{};
  s.sequence = r.get<std::uint64_t>();
  s.state.committed = r.get<std::int64_t>();
  s.state.encoded = r.get<std::int64_t>();
  s.state.agreed = r.get<std::int64_t>();
  s.state.resumed = r.get<std::int64_t>();
  s.state.finished = r.get<std::int64_t>();
  s.state.checkpoint_nanoseconds = r.get<std::int64_t>();
  const std::size_t covered = r.size();
  const auto crc = r.get<std::uint32_t>();
  s.valid = s.sequence != 0 && crc == crc32(p, covered);
  return s;
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t bytes) noexcept {
  std::uint32_t crc = 0;
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const auto len = static_cast<int>(std::min<std::size_t>(bytes, 1u << 30));
    crc = crc32_iscsi(const_cast<unsigned char*>(p), len, crc);
    p += len;
    bytes -= static_cast<std::size_t>(len);
  }
  return crc;
}

std::uint64_t crc64(const void* data, std::size_t bytes, std::uint64_t seed) noexcept {
  return crc64_ecma_refl(seed, static_cast<const unsigned char*>(data), bytes);
}

const char* kind_name(SegmentKind kind) noexcept {
  switch (kind) {
    case SegmentKind::workspace:
      return "workspace";
    case SegmentKind::checkpoint:
      return "checkpoint";
    case SegmentKind::reserve:
      return "reserve";
  }
  return "unknown";
}

const char* header_status_text(HeaderStatus status) noexcept {
  switch (status) {
    case HeaderStatus::ok:
      return "valid";
    case HeaderStatus::truncated:
      return "truncated (smaller than a header)";
    case HeaderStatus::bad_magic:
      return "not a selfckpt segment (wrong magic)";
    case HeaderStatus::other_version:
      return "written by another selfckpt version";
    case HeaderStatus::bad_version:
      return "written by an incompatible selfckpt version";
    case HeaderStatus::bad_crc:
      return "header checksum mismatch (corrupted)";
  }
  return "unknown";
}

void encode_header(std::byte* page, const SegmentHeader& header) {
  FieldWriter w(page);
  write_header_fields(w, header);
  const std::uint32_t crc = crc32(page, w.size());
  w.put(crc);
}

HeaderStatus decode_header(const std::byte* page, std::size_t available, SegmentHeader* out) {
  if (available < kHeaderBytes) return HeaderStatus::truncated;
  if (std::memcmp(page, kMagic, sizeof kMagic) != 0) return HeaderStatus::bad_magic;
  FieldReader r(page + sizeof kMagic);
  SegmentHeader h;
  h.version = r.get<std::uint32_t>();
  h.identity.kind = static_cast<SegmentKind>(r.get<std::uint32_t>());
  h.identity.uid = r.get<std::uint32_t>();
  h.identity.rank = r.get<std::int32_t>();
  h.nranks = r.get<std::int32_t>();
  r.get<std::uint32_t>();
  h.data_bytes = r.get<std::uint64_t>();
  h.segment_bytes = r.get<std::uint64_t>();
  h.identity.job = r.text();
  h.identity.domain = r.text();
  h.identity.name = r.text();
  const std::size_t covered = sizeof kMagic + r.size();
  const bool intact = r.get<std::uint32_t>() == crc32(page, covered);
  if (h.version != kFormatVersion && (h.version < kStableHeaderSince || !intact)) {
    return HeaderStatus::bad_version;
  }
  if (!intact) return HeaderStatus::bad_crc;
  if (out != nullptr) *out = h;
  return h.version == kFormatVersion ? HeaderStatus::ok : HeaderStatus::other_version;
}

bool same_identity(const SegmentIdentity& a, const SegmentIdentity& b) noexcept {
  return a.uid == b.uid && a.job == b.job && a.domain == b.domain && a.rank == b.rank &&
         a.kind == b.kind && a.name == b.name;
}

void encode_checkpoint_info(std::byte* page, const CheckpointInfo& info) {
  FieldWriter w(page + kInfoOffset);
  write_info_fields(w, info);
  const std::uint32_t crc = crc32(page + kInfoOffset, w.size());
  w.put(crc);
}

bool decode_checkpoint_info(const std::byte* page, CheckpointInfo* out) {
  FieldReader r(page + kInfoOffset);
  CheckpointInfo i;
  i.scheme = r.get<std::uint32_t>();
  i.parity = r.get<std::uint32_t>();
  i.requested_group_size = r.get<std::uint32_t>();
  i.groups = r.get<std::uint32_t>();
  i.group = r.get<std::uint32_t>();
  i.member = r.get<std::uint32_t>();
  i.group_size = r.get<std::uint32_t>();
  i.mode = r.get<std::uint32_t>();
  i.chunk_bytes = r.get<std::uint64_t>();
  i.rows = r.get<std::uint64_t>();
  i.stage_bytes = r.get<std::uint64_t>();
  i.stage_chunks = r.get<std::uint64_t>();
  i.regions_bytes = r.get<std::uint64_t>();
  i.layout_hash = r.get<std::uint64_t>();
  i.table_offset = r.get<std::uint64_t>();
  i.table_bytes = r.get<std::uint64_t>();
  i.lineage = r.get<std::uint64_t>();
  i.command = r.get<std::uint64_t>();
  for (auto& v : i.members)
    v = r.get<std::int32_t>();
  for (auto& v : i.member_chunks)
    v = r.get<std::uint64_t>();
  for (auto& v : i.member_layouts)
    v = r.get<std::uint64_t>();
  const std::size_t covered = r.size();
  if (r.get<std::uint32_t>() != crc32(page + kInfoOffset, covered)) return false;
  if (i.group_size < 1 || i.group_size > kMaxGroupSize || i.member >= i.group_size ||
      i.chunk_bytes == 0) {
    return false;
  }
  if (out != nullptr) *out = i;
  return true;
}

std::optional<ControlState> read_control(const std::byte* page) {
  const Slot a = read_slot(page + kControlOffset);
  const Slot b = read_slot(page + kControlOffset + kSlotBytes);
  if (a.valid && (!b.valid || a.sequence > b.sequence)) return a.state;
  if (b.valid) return b.state;
  return std::nullopt;
}

void write_control(std::byte* page, const ControlState& state) {
  const Slot a = read_slot(page + kControlOffset);
  const Slot b = read_slot(page + kControlOffset + kSlotBytes);
  const std::uint64_t newest = std::max(a.valid ? a.sequence : 0, b.valid ? b.sequence : 0);
  // Overwrite the slot that does not hold the newest state.
  const bool into_a = !(a.valid && a.sequence == newest && newest != 0);
  std::byte slot[kSlotBytes] = {};
  FieldWriter w(slot);
  w.put(newest + 1);
  w.put(state.committed);
  w.put(state.encoded);
  w.put(state.agreed);
  w.put(state.resumed);
  w.put(state.finished);
  w.put(state.checkpoint_nanoseconds);
  const std::uint32_t crc = crc32(slot, w.size());
  w.put(crc);
  // The data this state describes must be in memory before the state that vouches for it.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(page + kControlOffset + (into_a ? 0 : kSlotBytes), slot, kSlotBytes);
  std::atomic_thread_fence(std::memory_order_release);
}

void clear_control(std::byte* page) {
  std::memset(page + kControlOffset, 0, 2 * kSlotBytes);
  std::atomic_thread_fence(std::memory_order_release);
}

void encode_arena_record(std::byte* page, const ArenaRecord& record) {
  FieldWriter w(page + kInfoOffset);
  w.put(record.regions_bytes);
  w.put(record.stage_offset);
  w.put(record.stage_bytes);
  w.put(record.table_offset);
  w.put(record.table_bytes);
  const std::uint32_t crc = crc32(page + kInfoOffset, w.size());
  w.put(crc);
}

bool decode_arena_record(const std::byte* page, ArenaRecord* out) {
  FieldReader r(page + kInfoOffset);
  ArenaRecord a;
  a.regions_bytes = r.get<std::uint64_t>();
  a.stage_offset = r.get<std::uint64_t>();
  a.stage_bytes = r.get<std::uint64_t>();
  a.table_offset = r.get<std::uint64_t>();
  a.table_bytes = r.get<std::uint64_t>();
  const std::size_t covered = r.size();
  if (r.get<std::uint32_t>() != crc32(page + kInfoOffset, covered)) return false;
  if (out != nullptr) *out = a;
  return true;
}

std::optional<DigestState> read_digest_state(const std::byte* slot) {
  FieldReader r(slot);
  if (r.get<std::uint32_t>() != kDigestMagic) return std::nullopt;
  const auto flags = r.get<std::uint32_t>();
  DigestState d;
  d.epoch = r.get<std::int64_t>();
  const std::size_t covered = r.size();
  if (r.get<std::uint32_t>() != crc32(slot, covered)) return std::nullopt;
  d.data = (flags & 1u) != 0;
  d.parity = (flags & 2u) != 0;
  return d;
}

void write_digest_state(std::byte* slot, const DigestState& state) {
  std::byte header[kDigestHeaderBytes] = {};
  FieldWriter w(header);
  w.put(kDigestMagic);
  w.put(static_cast<std::uint32_t>((state.data ? 1u : 0u) | (state.parity ? 2u : 0u)));
  w.put(state.epoch);
  const std::uint32_t crc = crc32(header, w.size());
  w.put(crc);
  // The CRCs the header vouches for must be in memory before it.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(slot, header, kDigestHeaderBytes);
  std::atomic_thread_fence(std::memory_order_release);
}

static_assert(kInfoOffset + 112 + kMaxGroupSize * 20 + 4 <= kControlOffset,
              "checkpoint info overlaps the control block");
static_assert(kControlOffset + 2 * kSlotBytes <= kHeaderBytes, "control block beyond the header");

}  // namespace skt
