#include "libselfckpt/internal/layout.hpp"

#include <cstring>

#include <gtest/gtest.h>

namespace skt {
namespace {

// Two private objects staged in 128 bytes, regions 'a' (10000 bytes at 0) and 'b' (4096 at
// 12288) in a regions' area of 16384 bytes.
std::vector<RegionEntry> entries() {
  return {{"step", true, 0, 8},
          {"state", true, 64, 40},
          {"a", false, 0, 10000},
          {"b", false, 12288, 4096}};
}

TEST(Layout, TheStreamIsTheStageThenTheRegionsArea) {
  const auto l = StreamLayout::plan(entries(), 128, 16384, 4096);
  EXPECT_EQ(l.stage_chunks, 1u);
  EXPECT_EQ(l.chunks, 1u + 4u);
  EXPECT_EQ(l.workspace_bytes(), 128u + 16384u);
  EXPECT_EQ(l.copy_regions_offset(), 128u);
  EXPECT_EQ(l.copy_bytes(), 128u + 16384u);

  std::vector<std::byte> stage(128), regions(16384);
  const auto chunks = l.chunks_at(stage.data(), regions.data());
  ASSERT_EQ(chunks.size(), 5u);
  EXPECT_EQ(chunks.data[0], stage.data());
  EXPECT_EQ(chunks.bytes[0], 128u);
  EXPECT_EQ(chunks.data[1], regions.data());
  EXPECT_EQ(chunks.data[4], regions.data() + 12288);
  EXPECT_EQ(chunks.bytes[4], 4096u);

  std::vector<std::byte> copy(l.copy_bytes());
  const auto copies = l.copy_chunks(copy.data());
  EXPECT_EQ(copies.data[1], copy.data() + 128);
  EXPECT_EQ(copies.bytes, chunks.bytes);
}

TEST(Layout, TheStageIsPaddedToWholePeriods) {
  const auto l = StreamLayout::plan(entries(), 128, 16384, 4096, 5);
  EXPECT_EQ(l.stage_chunks, 5u);
  EXPECT_EQ(l.chunks, 9u);
  std::vector<std::byte> stage(128), regions(16384);
  const auto chunks = l.chunks_at(stage.data(), regions.data());
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(chunks.data[static_cast<std::size_t>(i)], nullptr);
    EXPECT_EQ(chunks.bytes[static_cast<std::size_t>(i)], 0u);
  }
  EXPECT_EQ(chunks.data[5], regions.data());
  // The padding does not change what the layout describes.
  EXPECT_EQ(l.hash, StreamLayout::plan(entries(), 128, 16384, 4096).hash);
  // Without a stage there is nothing to pad.
  EXPECT_EQ(StreamLayout::plan({{"a", false, 0, 100}}, 0, 128, 4096, 5).stage_chunks, 0u);
}

TEST(Layout, HashChangesWithNamesSizesAndPlaces) {
  const auto base = StreamLayout::plan(entries(), 128, 16384, 4096).hash;
  EXPECT_EQ(base, StreamLayout::plan(entries(), 128, 16384, 65536).hash);
  auto other = entries();
  other[2].bytes = 10001;
  EXPECT_NE(base, StreamLayout::plan(other, 128, 16384, 4096).hash);
  other = entries();
  other[3].name = "c";
  EXPECT_NE(base, StreamLayout::plan(other, 128, 16384, 4096).hash);
  other = entries();
  other[3].offset = 10048;
  EXPECT_NE(base, StreamLayout::plan(other, 128, 16384, 4096).hash);
  EXPECT_NE(base, StreamLayout::plan(entries(), 192, 16384, 4096).hash);
}

TEST(Layout, DirtyRangesBecomeTheBlocksTheyTouchAndTheStageAlways) {
  const auto l = StreamLayout::plan(entries(), 128, 16384, 4096);
  enc::StripeGeometry g;
  g.chunk_bytes = 4096;  // blocks of 64 bytes
  const auto changed = l.changed_blocks(g, {{"a", 100, 10}, {"b", 4000, 200}, {"nosuch", 0, 9}});
  ASSERT_EQ(changed.size(), 5u);
  EXPECT_EQ(changed[0], ~std::uint64_t{0});      // the stage
  EXPECT_EQ(changed[1], std::uint64_t{1} << 1);  // a bytes 100..109: block 1 of chunk 1
  EXPECT_EQ(changed[2], 0u);
  EXPECT_EQ(changed[3], 0u);
  // b bytes 4000..4095 (the rest is past its end) are blocks 62 and 63 of the last chunk.
  EXPECT_EQ(changed[4], (std::uint64_t{1} << 63) | (std::uint64_t{1} << 62));
}

// The layout of entries() with a workspace and a committed copy of it, all zero, in chunks of 4096
// bytes (blocks of 64).
struct ComparedStreams {
  StreamLayout l = StreamLayout::plan(entries(), 128, 16384, 4096);
  enc::StripeGeometry g = [] {
    enc::StripeGeometry geometry;
    geometry.chunk_bytes = 4096;
    return geometry;
  }();
  std::vector<std::byte> w_stage = std::vector<std::byte>(128),
                         w_regions = std::vector<std::byte>(16384),
                         b_stage = std::vector<std::byte>(128),
                         b_regions = std::vector<std::byte>(16384);
  enc::ChunkList w = l.chunks_at(w_stage.data(), w_regions.data());
  enc::ChunkList b = l.chunks_at(b_stage.data(), b_regions.data());
};

TEST(Layout, ComparingTheWorkspaceWithItsCopyFindsExactlyTheBlocksThatDiffer) {
  ComparedStreams s;
  auto& [l, g, w_stage, w_regions, b_stage, b_regions, w, b] = s;
  auto all_zero_but_stage = [&](const std::vector<std::uint64_t>& changed) {
    for (std::size_t j = 1; j < changed.size(); ++j)
      if (changed[j] != 0) return false;
    return changed[0] == ~std::uint64_t{0};
  };
  EXPECT_TRUE(all_zero_but_stage(l.differing_blocks(g, w, b, {})));
  w_stage[5] = std::byte{1};  // the stage is staged anew anyway: no difference there counts
  EXPECT_TRUE(all_zero_but_stage(l.differing_blocks(g, w, b, {})));

  w_regions[9999] = std::byte{1};          // a's last byte: block 15 of chunk 3 (bytes 1792..)
  w_regions[12288 + 4095] = std::byte{1};  // b's last byte: block 63 of chunk 4
  w_regions[11000] = std::byte{1};         // the gap between a and b belongs to no region
  auto changed = l.differing_blocks(g, w, b, {});
  EXPECT_EQ(changed[3], std::uint64_t{1} << 28);
  EXPECT_EQ(changed[4], std::uint64_t{1} << 63);
  EXPECT_EQ(changed[1] | changed[2], 0u);
  EXPECT_EQ(StreamLayout::changed_bytes(g, w, changed),
            128u + 64 + 64);  // the stage's 128 bytes, two blocks

  // A settled region is not compared.
  changed = l.differing_blocks(g, w, b, {"b"});
  EXPECT_EQ(changed[4], 0u);
  EXPECT_EQ(changed[3], std::uint64_t{1} << 28);

  // Every byte of a region is seen: a difference at each position of one block in turn.
  for (std::size_t at = 4096; at < 4096 + 64; ++at) {
    std::fill(w_regions.begin(), w_regions.end(), std::byte{0});
    w_regions[at] = std::byte{0xff};
    changed = l.differing_blocks(g, w, b, {});
    EXPECT_EQ(changed[2], std::uint64_t{1}) << at;
  }
}

TEST(Layout, ASampleComparesEveryPeriodthChunkAndUndeclaredChangesAreNamed) {
  ComparedStreams s;
  auto& [l, g, w_stage, w_regions, b_stage, b_regions, w, b] = s;
  w_regions[9999] = std::byte{1};          // a's last byte: block 28 of chunk 3
  w_regions[12288 + 4095] = std::byte{1};  // b's last byte: block 63 of chunk 4
  // Chunks 1, 3 (phase 1 of 2), then 2, 4 (phase 0): the stage is whole either way.
  auto odd = l.differing_blocks(g, w, b, {}, 2, 1);
  EXPECT_EQ(odd[0], ~std::uint64_t{0});
  EXPECT_EQ(odd[3], std::uint64_t{1} << 28);
  EXPECT_EQ(odd[4], 0u);
  auto even = l.differing_blocks(g, w, b, {}, 2, 0);
  EXPECT_EQ(even[3], 0u);
  EXPECT_EQ(even[4], std::uint64_t{1} << 63);

  // Declared: a's bytes 9992..9999 covers block 28 of chunk 3; b's last byte is not declared.
  const auto actual = l.differing_blocks(g, w, b, {});
  auto declared = l.changed_blocks(g, {{"a", 9992, 8}});
  auto missed = l.undeclared(g, w, actual, declared);
  ASSERT_TRUE(missed.has_value());
  EXPECT_EQ(missed->first, "region 'b' bytes 4032..4095");
  EXPECT_EQ(missed->bytes, 64u);
  // Both undeclared: the first in stream order is named, and both blocks counted.
  declared = l.changed_blocks(g, {});
  missed = l.undeclared(g, w, actual, declared);
  ASSERT_TRUE(missed.has_value());
  EXPECT_EQ(missed->first, "region 'a' bytes 9984..9999");
  EXPECT_EQ(missed->bytes, 128u);
  // Declared, however loosely (a range that only touches the block), nothing is missed.
  declared = l.changed_blocks(g, {{"a", 9990, 1}, {"b", 4090, 1}});
  EXPECT_FALSE(l.undeclared(g, w, actual, declared).has_value());
}

TEST(Layout, DescribesWhatAChunkHolds) {
  const auto l = StreamLayout::plan(entries(), 128, 16384, 4096);
  EXPECT_EQ(l.describe(0, 64, 70), "private object 'state'");
  EXPECT_EQ(l.describe(1, 100, 110), "region 'a' bytes 100..109");
  EXPECT_EQ(l.describe(3, 1807, 1808), "region 'a' byte 9999");
  EXPECT_EQ(l.describe(3, 2000, 2100), "the alignment gap between regions");
  EXPECT_EQ(l.describe(4, 0, 4096), "region 'b' bytes 0..4095");
  EXPECT_EQ(l.describe(9, 0, 1), "beyond its stream (reads as zero)");
}

TEST(RegionTable, RoundTripsAndRefusesDamage) {
  const auto table_entries = entries();
  std::vector<std::byte> table(region_table_bytes(table_entries));
  encode_region_table(table.data(), table_entries);
  const auto back = decode_region_table(table.data(), table.size());
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, table_entries);
  // Cut short anywhere, or any byte changed: refused, never read past the end.
  for (std::size_t n = 0; n < table.size(); ++n)
    EXPECT_FALSE(decode_region_table(table.data(), n)) << n;
  for (std::size_t i = 0; i < table.size(); ++i) {
    auto damaged = table;
    damaged[i] ^= std::byte{0x10};
    EXPECT_FALSE(decode_region_table(damaged.data(), damaged.size())) << i;
  }
  // A flag byte other than 0 or 1 is refused even under a matching CRC: a table that decodes
  // encodes back to the same bytes (the header fuzzer found a "staged" byte of 2 read as true).
  auto odd_flag = table;
  odd_flag[sizeof(std::uint32_t)] = std::byte{2};
  const std::size_t covered = odd_flag.size() - sizeof(std::uint32_t);
  const std::uint32_t crc = crc32(odd_flag.data(), covered);
  std::memcpy(odd_flag.data() + covered, &crc, sizeof crc);
  EXPECT_FALSE(decode_region_table(odd_flag.data(), odd_flag.size()));
}

TEST(DigestSlot, HoldsAnEpochOnlyWhenItsHeaderSaysSo) {
  std::vector<std::byte> memory(DigestSlot::bytes(3, 2, 4));
  EXPECT_EQ(memory.size(), kDigestHeaderBytes + 5u * 4u * 4u);
  const DigestSlot slot{memory.data(), 3, 2, 4};
  EXPECT_FALSE(slot.state().has_value());
  EXPECT_EQ(slot.parity(), slot.data() + 12);
  slot.set({7, true, false});
  EXPECT_TRUE(slot.holds(7, false));
  EXPECT_FALSE(slot.holds(7, true));
  EXPECT_FALSE(slot.holds(6, false));
  slot.set({7, true, true});
  EXPECT_TRUE(slot.holds(7, true));
  memory[9] ^= std::byte{1};  // the header damaged: nothing
  EXPECT_FALSE(slot.state().has_value());
  slot.clear();
  EXPECT_FALSE(slot.holds(7, false));
}

TEST(CheckpointAreas, CopiesChecksumsPendingDigestsAndTableFollowEachOtherOnPages) {
  const auto layout = StreamLayout::plan({{"a", false, 0, 10000}}, 0, 10048, 4096);  // 3 chunks
  enc::StripeGeometry g;
  g.group_size = 2;
  g.parity = 1;
  g.chunk_bytes = 4096;
  g.rows = 6;  // 3 parity chunks each
  const auto self = checkpoint_areas(layout, g, 1, true);
  EXPECT_EQ(self.copy_bytes, 12288u);
  EXPECT_EQ(self.parity_bytes, 12288u);
  EXPECT_EQ(self.digest_bytes, 4096u);
  EXPECT_EQ(self.checksum_offset(0), 12288u);
  EXPECT_EQ(self.pending_offset(), 24576u);
  EXPECT_EQ(self.digest_offset(6), 36864u);
  EXPECT_EQ(self.digest_offset(7), 40960u);
  EXPECT_EQ(self.table_offset(), 45056u);
  EXPECT_EQ(self.data_bytes(100), 49152u);
  EXPECT_EQ(self.copy_of_epoch(7), 0);
  EXPECT_EQ(self.checksum_of_epoch(6), 12288u);
  EXPECT_EQ(self.checksum_of_epoch(7), 24576u);

  const auto twin = checkpoint_areas(layout, g, 2, false);
  EXPECT_EQ(twin.copy_offset(1), 24576u);
  EXPECT_EQ(twin.checksum_offset(1), 36864u);
  EXPECT_EQ(twin.digest_offset(0), 49152u);
  EXPECT_EQ(twin.table_offset(), 57344u);
  EXPECT_EQ(twin.copy_of_epoch(7), 1);
  EXPECT_EQ(twin.copy_of_epoch(8), 0);
  EXPECT_EQ(twin.checksum_of_epoch(7), 36864u);
  EXPECT_EQ(twin.checksum_of_epoch(8), 12288u);

  const auto single = checkpoint_areas(layout, g, 1, false);
  EXPECT_EQ(single.checksum_of_epoch(7), 12288u);
  EXPECT_EQ(single.checksum_of_epoch(8), 12288u);
}

}  // namespace
}  // namespace skt
