#include "encoders/geometry.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace skt::enc {
namespace {

struct Shape {
  int group_size;
  int parity;
};

class Geometry : public ::testing::TestWithParam<Shape> {};

TEST_P(Geometry, RowsHoldParityAndDataExactlyOnce) {
  const auto [g, m] = GetParam();
  const auto geo = StripeGeometry::plan(g, m, 4096, 37);
  EXPECT_EQ(geo.rows % static_cast<std::uint64_t>(g), 0u);
  for (std::uint64_t row = 0; row < geo.rows; ++row) {
    std::set<int> holders, positions;
    for (int member = 0; member < g; ++member) {
      const int slot = geo.parity_slot(member, row);
      const int position = geo.data_position(member, row);
      EXPECT_NE(slot < 0, position < 0) << "member is both or neither parity and data";
      if (slot >= 0) {
        holders.insert(slot);
        EXPECT_EQ(geo.holder(row, slot), member);
      } else {
        positions.insert(position);
      }
    }
    EXPECT_EQ(static_cast<int>(holders.size()), m);
    EXPECT_EQ(static_cast<int>(positions.size()), g - m);
  }
}

TEST_P(Geometry, ChunksAndRowsAreInverse) {
  const auto [g, m] = GetParam();
  const std::uint64_t longest = 53;
  const auto geo = StripeGeometry::plan(g, m, 4096, longest);
  for (int member = 0; member < g; ++member) {
    std::set<std::uint64_t> rows;
    for (std::uint64_t chunk = 0; chunk < longest; ++chunk) {
      const std::uint64_t row = geo.row_of_chunk(member, chunk);
      ASSERT_LT(row, geo.rows) << "chunk beyond the rows";
      EXPECT_GE(geo.data_position(member, row), 0);
      EXPECT_EQ(geo.chunk_of_row(member, row), chunk);
      EXPECT_TRUE(rows.insert(row).second) << "two chunks in one row";
    }
    for (std::uint64_t index = 0; index < geo.parity_chunks(); ++index) {
      const std::uint64_t row = geo.parity_row(member, index);
      EXPECT_EQ(geo.parity_index(member, row), index);
      EXPECT_FALSE(geo.chunk_of_row(member, row).has_value());
    }
  }
}

TEST_P(Geometry, ContiguousChunksSpreadOverEveryOtherMember) {
  const auto [g, m] = GetParam();
  const auto geo = StripeGeometry::plan(g, m, 4096, 100);
  for (int member = 0; member < g; ++member) {
    // Any g-m consecutive chunks: their rows' first parity slots are held by distinct members,
    // never the owner, so a dirty range never lands on one hot rank.
    for (std::uint64_t start = 0; start + static_cast<std::uint64_t>(g - m) <= 100; start += 7) {
      std::set<int> holders;
      for (int k = 0; k < g - m; ++k) {
        holders.insert(
            geo.holder(geo.row_of_chunk(member, start + static_cast<std::uint64_t>(k)), 0));
      }
      EXPECT_EQ(static_cast<int>(holders.size()), g - m);
      EXPECT_EQ(holders.count(member), 0u);
    }
  }
}

TEST(GeometrySize, ParityIsAboutMOverGMinusMOfTheData) {
  const auto geo = StripeGeometry::plan(16, 1, 1 << 20, 1500);
  EXPECT_EQ(geo.parity_chunks(), 100u);  // 1500 / 15
  const auto rs = StripeGeometry::plan(8, 3, 1 << 20, 500);
  EXPECT_EQ(rs.parity_chunks(), 300u);  // 500 / 5 periods of 3
  EXPECT_EQ(StripeGeometry::plan(4, 1, 4096, 0).rows, 0u);
}

TEST(GeometryBlocks, AtMost64BlocksOfWhole64ByteUnits) {
  for (const std::size_t chunk : {std::size_t{4096}, std::size_t{4160}, std::size_t{262144},
                                  std::size_t{1} << 20, std::size_t{1} << 30}) {
    const auto geo = StripeGeometry::plan(4, 1, chunk, 10);
    EXPECT_EQ(geo.block_bytes() % 64, 0u) << chunk;
    EXPECT_LE(geo.blocks_per_chunk(), 64) << chunk;
    EXPECT_GE(geo.block_bytes() * static_cast<std::size_t>(geo.blocks_per_chunk()), chunk);
    EXPECT_LT(geo.block_bytes() * static_cast<std::size_t>(geo.blocks_per_chunk() - 1), chunk);
  }
  EXPECT_EQ(StripeGeometry::plan(4, 1, 4096, 1).block_bytes(), 64u);
  EXPECT_EQ(StripeGeometry::plan(4, 1, 262144, 1).block_bytes(), 4096u);
}

TEST(GeometryBlocks, MaskCoversEveryBlockARangeTouches) {
  const auto geo = StripeGeometry::plan(2, 1, 4096, 1);  // 64 blocks of 64 bytes
  EXPECT_EQ(geo.block_mask(0, 4096), ~std::uint64_t{0});
  EXPECT_EQ(geo.block_mask(100, 101), std::uint64_t{1} << 1);
  EXPECT_EQ(geo.block_mask(63, 65), std::uint64_t{3});
  EXPECT_EQ(geo.block_mask(4095, 9999), std::uint64_t{1} << 63);
  EXPECT_EQ(geo.block_mask(7, 7), 0u);
  const auto odd = StripeGeometry::plan(2, 1, 4160, 1);  // 33 blocks of 128, the last of 64
  EXPECT_EQ(odd.blocks_per_chunk(), 33);
  EXPECT_EQ(odd.block_mask(0, 4160), (std::uint64_t{1} << 33) - 1);
}

TEST(GeometryBlocks, SegmentsAreRunsCutWhereFreshnessChanges) {
  const auto geo = StripeGeometry::plan(2, 1, 4160, 1);
  EXPECT_TRUE(geo.segments(0, ~std::uint64_t{0}).empty());
  const std::vector<RowSegment> expected{
      {128, 384, false}, {384, 512, true}, {768, 896, true}, {4096, 4160, true}};
  const std::uint64_t any = 0b1110 | (std::uint64_t{1} << 6) | (std::uint64_t{1} << 32);
  const std::uint64_t all = 0b1000 | (std::uint64_t{1} << 6) | (std::uint64_t{1} << 32) | 1;
  EXPECT_EQ(geo.segments(any, all), expected);
  const std::vector<RowSegment> whole{{0, 4160, true}};
  EXPECT_EQ(geo.segments(~std::uint64_t{0}, ~std::uint64_t{0}), whole);
}

TEST(GeometryBlocks, FreshSegmentsTravelTogetherOthersAlone) {
  using Runs = std::vector<std::pair<std::size_t, std::size_t>>;
  EXPECT_TRUE(message_runs({}).empty());
  const std::vector<RowSegment> segments{{0, 64, true},     {128, 192, true}, {192, 256, false},
                                         {256, 320, false}, {384, 448, true}, {512, 576, true},
                                         {640, 704, true},  {704, 768, false}};
  EXPECT_EQ(message_runs(segments), (Runs{{0, 2}, {2, 3}, {3, 4}, {4, 7}, {7, 8}}));
  const std::vector<RowSegment> alone{{0, 64, false}};
  EXPECT_EQ(message_runs(alone), (Runs{{0, 1}}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Geometry,
                         ::testing::Values(Shape{2, 1}, Shape{3, 1}, Shape{4, 1}, Shape{8, 1},
                                           Shape{5, 2}, Shape{8, 3}, Shape{16, 1}));

}  // namespace
}  // namespace skt::enc
