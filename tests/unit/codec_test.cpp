#include "encoders/codec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "encoders/reference.hpp"

namespace skt::enc {
namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v)
    b = static_cast<std::byte>(rng());
  return v;
}

TEST(XorCodec, FastMatchesReferenceOnOddSizesAndOffsets) {
  const auto fast = make_codec(Scheme::xor_parity, 4, 1);
  const auto plain = make_reference_codec(Scheme::xor_parity, 4, 1);
  for (const std::size_t size : {1u, 31u, 32u, 33u, 63u, 64u, 65u, 4095u, 4096u, 100003u}) {
    for (const std::size_t offset : {0u, 1u, 7u, 32u}) {
      auto a = random_bytes(size + 64, static_cast<unsigned>(size));
      auto b = random_bytes(size + 64, static_cast<unsigned>(size + 1));
      std::vector<std::byte> out_fast(size + 64), out_plain(size + 64);
      fast->combine(out_fast.data() + offset, a.data() + offset, b.data() + offset, size, 1);
      plain->combine(out_plain.data() + offset, a.data() + offset, b.data() + offset, size, 1);
      ASSERT_TRUE(std::equal(out_fast.begin(), out_fast.end(), out_plain.begin()))
          << "size " << size << " offset " << offset;
      for (std::size_t i = 0; i < size; ++i) {
        ASSERT_EQ(out_plain[offset + i], a[offset + i] ^ b[offset + i]);
      }
    }
  }
}

TEST(XorCodec, RefusesImpossibleShapesAndSecondLoss) {
  EXPECT_THROW(make_codec(Scheme::xor_parity, 1, 1), std::invalid_argument);
  EXPECT_THROW(make_codec(Scheme::xor_parity, 4, 2), std::invalid_argument);
  const auto codec = make_codec(Scheme::xor_parity, 4, 1);
  const std::vector<int> two{1, 2};
  EXPECT_THROW(codec->rebuild_coefs(0, two, 1), std::invalid_argument);
  const std::vector<int> one{2};
  const auto coefs = codec->rebuild_coefs(3, one, 2);
  EXPECT_EQ(coefs, (std::vector<Coef>{1, 1, 0, 1}));
}

TEST(Reference, RebuildsEveryLostMemberFromTheOthers) {
  for (const int g : {2, 3, 5, 8}) {
    const std::size_t chunk = 64;
    std::vector<Bytes> streams;
    std::uint64_t longest = 0;
    for (int m = 0; m < g; ++m) {
      streams.push_back(
          random_bytes(500 + 37 * static_cast<std::size_t>(m), static_cast<unsigned>(m)));
      longest = std::max<std::uint64_t>(longest, (streams.back().size() + chunk - 1) / chunk);
    }
    const auto geo = StripeGeometry::plan(g, 1, chunk, longest);
    const auto codec = make_reference_codec(Scheme::xor_parity, g, 1);
    const auto parities = reference_encode(geo, *codec, streams);
    for (int lost = 0; lost < g; ++lost) {
      auto s = streams;
      auto p = parities;
      std::fill(s[static_cast<std::size_t>(lost)].begin(), s[static_cast<std::size_t>(lost)].end(),
                std::byte{0x77});
      std::fill(p[static_cast<std::size_t>(lost)].begin(), p[static_cast<std::size_t>(lost)].end(),
                std::byte{0x77});
      const std::vector<int> lost_set{lost};
      reference_rebuild(geo, *codec, lost_set, s, p);
      EXPECT_EQ(s, streams) << "group " << g << " lost " << lost;
      EXPECT_EQ(p, parities) << "group " << g << " lost " << lost;
    }
  }
}

TEST(Schemes, NamesRoundTrip) {
  for (const auto s : {Scheme::xor_parity, Scheme::sum, Scheme::reed_solomon}) {
    EXPECT_EQ(parse_scheme(scheme_name(s)), s);
  }
  EXPECT_FALSE(parse_scheme("raid5").has_value());
}

}  // namespace
}  // namespace skt::enc
