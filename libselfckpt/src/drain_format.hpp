// The helpers of a drained file's format that reading and writing share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libselfckpt/internal/drain.hpp"

namespace skt {

inline constexpr const char* kManifestName = "MANIFEST";

// A rank file's digest: its header page and its table of block CRCs.
std::uint64_t file_digest(const std::byte* header_page, const std::vector<std::uint32_t>& crcs);
// The epoch an epoch directory's name holds ("epoch-000000000012"), if it is one.
std::optional<std::uint64_t> epoch_of_name(const std::string& name);

// Where block b of a file is: in the payload (B, then C from copy_bytes on) and in the file.
struct BlockSpan {
  std::uint64_t payload_offset = 0;
  std::size_t bytes = 0;
  std::uint64_t file_offset = 0;
};
BlockSpan block_span(const DrainFileHeader& h, std::uint64_t b);
std::string describe_block(const DrainFileHeader& h, const BlockSpan& s);
std::uint32_t table_crc(const std::vector<std::uint32_t>& crcs);
// The format version a drained file's header names, when it is one of selfckpt's.
std::optional<std::uint32_t> drain_format_of(const std::byte* page);

}  // namespace skt
