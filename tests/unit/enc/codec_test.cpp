#include "encoders/codec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

std::vector<std::byte> random_doubles(std::size_t count, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<std::byte> v(count * sizeof(double));
  for (std::size_t i = 0; i < count; ++i) {
    const double x = std::ldexp(value(rng), exponent(rng));
    std::memcpy(v.data() + i * sizeof(double), &x, sizeof x);
  }
  return v;
}

struct KernelCase {
  Scheme scheme;
  int group_size;
  int parity;
};

class FastMatchesReference : public ::testing::TestWithParam<KernelCase> {};

TEST_P(FastMatchesReference, OnOddSizesAndUnalignedTails) {
  const auto [scheme, g, m] = GetParam();
  const auto fast = make_codec(scheme, g, m);
  const auto plain = make_reference_codec(scheme, g, m);
  const std::size_t unit = fast->granule();
  for (const std::size_t count : {1u, 3u, 4u, 7u, 8u, 9u, 31u, 64u, 65u, 511u, 12345u}) {
    const std::size_t size = count * unit;
    for (const std::size_t offset : std::vector<std::size_t>{0, unit, 3 * unit, 32}) {
      const bool doubles = scheme == Scheme::sum;
      const auto a = doubles ? random_doubles(count + 8, static_cast<unsigned>(count))
                             : random_bytes(size + 64, static_cast<unsigned>(size));
      const auto b = doubles ? random_doubles(count + 8, static_cast<unsigned>(count + 1))
                             : random_bytes(size + 64, static_cast<unsigned>(size + 1));
      const auto c = random_bytes(size + 64, static_cast<unsigned>(size + 2));
      for (const Coef coef : std::vector<Coef>{Codec::identity, doubles ? kMinusOne : Coef{0x8e},
                                               doubles ? Codec::identity : Coef{0xfd}}) {
        std::vector<std::byte> f(size + 64), r(size + 64);
        fast->combine(f.data() + offset, a.data() + offset, b.data() + offset, size, coef);
        plain->combine(r.data() + offset, a.data() + offset, b.data() + offset, size, coef);
        ASSERT_EQ(f, r) << "combine, " << size << " bytes at offset " << offset;
        fast->scale(f.data() + offset, b.data() + offset, size, coef);
        plain->scale(r.data() + offset, b.data() + offset, size, coef);
        ASSERT_EQ(f, r) << "scale, " << size << " bytes at offset " << offset;
        if (fast->exact()) {
          fast->combine_delta(f.data() + offset, a.data() + offset, b.data() + offset,
                              c.data() + offset, size, coef);
          plain->combine_delta(r.data() + offset, a.data() + offset, b.data() + offset,
                               c.data() + offset, size, coef);
          ASSERT_EQ(f, r) << "combine_delta, " << size << " bytes at offset " << offset;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, FastMatchesReference,
                         ::testing::Values(KernelCase{Scheme::xor_parity, 4, 1},
                                           KernelCase{Scheme::sum, 4, 1},
                                           KernelCase{Scheme::reed_solomon, 5, 2},
                                           KernelCase{Scheme::reed_solomon, 16, 3}));

TEST(Codecs, RefuseImpossibleShapesAndTooManyLosses) {
  EXPECT_THROW(make_codec(Scheme::xor_parity, 1, 1), std::invalid_argument);
  EXPECT_THROW(make_codec(Scheme::xor_parity, 4, 2), std::invalid_argument);
  EXPECT_THROW(make_codec(Scheme::sum, 4, 2), std::invalid_argument);
  EXPECT_THROW(make_codec(Scheme::reed_solomon, 3, 3), std::invalid_argument);
  const auto x = make_codec(Scheme::xor_parity, 4, 1);
  const std::vector<int> two{1, 2};
  EXPECT_THROW(x->rebuild_coefs(0, two, 1), std::invalid_argument);
  const std::vector<int> one{2};
  EXPECT_EQ(x->rebuild_coefs(3, one, 2), (std::vector<Coef>{1, 1, 0, 1}));
  const auto rs = make_codec(Scheme::reed_solomon, 6, 2);
  const std::vector<int> three{0, 1, 2};
  EXPECT_THROW(rs->rebuild_coefs(0, three, 0), std::invalid_argument);
  const auto sum = make_codec(Scheme::sum, 4, 1);
  std::vector<std::byte> buffer(16);
  EXPECT_THROW(sum->combine(buffer.data(), buffer.data(), buffer.data(), 12, 1),
               std::invalid_argument);
}

// Encodes whole groups with the reference codec, then loses every combination of up to m members
// (and one more, which must be refused), for G = 2..8 and m = 1..3.
TEST(Reference, EveryLossPatternUpToTheToleranceRebuildsBitForBit) {
  for (const Scheme scheme : {Scheme::xor_parity, Scheme::reed_solomon}) {
    for (int g = 2; g <= 8; ++g) {
      for (int m = 1; m <= std::min(3, g - 1); ++m) {
        if (scheme == Scheme::xor_parity && m > 1) continue;
        const std::size_t chunk = 64;
        std::vector<Bytes> streams;
        std::uint64_t longest = 0;
        for (int member = 0; member < g; ++member) {
          streams.push_back(random_bytes(300 + 41 * static_cast<std::size_t>(member),
                                         static_cast<unsigned>(g * 100 + m * 10 + member)));
          longest = std::max<std::uint64_t>(longest, (streams.back().size() + chunk - 1) / chunk);
        }
        const auto geo = StripeGeometry::plan(g, m, chunk, longest);
        const auto codec = make_reference_codec(scheme, g, m);
        const auto parities = reference_encode(geo, *codec, streams);
        for (int lost_count = 1; lost_count <= m; ++lost_count) {
          std::vector<bool> pick(static_cast<std::size_t>(g), false);
          std::fill(pick.end() - lost_count, pick.end(), true);
          do {
            std::vector<int> lost;
            for (int i = 0; i < g; ++i) {
              if (pick[static_cast<std::size_t>(i)]) lost.push_back(i);
            }
            auto s = streams;
            auto p = parities;
            for (const int l : lost) {
              std::fill(s[static_cast<std::size_t>(l)].begin(),
                        s[static_cast<std::size_t>(l)].end(), std::byte{0x77});
              std::fill(p[static_cast<std::size_t>(l)].begin(),
                        p[static_cast<std::size_t>(l)].end(), std::byte{0x77});
            }
            reference_rebuild(geo, *codec, lost, s, p);
            ASSERT_EQ(s, streams) << scheme_name(scheme) << " G=" << g << " m=" << m;
            ASSERT_EQ(p, parities) << scheme_name(scheme) << " G=" << g << " m=" << m;
          } while (std::next_permutation(pick.begin(), pick.end()));
        }
        std::vector<int> too_many(static_cast<std::size_t>(std::min(g, m + 1)));
        for (std::size_t i = 0; i < too_many.size(); ++i)
          too_many[i] = static_cast<int>(i);
        if (static_cast<int>(too_many.size()) > m) {
          EXPECT_THROW(codec->rebuild_coefs(0, too_many, 0), std::invalid_argument);
        }
      }
    }
  }
}

TEST(Sum, RebuiltValuesStayWithinTheDocumentedBound) {
  for (const int g : {2, 3, 4, 8, 16}) {
    const std::size_t chunk = 512;
    std::vector<Bytes> streams;
    for (int member = 0; member < g; ++member) {
      streams.push_back(random_doubles(700, static_cast<unsigned>(g * 31 + member)));
    }
    const auto geo = StripeGeometry::plan(g, 1, chunk, (streams[0].size() + chunk - 1) / chunk);
    const auto codec = make_codec(Scheme::sum, g, 1);
    const auto parities = reference_encode(geo, *codec, streams);
    double worst_ratio = 0;
    for (int lost = 0; lost < g; ++lost) {
      auto s = streams;
      auto p = parities;
      std::fill(s[static_cast<std::size_t>(lost)].begin(), s[static_cast<std::size_t>(lost)].end(),
                std::byte{0});
      const std::vector<int> lost_set{lost};
      reference_rebuild(geo, *codec, lost_set, s, p);
      const std::size_t values = streams[0].size() / sizeof(double);
      for (std::size_t i = 0; i < values; ++i) {
        const std::uint64_t chunk_index = i * sizeof(double) / chunk;
        const std::uint64_t row = geo.row_of_chunk(lost, chunk_index);
        const std::size_t within = i * sizeof(double) % chunk;
        double abs_sum = 0;
        for (int member = 0; member < g; ++member) {
          const auto position = geo.chunk_of_row(member, row);
          const auto& stream = streams[static_cast<std::size_t>(member)];
          // A shorter stream contributes zeros past its end.
          if (!position || *position * chunk + within + sizeof(double) > stream.size()) continue;
          double v;
          std::memcpy(&v, stream.data() + *position * chunk + within, sizeof v);
          abs_sum += std::fabs(v);
        }
        double truth, rebuilt;
        std::memcpy(&truth, streams[static_cast<std::size_t>(lost)].data() + i * sizeof(double),
                    sizeof truth);
        std::memcpy(&rebuilt, s[static_cast<std::size_t>(lost)].data() + i * sizeof(double),
                    sizeof rebuilt);
        const double bound = sum_rebuild_bound(g, abs_sum);
        ASSERT_LE(std::fabs(rebuilt - truth), bound) << "G=" << g << " value " << i;
        if (bound > 0) worst_ratio = std::max(worst_ratio, std::fabs(rebuilt - truth) / bound);
      }
    }
    if (g > 2) {
      EXPECT_GT(worst_ratio, 0.0) << "the rebuild was exact: the bound went untested";
    }
  }
}

TEST(Reference, XorRebuildsEveryLostMemberFromTheOthers) {
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
