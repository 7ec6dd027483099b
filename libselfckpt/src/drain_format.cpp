// A drained file's bytes and an epoch's manifest: pure functions of what they hold.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/src/drain_format.hpp"

namespace skt {

namespace {

constexpr char kMagic[8] = {'S', 'K', 'T', 'D', 'R', 'A', 'I', 'N'};
constexpr const char* kManifestFirstLine = "selfckpt drain manifest 1";

}  // namespace

std::uint64_t file_digest(const std::byte* header_page, const std::vector<std::uint32_t>& crcs) {
  const std::uint64_t head = crc64(header_page, kDrainHeaderBytes);
  return crc64(crcs.data(), crcs.size() * sizeof(std::uint32_t), head);
}

std::optional<std::uint64_t> epoch_of_name(const std::string& name) {
  constexpr std::string_view prefix = "epoch-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return {};
  std::uint64_t epoch = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return {};
    epoch = epoch * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return epoch;
}

BlockSpan block_span(const DrainFileHeader& h, std::uint64_t b) {
  if (b < h.copy_blocks()) {
    const std::uint64_t at = b * h.block_bytes;
    return {at, static_cast<std::size_t>(std::min(h.block_bytes, h.copy_bytes - at)),
            h.data_offset() + at};
  }
  const std::uint64_t at = (b - h.copy_blocks()) * h.block_bytes;
  return {h.copy_bytes + at,
          static_cast<std::size_t>(std::min(h.block_bytes, h.checksum_bytes - at)),
          h.checksum_offset() + at};
}

std::string describe_block(const DrainFileHeader& h, const BlockSpan& s) {
  return s.payload_offset < h.copy_bytes
             ? fmt::format("bytes {} to {} of the copy", s.payload_offset,
                           s.payload_offset + s.bytes)
             : fmt::format("bytes {} to {} of the checksum", s.payload_offset - h.copy_bytes,
                           s.payload_offset - h.copy_bytes + s.bytes);
}

std::uint32_t table_crc(const std::vector<std::uint32_t>& crcs) {
  return crc32(crcs.data(), crcs.size() * sizeof(std::uint32_t));
}

std::optional<std::uint32_t> drain_format_of(const std::byte* page) {
  if (std::memcmp(page, kMagic, sizeof kMagic) != 0) return std::nullopt;
  std::uint32_t version = 0;
  std::memcpy(&version, page + sizeof kMagic, sizeof version);
  return version;
}

std::uint64_t DrainFileHeader::data_offset() const noexcept {
  const std::uint64_t tables = blocks() * sizeof(std::uint32_t) + region_table_bytes;
  return kDrainHeaderBytes +
         (tables + kDrainHeaderBytes - 1) / kDrainHeaderBytes * kDrainHeaderBytes;
}

void encode_drain_header(std::byte* page, const DrainFileHeader& h) {
  std::memset(page, 0, kDrainHeaderBytes);
  FieldWriter w(page);
  for (const char c : kMagic)
    w.put(c);
  w.put(kDrainFormatVersion);
  w.text(h.job);
  w.put(h.run);
  w.put(h.epoch);
  w.put(static_cast<std::int32_t>(h.rank));
  w.put(static_cast<std::int32_t>(h.nranks));
  w.put(static_cast<std::int32_t>(h.groups));
  w.put(static_cast<std::int32_t>(h.group));
  w.put(static_cast<std::int32_t>(h.member));
  w.put(static_cast<std::int32_t>(h.group_size()));
  for (int i = 0; i < h.group_size(); ++i) {
    w.put(static_cast<std::int32_t>(h.members[static_cast<std::size_t>(i)]));
    w.put(h.member_chunks[static_cast<std::size_t>(i)]);
  }
  w.put(h.scheme);
  w.put(static_cast<std::int32_t>(h.parity));
  w.put(h.chunk_bytes);
  w.put(h.layout_hash);
  w.put(h.command);
  w.put(h.stage_bytes);
  w.put(h.regions_offset);
  w.put(h.regions_bytes);
  w.put(h.copy_bytes);
  w.put(h.checksum_bytes);
  w.put(static_cast<std::uint32_t>(h.with_checksum ? 1 : 0));
  w.put(h.block_bytes);
  w.put(h.table_crc);
  w.put(h.region_table_bytes);
  w.put(h.region_table_crc);
  const std::uint32_t crc = crc32(page, w.size());
  w.put(crc);
}

std::optional<DrainFileHeader> decode_drain_header(const std::byte* page) {
  if (drain_format_of(page) != kDrainFormatVersion) return {};
  constexpr std::size_t kFieldsAt = sizeof kMagic + sizeof kDrainFormatVersion;
  FieldReader r(page + kFieldsAt);
  DrainFileHeader h;
  h.job = r.text();
  h.run = r.get<std::uint64_t>();
  h.epoch = r.get<std::uint64_t>();
  h.rank = r.get<std::int32_t>();
  h.nranks = r.get<std::int32_t>();
  h.groups = r.get<std::int32_t>();
  h.group = r.get<std::int32_t>();
  h.member = r.get<std::int32_t>();
  const auto size = r.get<std::int32_t>();
  if (size < 1 || size > kMaxGroupSize) return {};  // before reading on: the CRC comes after
  for (int i = 0; i < size; ++i) {
    h.members.push_back(r.get<std::int32_t>());
    h.member_chunks.push_back(r.get<std::uint64_t>());
  }
  h.scheme = r.get<std::uint32_t>();
  h.parity = r.get<std::int32_t>();
  h.chunk_bytes = r.get<std::uint64_t>();
  h.layout_hash = r.get<std::uint64_t>();
  h.command = r.get<std::uint64_t>();
  h.stage_bytes = r.get<std::uint64_t>();
  h.regions_offset = r.get<std::uint64_t>();
  h.regions_bytes = r.get<std::uint64_t>();
  h.copy_bytes = r.get<std::uint64_t>();
  h.checksum_bytes = r.get<std::uint64_t>();
  h.with_checksum = r.get<std::uint32_t>() != 0;
  h.block_bytes = r.get<std::uint64_t>();
  h.table_crc = r.get<std::uint32_t>();
  h.region_table_bytes = r.get<std::uint64_t>();
  h.region_table_crc = r.get<std::uint32_t>();
  const std::size_t covered = kFieldsAt + r.size();
  if (r.get<std::uint32_t>() != crc32(page, covered)) return {};
  if (h.block_bytes == 0 || h.rank < 0 || h.rank >= h.nranks || h.groups < 1 || h.group < 0 ||
      h.group >= h.groups || h.member < 0 || h.member >= size ||
      h.members[static_cast<std::size_t>(h.member)] != h.rank) {
    return {};
  }
  return h;
}

std::string format_manifest(const DrainManifest& m) {
  std::string text = fmt::format("{}\njob {}\nrun {:016x}\nepoch {}\nranks {}\n",
                                 kManifestFirstLine, m.job, m.run, m.epoch, m.digests.size());
  for (std::size_t r = 0; r < m.digests.size(); ++r)
    text += fmt::format("rank {} digest {:016x}\n", r, m.digests[r]);
  text += fmt::format("crc {:08x}\n", crc32(text.data(), text.size()));
  return text;
}

std::optional<DrainManifest> parse_manifest(const std::string& text) {
  const auto last = text.rfind("crc ");
  if (last == std::string::npos || text.empty() || text.back() != '\n') return {};
  std::uint32_t crc = 0;
  if (std::sscanf(text.c_str() + last, "crc %8x\n", &crc) != 1 || crc != crc32(text.data(), last)) {
    return {};
  }
  std::istringstream in(text.substr(0, last));
  std::string line;
  if (!std::getline(in, line) || line != kManifestFirstLine) return {};
  DrainManifest m;
  std::string key;
  std::size_t ranks = 0;
  in >> key >> m.job;
  if (key != "job") return {};
  in >> key >> std::hex >> m.run >> std::dec;
  if (key != "run") return {};
  in >> key >> m.epoch;
  if (key != "epoch") return {};
  in >> key >> ranks;
  if (key != "ranks" || !in) return {};
  for (std::size_t r = 0; r < ranks; ++r) {
    std::size_t rank = 0;
    std::string word;
    std::uint64_t digest = 0;
    in >> key >> rank >> word >> std::hex >> digest >> std::dec;
    if (!in || key != "rank" || rank != r || word != "digest") return {};
    m.digests.push_back(digest);
  }
  return m;
}

}  // namespace skt
