#include "encoders/geometry.hpp"

#include <algorithm>

namespace skt::enc {

namespace {
int residue_distance(int member, std::uint64_t row, int group_size) noexcept {
  const int r = static_cast<int>(row % static_cast<std::uint64_t>(group_size));
  return (member - r + group_size) % group_size;
}
}  // namespace

StripeGeometry StripeGeometry::plan(int group_size, int parity, std::size_t chunk_bytes,
                                    std::uint64_t max_member_chunks) {
  StripeGeometry g;
  g.group_size = group_size;
  g.parity = parity;
  g.chunk_bytes = chunk_bytes;
  const auto width = static_cast<std::uint64_t>(group_size - parity);
  const std::uint64_t periods = (max_member_chunks + width - 1) / width;
  g.rows = periods * static_cast<std::uint64_t>(group_size);
  return g;
}

std::uint64_t StripeGeometry::parity_chunks() const noexcept {
  return rows / static_cast<std::uint64_t>(group_size) * static_cast<std::uint64_t>(parity);
}

int StripeGeometry::parity_slot(int member, std::uint64_t row) const noexcept {
  const int d = residue_distance(member, row, group_size);
  return d < parity ? d : -1;
}

int StripeGeometry::data_position(int member, std::uint64_t row) const noexcept {
  const int d = residue_distance(member, row, group_size);
  return d < parity ? -1 : d - parity;
}

int StripeGeometry::holder(std::uint64_t row, int slot) const noexcept {
  return static_cast<int>((row + static_cast<std::uint64_t>(slot)) %
                          static_cast<std::uint64_t>(group_size));
}

std::uint64_t StripeGeometry::row_of_chunk(int member, std::uint64_t chunk) const noexcept {
  const auto width = static_cast<std::uint64_t>(data_width());
  const std::uint64_t period = chunk / width;
  const int position = static_cast<int>(chunk % width);
  const int residue = ((member - position - parity) % group_size + group_size) % group_size;
  return period * static_cast<std::uint64_t>(group_size) + static_cast<std::uint64_t>(residue);
}

std::optional<std::uint64_t> StripeGeometry::chunk_of_row(int member,
                                                          std::uint64_t row) const noexcept {
  const int position = data_position(member, row);
  if (position < 0) return std::nullopt;
  return row / static_cast<std::uint64_t>(group_size) * static_cast<std::uint64_t>(data_width()) +
         static_cast<std::uint64_t>(position);
}

std::uint64_t StripeGeometry::parity_row(int member, std::uint64_t index) const noexcept {
  const auto m = static_cast<std::uint64_t>(parity);
  const std::uint64_t period = index / m;
  const int slot = static_cast<int>(index % m);
  const int residue = ((member - slot) % group_size + group_size) % group_size;
  return period * static_cast<std::uint64_t>(group_size) + static_cast<std::uint64_t>(residue);
}

std::optional<std::uint64_t> StripeGeometry::parity_index(int member,
                                                          std::uint64_t row) const noexcept {
  const int slot = parity_slot(member, row);
  if (slot < 0) return std::nullopt;
  return row / static_cast<std::uint64_t>(group_size) * static_cast<std::uint64_t>(parity) +
         static_cast<std::uint64_t>(slot);
}

std::size_t StripeGeometry::block_bytes() const noexcept {
  const std::size_t per_block = (chunk_bytes + 63) / 64;
  return std::max<std::size_t>(64, (per_block + 63) / 64 * 64);
}

int StripeGeometry::blocks_per_chunk() const noexcept {
  return static_cast<int>((chunk_bytes + block_bytes() - 1) / block_bytes());
}

std::uint64_t StripeGeometry::block_mask(std::size_t begin, std::size_t end) const noexcept {
  end = std::min(end, chunk_bytes);
  if (begin >= end) return 0;
  const std::size_t block = block_bytes();
  const auto first = static_cast<int>(begin / block);
  const auto last = static_cast<int>((end - 1) / block);
  const std::uint64_t upto_last =
      last >= 63 ? ~std::uint64_t{0} : (std::uint64_t{1} << (last + 1)) - 1;
  return upto_last & ~((std::uint64_t{1} << first) - 1);
}

std::vector<RowSegment> StripeGeometry::segments(std::uint64_t any, std::uint64_t all) const {
  std::vector<RowSegment> out;
  const std::size_t block = block_bytes();
  const int count = blocks_per_chunk();
  for (int b = 0; b < count;) {
    const std::uint64_t bit = std::uint64_t{1} << b;
    if ((any & bit) == 0) {
      ++b;
      continue;
    }
    const bool fresh = (all & bit) != 0;
    int e = b + 1;
    while (e < count && (any >> e & 1u) != 0 && ((all >> e & 1u) != 0) == fresh)
      ++e;
    out.push_back({static_cast<std::size_t>(b) * block,
                   std::min(chunk_bytes, static_cast<std::size_t>(e) * block), fresh});
    b = e;
  }
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> message_runs(
    const std::vector<RowSegment>& segments) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t first = 0; first < segments.size();) {
    std::size_t last = first + 1;
    if (segments[first].fresh) {
      while (last < segments.size() && segments[last].fresh)
        ++last;
    }
    runs.emplace_back(first, last);
    first = last;
  }
  return runs;
}

}  // namespace skt::enc
