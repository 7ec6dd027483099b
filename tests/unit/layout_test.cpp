#include "libselfckpt/src/layout.hpp"

#include <gtest/gtest.h>

namespace skt {
namespace {

TEST(Layout, RegionsStartOnChunkBoundariesOfTheStream) {
  const auto l = WorkspaceLayout::plan({{"a", 10000}, {"b", 4096}, {"c", 1}}, 4096);
  EXPECT_EQ(l.chunks, 3u + 1u + 1u);
  EXPECT_EQ(l.first_chunk, (std::vector<std::uint64_t>{0, 3, 4}));
  EXPECT_EQ(l.workspace_bytes, 14097u);
  EXPECT_EQ(l.copy_offset, (std::vector<std::size_t>{0, 10048, 14144}));
  EXPECT_EQ(l.copy_bytes, 14208u);

  std::vector<std::byte> a(10000), b(4096), c(1);
  std::vector<std::byte*> starts{a.data(), b.data(), c.data()};
  const auto chunks = l.chunks_at(starts);
  ASSERT_EQ(chunks.size(), 5u);
  EXPECT_EQ(chunks.data[2], a.data() + 8192);
  EXPECT_EQ(chunks.bytes[2], 10000u - 8192u);
  EXPECT_EQ(chunks.data[3], b.data());
  EXPECT_EQ(chunks.bytes[3], 4096u);
  EXPECT_EQ(chunks.bytes[4], 1u);

  std::vector<std::byte> copy(l.copy_bytes);
  const auto copies = l.copy_chunks(copy.data());
  EXPECT_EQ(copies.data[3], copy.data() + 10048);
  EXPECT_EQ(copies.bytes, chunks.bytes);
}

TEST(Layout, FirstRegionIsPaddedToWholePeriods) {
  const auto l = WorkspaceLayout::plan({{"private", 64}, {"a", 10000}}, 4096, 5);
  EXPECT_EQ(l.chunk_count, (std::vector<std::uint64_t>{5, 3}));
  EXPECT_EQ(l.first_chunk, (std::vector<std::uint64_t>{0, 5}));
  EXPECT_EQ(l.chunks, 8u);
  std::vector<std::byte> p(64), a(10000);
  std::vector<std::byte*> starts{p.data(), a.data()};
  const auto chunks = l.chunks_at(starts);
  ASSERT_EQ(chunks.size(), 8u);
  EXPECT_EQ(chunks.bytes[0], 64u);
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(chunks.data[static_cast<std::size_t>(i)], nullptr);
    EXPECT_EQ(chunks.bytes[static_cast<std::size_t>(i)], 0u);
  }
  EXPECT_EQ(chunks.data[5], a.data());
  // The padding does not change what the layout describes.
  EXPECT_EQ(l.hash, WorkspaceLayout::plan({{"private", 64}, {"a", 10000}}, 4096).hash);
}

TEST(Layout, HashChangesWithNamesAndSizes) {
  const auto base = WorkspaceLayout::plan({{"a", 100}, {"b", 200}}, 4096).hash;
  EXPECT_EQ(base, WorkspaceLayout::plan({{"a", 100}, {"b", 200}}, 4096).hash);
  EXPECT_NE(base, WorkspaceLayout::plan({{"a", 100}, {"b", 201}}, 4096).hash);
  EXPECT_NE(base, WorkspaceLayout::plan({{"a", 100}, {"c", 200}}, 4096).hash);
  EXPECT_NE(base, WorkspaceLayout::plan({{"b", 200}, {"a", 100}}, 4096).hash);
}

TEST(RegionTable, RoundTripsAndRefusesDamage) {
  const std::vector<RegionSpec> regions{{"private(state:16;)", 64}, {"a", 10000}, {"", 0}};
  std::vector<std::byte> table(region_table_bytes(regions));
  encode_region_table(table.data(), regions);
  const auto back = decode_region_table(table.data(), table.size());
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].name, "private(state:16;)");
  EXPECT_EQ((*back)[1].bytes, 10000u);
  // Cut short anywhere, or any byte changed: refused, never read past the end.
  for (std::size_t n = 0; n < table.size(); ++n)
    EXPECT_FALSE(decode_region_table(table.data(), n)) << n;
  for (std::size_t i = 0; i < table.size(); ++i) {
    auto damaged = table;
    damaged[i] ^= std::byte{0x10};
    EXPECT_FALSE(decode_region_table(damaged.data(), damaged.size())) << i;
  }
}

TEST(CheckpointAreas, CopiesChecksumsPendingAndTableFollowEachOtherOnPages) {
  const auto self = checkpoint_areas(10000, 5000, 1, true);
  EXPECT_EQ(self.copy_bytes, 12288u);
  EXPECT_EQ(self.parity_bytes, 8192u);
  EXPECT_EQ(self.checksum_offset(0), 12288u);
  EXPECT_EQ(self.pending_offset(), 20480u);
  EXPECT_EQ(self.table_offset(), 28672u);
  EXPECT_EQ(self.data_bytes(100), 32768u);
  EXPECT_EQ(self.copy_of_epoch(7), 0);
  EXPECT_EQ(self.checksum_of_epoch(6), 12288u);
  EXPECT_EQ(self.checksum_of_epoch(7), 20480u);

  const auto twin = checkpoint_areas(10000, 5000, 2, false);
  EXPECT_EQ(twin.copy_offset(1), 20480u);
  EXPECT_EQ(twin.checksum_offset(1), 32768u);
  EXPECT_EQ(twin.table_offset(), 40960u);
  EXPECT_EQ(twin.copy_of_epoch(7), 1);
  EXPECT_EQ(twin.copy_of_epoch(8), 0);
  EXPECT_EQ(twin.checksum_of_epoch(7), 32768u);
  EXPECT_EQ(twin.checksum_of_epoch(8), 12288u);

  const auto single = checkpoint_areas(10000, 5000, 1, false);
  EXPECT_EQ(single.checksum_of_epoch(7), 12288u);
  EXPECT_EQ(single.checksum_of_epoch(8), 12288u);
}

}  // namespace
}  // namespace skt
