#include "libselfckpt/internal/scrub.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "encoders/reference.hpp"
#include "libselfckpt/src/config.hpp"

namespace skt {
namespace {

MemberStatus member(int rank, std::uint32_t index, std::int64_t committed) {
  MemberStatus m;
  m.rank = rank;
  m.info.group_size = 3;
  m.info.parity = 1;
  m.info.member = index;
  m.info.rows = 6;
  m.info.chunk_bytes = 64;
  m.info.mode = static_cast<std::uint32_t>(Mode::self);
  m.info.members[0] = 0;
  m.info.members[1] = 4;
  m.info.members[2] = 8;
  m.state = ControlState{committed, committed, committed, committed};
  return m;
}

TEST(Scrub, GroupMustBeWholeConsistentAndBetweenCheckpoints) {
  std::uint64_t epoch = 0;
  std::vector<MemberStatus> group{member(0, 0, 2), member(4, 1, 2), member(8, 2, 2)};
  EXPECT_FALSE(scrub_obstacle(group, &epoch));
  EXPECT_EQ(epoch, 2u);

  auto missing = group;
  missing.pop_back();
  EXPECT_NE(scrub_obstacle(missing, &epoch)->find("rank(s) 8 were not found"), std::string::npos);

  auto fresh = group;
  for (auto& m : fresh)
    m.state = ControlState{};
  EXPECT_NE(scrub_obstacle(fresh, &epoch)->find("no checkpoint"), std::string::npos);

  auto committing = group;
  committing[1].state->committed = 3;
  EXPECT_NE(scrub_obstacle(committing, &epoch)->find("being committed"), std::string::npos);

  auto flushing = group;
  flushing[2].state->agreed = 3;  // B is being overwritten with epoch 3
  EXPECT_NE(scrub_obstacle(flushing, &epoch)->find("rank 8 is writing epoch 3"), std::string::npos);

  // The state CI caught: rank 4 already committed epoch 3 while rank 8 is still flushing it.
  // The flush is the reason to name, whichever member the scan meets first.
  auto flushing_after_commit = flushing;
  flushing_after_commit[1].state = ControlState{3, 3, 3, 3};
  EXPECT_NE(scrub_obstacle(flushing_after_commit, &epoch)->find("rank 8 is writing epoch 3"),
            std::string::npos);

  auto encoding = group;
  encoding[2].state->encoded = 3;  // only D is being written: B and C still agree
  EXPECT_FALSE(scrub_obstacle(encoding, &epoch));

  auto disagreeing = group;
  disagreeing[1].info.rows = 9;
  EXPECT_NE(scrub_obstacle(disagreeing, &epoch)->find("disagree"), std::string::npos);

  auto twice = group;
  twice[2] = member(8, 1, 2);
  EXPECT_TRUE(scrub_obstacle(twice, &epoch));

  auto unreadable = group;
  unreadable[0].state.reset();
  EXPECT_NE(scrub_obstacle(unreadable, &epoch)->find("unreadable"), std::string::npos);
}

// Every row of a reference encoding checks clean; a flipped bit in one member's data is found in
// exactly the checksum chunks of its row, at its byte.
TEST(Scrub, CheckRowFindsExactlyTheFlippedByte) {
  for (const auto& [scheme, parity] :
       {std::pair{enc::Scheme::xor_parity, 1}, std::pair{enc::Scheme::reed_solomon, 2},
        std::pair{enc::Scheme::sum, 1}}) {
    const int size = 4;
    const std::size_t chunk = 256;
    const auto geometry = enc::StripeGeometry::plan(size, parity, chunk, 5);
    const auto codec = enc::make_codec(scheme, size, parity);
    std::mt19937_64 random(7);
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    std::vector<enc::Bytes> streams(size, enc::Bytes(5 * chunk));
    for (auto& s : streams) {
      for (std::size_t i = 0; i < s.size(); i += sizeof(double)) {
        const double v = value(random);
        std::memcpy(s.data() + i, &v, sizeof v);
      }
    }
    const auto parities = enc::reference_encode(geometry, *codec, streams);
    auto scan = [&](const std::vector<enc::Bytes>& data) {
      std::vector<RowMismatch> found;
      std::vector<std::byte> scratch(chunk);
      const enc::Bytes zeros(chunk);
      for (std::uint64_t row = 0; row < geometry.rows; ++row) {
        std::vector<const std::byte*> sources(static_cast<std::size_t>(size - parity));
        for (int j = 0; j < size; ++j) {
          const int position = geometry.data_position(j, row);
          if (position < 0) continue;
          const std::uint64_t c = *geometry.chunk_of_row(j, row);
          sources[static_cast<std::size_t>(position)] =
              c < 5 ? data[static_cast<std::size_t>(j)].data() + c * chunk : zeros.data();
        }
        for (int slot = 0; slot < parity; ++slot) {
          const int holder = geometry.holder(row, slot);
          const std::byte* stored = parities[static_cast<std::size_t>(holder)].data() +
                                    *geometry.parity_index(holder, row) * chunk;
          if (auto m = check_row(*codec, row, slot, sources, stored, chunk, scratch.data())) {
            found.push_back(*m);
          }
        }
      }
      return found;
    };
    EXPECT_TRUE(scan(streams).empty()) << enc::scheme_name(scheme);

    auto damaged = streams;
    const std::uint64_t chunk_index = 3;
    const std::size_t byte = 77;
    damaged[2][chunk_index * chunk + byte] ^= std::byte{0x04};
    const auto found = scan(damaged);
    ASSERT_EQ(found.size(), static_cast<std::size_t>(parity)) << enc::scheme_name(scheme);
    for (const auto& m : found) {
      EXPECT_EQ(m.row, geometry.row_of_chunk(2, chunk_index));
      // sum compares whole doubles: the flipped byte's double.
      EXPECT_LE(m.first, byte);
      EXPECT_GE(m.last, byte + 1);
      EXPECT_LE(m.last - m.first, scheme == enc::Scheme::sum ? 8u : 1u);
    }
  }
}

}  // namespace
}  // namespace skt
