#include "encoders/reference.hpp"

#include <algorithm>
#include <cstring>

namespace skt::enc {

namespace {

std::uint64_t chunk_count(const Bytes& stream, std::size_t chunk) {
  return (stream.size() + chunk - 1) / chunk;
}

// Chunk `index` of a stream, zero-padded to a whole chunk; all zero past the end.
Bytes padded_chunk(const Bytes& stream, std::uint64_t index, std::size_t chunk) {
  Bytes out(chunk, std::byte{0});
  const std::size_t begin = index * chunk;
  if (begin < stream.size()) {
    std::memcpy(out.data(), stream.data() + begin, std::min(chunk, stream.size() - begin));
  }
  return out;
}

}  // namespace

std::vector<Bytes> reference_encode(const StripeGeometry& geometry, const Codec& codec,
                                    std::span<const Bytes> streams) {
  const int g = geometry.group_size;
  const std::size_t chunk = geometry.chunk_bytes;
  std::vector<Bytes> parities(static_cast<std::size_t>(g), Bytes(geometry.parity_bytes()));
  for (int block = 0; block < g; ++block) {
    for (std::uint64_t index = 0; index < geometry.parity_chunks(); ++index) {
      const std::uint64_t row = geometry.parity_row(block, index);
      const int slot = geometry.parity_slot(block, row);
      Bytes acc(chunk, std::byte{0});
      // In the order the holder adds them (its row's data positions, which follow the members
      // after it), so that even a scheme with rounding gives the same bits.
      for (int step = 1; step < g; ++step) {
        const int member = (block + step) % g;
        const auto position = geometry.chunk_of_row(member, row);
        const Coef coef =
            position ? codec.encode_coef(slot, geometry.data_position(member, row)) : Coef{0};
        const Bytes data =
            position ? padded_chunk(streams[static_cast<std::size_t>(member)], *position, chunk)
                     : Bytes(chunk, std::byte{0});
        if (step == 1) {
          codec.scale(acc.data(), data.data(), chunk, coef);
        } else {
          codec.combine(acc.data(), acc.data(), data.data(), chunk, coef);
        }
      }
      std::memcpy(parities[static_cast<std::size_t>(block)].data() + index * chunk, acc.data(),
                  chunk);
    }
  }
  return parities;
}

void reference_rebuild(const StripeGeometry& geometry, const Codec& codec,
                       std::span<const int> lost, std::span<Bytes> streams,
                       std::span<Bytes> parities) {
  const int g = geometry.group_size;
  const std::size_t chunk = geometry.chunk_bytes;
  auto is_lost = [&](int member) { return std::binary_search(lost.begin(), lost.end(), member); };
  // Every lost item is computed from survivors only, so the order of targets does not matter.
  for (const int target : lost) {
    auto& stream = streams[static_cast<std::size_t>(target)];
    for (std::uint64_t row = 0; row < geometry.rows; ++row) {
      const auto coefs =
          codec.rebuild_coefs(static_cast<int>(row % static_cast<std::uint64_t>(g)), lost, target);
      Bytes acc(chunk, std::byte{0});
      bool first = true;  // survivors in member order, as the rebuild chain adds them
      for (int member = 0; member < g; ++member) {
        if (is_lost(member)) continue;
        const std::size_t m = static_cast<std::size_t>(member);
        Bytes item(chunk, std::byte{0});
        if (const auto index = geometry.parity_index(member, row)) {
          std::memcpy(item.data(), parities[m].data() + *index * chunk, chunk);
        } else {
          item = padded_chunk(streams[m], *geometry.chunk_of_row(member, row), chunk);
        }
        if (first) {
          codec.scale(acc.data(), item.data(), chunk, coefs[m]);
        } else {
          codec.combine(acc.data(), acc.data(), item.data(), chunk, coefs[m]);
        }
        first = false;
      }
      if (const auto index = geometry.parity_index(target, row)) {
        std::memcpy(parities[static_cast<std::size_t>(target)].data() + *index * chunk, acc.data(),
                    chunk);
      } else if (const auto position = geometry.chunk_of_row(target, row);
                 *position < chunk_count(stream, chunk)) {
        const std::size_t begin = *position * chunk;
        std::memcpy(stream.data() + begin, acc.data(), std::min(chunk, stream.size() - begin));
      }
    }
  }
}

}  // namespace skt::enc
