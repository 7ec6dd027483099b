// libFuzzer target: segment pages. Any bytes given to the header, checkpoint-info, control-block
// and region-table decoders are rejected or decoded without a crash (a table that decodes encodes
// back to the same bytes); and a header built from fuzzed fields decodes back to exactly what was
// encoded, while any single flipped byte in it is caught.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/layout.hpp"

namespace {

std::string text_at(const std::uint8_t* data, std::size_t size, std::size_t at,
                    std::size_t length) {
  std::string s;
  for (std::size_t i = 0; i < length && at + i < size; ++i) {
    const char c = static_cast<char>(data[at + i]);
    if (c != '\0') s += c;
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> page(skt::kHeaderBytes, std::byte{0});
  std::memcpy(page.data(), data, std::min(size, page.size()));
  skt::SegmentHeader header;
  (void)skt::decode_header(page.data(), std::min(size, page.size()), &header);
  skt::CheckpointInfo info;
  (void)skt::decode_checkpoint_info(page.data(), &info);
  (void)skt::read_control(page.data());
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  if (const auto regions = skt::decode_region_table(bytes, size)) {
    std::vector<std::byte> again(skt::region_table_bytes(*regions));
    skt::encode_region_table(again.data(), *regions);
    if (again.size() > size || std::memcmp(again.data(), bytes, again.size()) != 0) std::abort();
  }

  // Round trip of a header made of fuzzed fields.
  if (size < 24) return 0;
  skt::SegmentHeader h;
  h.identity.kind = static_cast<skt::SegmentKind>(data[0] % 4);
  std::memcpy(&h.identity.uid, data + 1, sizeof h.identity.uid);
  std::memcpy(&h.identity.rank, data + 5, sizeof h.identity.rank);
  std::memcpy(&h.nranks, data + 9, sizeof h.nranks);
  std::memcpy(&h.data_bytes, data + 13, sizeof h.data_bytes);
  h.segment_bytes = h.data_bytes + skt::kHeaderBytes;
  h.identity.job = text_at(data, size, 21, 40);
  h.identity.domain = text_at(data, size, 61, 40);
  h.identity.name = text_at(data, size, 101, 40);
  std::vector<std::byte> encoded(skt::kHeaderBytes, std::byte{0});
  skt::encode_header(encoded.data(), h);
  skt::SegmentHeader back;
  if (skt::decode_header(encoded.data(), encoded.size(), &back) != skt::HeaderStatus::ok)
    std::abort();
  if (!skt::same_identity(back.identity, h.identity) || back.nranks != h.nranks ||
      back.data_bytes != h.data_bytes || back.segment_bytes != h.segment_bytes) {
    std::abort();
  }
  // One corrupted byte among the header's first 256 must not decode as a valid header.
  const std::size_t at = data[20] % 256;
  encoded[at] = encoded[at] ^ std::byte{static_cast<unsigned char>(data[19] | 1)};
  skt::SegmentHeader corrupted;
  if (skt::decode_header(encoded.data(), encoded.size(), &corrupted) == skt::HeaderStatus::ok &&
      !(skt::same_identity(corrupted.identity, h.identity) && corrupted.nranks == h.nranks &&
        corrupted.data_bytes == h.data_bytes)) {
    std::abort();
  }
  return 0;
}
