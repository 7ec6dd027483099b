#include "encoders/crc.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/group.hpp"
#include "encoders/reference.hpp"

namespace skt::enc {
namespace {

// CRC-32C one bit at a time, from its definition (reflected polynomial 0x82F63B78, seeded with all
// ones, no final inversion): written apart from ISA-L and from the fast path of chunk_crcs.
std::uint32_t bitwise_crc(const std::byte* data, std::size_t valid, std::size_t bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < bytes; ++i) {
    crc ^= i < valid ? static_cast<std::uint32_t>(data[i]) : 0u;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc;
}

struct Case {
  std::size_t chunk_bytes;
  std::uint32_t valid;
};

constexpr CrcRoute kRoutes[] = {CrcRoute::isal, CrcRoute::interleaved};

class ChunkCrcs : public ::testing::TestWithParam<Case> {};

// Every block of a chunk, under random masks: each route, the one-block reference and the
// definition agree bit for bit. The blocks not in the mask keep what out held.
TEST_P(ChunkCrcs, MatchTheReferenceAndTheDefinition) {
  const auto [chunk_bytes, valid] = GetParam();
  const auto geometry = StripeGeometry::plan(2, 1, chunk_bytes, 1);
  const int blocks = geometry.blocks_per_chunk();
  const std::size_t size = geometry.block_bytes();
  std::mt19937_64 random(chunk_bytes * 131 + valid);
  // One byte off alignment: the fast path must not count on aligned loads.
  std::vector<std::byte> storage(chunk_bytes + 1);
  for (auto& byte : storage)
    byte = static_cast<std::byte>(random());
  const std::byte* chunk = storage.data() + 1;
  for (int trial = 0; trial < 16; ++trial) {
    const CrcRoute route = kRoutes[trial % 2];
    const std::uint64_t mask = trial < 2 ? ~std::uint64_t{0} : random();
    std::vector<std::uint32_t> out(static_cast<std::size_t>(blocks), 0x5a5a5a5au);
    chunk_crcs(geometry, chunk, valid, mask, out.data(), route);
    for (int b = 0; b < blocks; ++b) {
      SCOPED_TRACE(testing::Message() << "block " << b << " of " << blocks << ", trial " << trial
                                      << (route == CrcRoute::isal ? ", ISA-L" : ", interleaved"));
      if ((mask >> b & 1u) == 0) {
        EXPECT_EQ(out[static_cast<std::size_t>(b)], 0x5a5a5a5au);
        continue;
      }
      const std::size_t begin = static_cast<std::size_t>(b) * size;
      const std::size_t bytes = std::min(size, chunk_bytes - begin);
      const std::size_t data = valid > begin ? std::min<std::size_t>(valid - begin, bytes) : 0;
      EXPECT_EQ(out[static_cast<std::size_t>(b)], block_crc(geometry, chunk, valid, b));
      EXPECT_EQ(out[static_cast<std::size_t>(b)], bitwise_crc(chunk + begin, data, bytes));
    }
  }
}

// A flipped bit shows as its block, and only its block, whatever path digested the block.
TEST_P(ChunkCrcs, AFlippedBitMismatchesItsBlockOnly) {
  const auto [chunk_bytes, valid] = GetParam();
  if (valid == 0) GTEST_SKIP() << "no data to flip";
  const auto geometry = StripeGeometry::plan(2, 1, chunk_bytes, 1);
  std::vector<std::byte> chunk(chunk_bytes);
  std::mt19937_64 random(valid);
  for (auto& byte : chunk)
    byte = static_cast<std::byte>(random());
  std::vector<std::uint32_t> want(static_cast<std::size_t>(geometry.blocks_per_chunk()));
  chunk_crcs(geometry, chunk.data(), valid, ~std::uint64_t{0}, want.data(),
             fastest_crc_route() == CrcRoute::isal ? CrcRoute::interleaved : CrcRoute::isal);
  EXPECT_EQ(mismatched_blocks(geometry, chunk.data(), valid, want.data()), 0u);
  for (const std::size_t at : {std::size_t{0}, std::size_t{valid} / 2, std::size_t{valid} - 1}) {
    chunk[at] ^= std::byte{0x10};
    EXPECT_EQ(mismatched_blocks(geometry, chunk.data(), valid, want.data()),
              std::uint64_t{1} << (at / geometry.block_bytes()))
        << "byte " << at;
    chunk[at] ^= std::byte{0x10};
  }
}

INSTANTIATE_TEST_SUITE_P(
    OddSizes, ChunkCrcs,
    ::testing::Values(Case{4096, 4096},          // 64 blocks of 64 bytes, all data
                      Case{4096, 4095},          // the last block one byte short of data
                      Case{4096, 1000},          // data ends inside block 15
                      Case{4096, 0},             // no data: every block as zeros
                      Case{4160, 4160},          // 33 blocks of 128 bytes, the last of 64
                      Case{4160, 3333},          // and the data ends mid-block
                      Case{262144, 262144},      // the default chunk: blocks of 4 KiB
                      Case{262144, 262144 - 8},  // ending one word short
                      Case{262144, 4096 * 7},    // seven whole blocks of data, then zeros
                      Case{1u << 20, 999999}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return "chunk" + std::to_string(info.param.chunk_bytes) + "_valid" +
             std::to_string(info.param.valid);
    });  // 16 KiB blocks

}  // namespace
}  // namespace skt::enc

namespace skt::enc {
namespace {

// Every block CRC of a member's items: its data chunks (the last one short) and its parity chunks.
struct MemberCrcs {
  std::vector<std::uint32_t> data, parity;
};

MemberCrcs crcs_of(const StripeGeometry& geometry, const Bytes& stream, const Bytes& parity) {
  const std::size_t chunk = geometry.chunk_bytes;
  const int blocks = geometry.blocks_per_chunk();
  MemberCrcs out;
  for (std::size_t at = 0; at < stream.size(); at += chunk) {
    const auto valid = static_cast<std::uint32_t>(std::min(chunk, stream.size() - at));
    for (int b = 0; b < blocks; ++b)
      out.data.push_back(block_crc(geometry, stream.data() + at, valid, b));
  }
  for (std::size_t at = 0; at < parity.size(); at += chunk) {
    for (int b = 0; b < blocks; ++b)
      out.parity.push_back(
          block_crc(geometry, parity.data() + at, static_cast<std::uint32_t>(chunk), b));
  }
  return out;
}

TEST(DeriveLostCrcs, OnlyWhereTheLostMemberIsTheXorOfTheOthers) {
  for (const int g : {2, 3, 4, 8}) {
    for (int target = 0; target < g; ++target) {
      EXPECT_TRUE(rebuilt_as_xor_of_the_others(*make_codec(Scheme::xor_parity, g, 1), target));
      EXPECT_EQ(rebuilt_as_xor_of_the_others(*make_codec(Scheme::reed_solomon, g, 1), target),
                g == 2)
          << "rs, G = " << g;
      EXPECT_FALSE(rebuilt_as_xor_of_the_others(*make_codec(Scheme::sum, g, 1), target));
    }
  }
}

TEST(DeriveLostCrcs, XorGivesEveryBlockCrcOfALostMemberFromTheOthers) {
  for (const int g : {2, 3, 4, 5}) {
    const std::size_t chunk = 4096;
    std::vector<Bytes> streams;
    std::vector<std::uint64_t> member_chunks;
    std::mt19937 rng(static_cast<unsigned>(g));
    for (int m = 0; m < g; ++m) {
      // Odd lengths, members of different chunk counts, one ending inside a block.
      Bytes stream(3 * chunk + 777 - static_cast<std::size_t>(m) * 1500);
      for (auto& byte : stream)
        byte = static_cast<std::byte>(rng());
      member_chunks.push_back((stream.size() + chunk - 1) / chunk);
      streams.push_back(std::move(stream));
    }
    const auto geometry = StripeGeometry::plan(
        g, 1, chunk, *std::max_element(member_chunks.begin(), member_chunks.end()));
    const auto codec = make_reference_codec(Scheme::xor_parity, g, 1);
    const auto parities = reference_encode(geometry, *codec, streams);
    std::vector<std::vector<std::uint32_t>> data, parity;
    for (int m = 0; m < g; ++m) {
      auto own = crcs_of(geometry, streams[static_cast<std::size_t>(m)],
                         parities[static_cast<std::size_t>(m)]);
      data.push_back(std::move(own.data));
      parity.push_back(std::move(own.parity));
    }
    for (int target = 0; target < g; ++target) {
      const auto t = static_cast<std::size_t>(target);
      std::vector<std::uint32_t> derived_data(data[t].size(), 0x5a5a5a5a);
      std::vector<std::uint32_t> derived_parity(parity[t].size(), 0x5a5a5a5a);
      auto others_data = data;
      auto others_parity = parity;
      others_data[t].assign(others_data[t].size(), 0);  // the lost member's are not read
      others_parity[t].assign(others_parity[t].size(), 0);
      derive_lost_crcs(geometry, member_chunks, target, others_data, others_parity,
                       Digests{derived_data.data(), derived_parity.data()});
      EXPECT_EQ(derived_data, data[t]) << "group " << g << ", member " << target << " lost";
      EXPECT_EQ(derived_parity, parity[t]) << "group " << g << ", member " << target << " lost";
    }
  }
}

}  // namespace
}  // namespace skt::enc
