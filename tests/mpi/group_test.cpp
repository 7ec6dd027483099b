// The MPI group operations against the single-process reference, bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <random>
#include <vector>

#include "encoders/group.hpp"
#include "encoders/mpi_util.hpp"
#include "encoders/reference.hpp"

namespace skt::enc {
namespace {

struct Aligned {
  explicit Aligned(std::size_t bytes) : storage(bytes + 64) {
    auto p = reinterpret_cast<std::uintptr_t>(storage.data());
    data = storage.data() + ((64 - p % 64) % 64);
  }
  std::vector<std::byte> storage;
  std::byte* data;
};

// Member m's stream: deterministic, of a length that differs between members and is rarely a
// whole number of chunks.
Bytes member_stream(int member, std::size_t base, unsigned seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<unsigned>(member));
  Bytes out(base + static_cast<std::size_t>(member) * 1237u + (member % 3 == 0 ? 0 : 17));
  for (auto& b : out)
    b = static_cast<std::byte>(rng());
  return out;
}

ChunkList chunks_of(std::byte* data, std::size_t bytes, std::size_t chunk) {
  ChunkList list;
  for (std::size_t off = 0; off < bytes; off += chunk) {
    list.add(data + off, static_cast<std::uint32_t>(std::min(chunk, bytes - off)));
  }
  return list;
}

struct Case {
  int group_size;
  std::size_t chunk;
  std::size_t base;
  int depth;
};

class GroupOps : public ::testing::TestWithParam<Case> {};

TEST_P(GroupOps, EncodeMatchesReferenceAndEveryLossRebuilds) {
  const Case c = GetParam();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  ASSERT_LE(c.group_size, world_size);
  const bool inside = world_rank < c.group_size;
  Comm group = Comm::split(MPI_COMM_WORLD, inside ? 0 : MPI_UNDEFINED, world_rank);
  if (!inside) return;
  const int me = group.rank();

  std::vector<Bytes> streams;
  std::vector<std::uint64_t> chunk_counts;
  std::uint64_t longest = 0;
  for (int m = 0; m < c.group_size; ++m) {
    streams.push_back(member_stream(m, c.base, 7));
    chunk_counts.push_back((streams.back().size() + c.chunk - 1) / c.chunk);
    longest = std::max(longest, chunk_counts.back());
  }
  const auto geometry = StripeGeometry::plan(c.group_size, 1, c.chunk, longest);
  const auto fast = make_codec(Scheme::xor_parity, c.group_size, 1);
  const auto plain = make_reference_codec(Scheme::xor_parity, c.group_size, 1);
  const auto expected = reference_encode(geometry, *plain, streams);

  const Bytes& original = streams[static_cast<std::size_t>(me)];
  Aligned mine(original.size());
  std::memcpy(mine.data, original.data(), original.size());
  Aligned parity(geometry.parity_bytes());
  PipelineOptions options;
  options.depth = c.depth;
  const ChunkList list = chunks_of(mine.data, original.size(), c.chunk);
  encode_group(group.get(), geometry, *fast, list, parity.data, options);
  // Non-fatal checks only: every rank must go on to the collective rebuilds below.
  EXPECT_EQ(0, std::memcmp(parity.data, expected[static_cast<std::size_t>(me)].data(),
                           geometry.parity_bytes()))
      << "member " << me << " parity differs from the reference";

  for (int lost = 0; lost < c.group_size; ++lost) {
    const bool i_am_lost = me == lost;
    if (i_am_lost) {
      std::memset(mine.data, 0xA5, original.size());
      std::memset(parity.data, 0x5A, geometry.parity_bytes());
    }
    const std::vector<int> lost_set{lost};
    rebuild_group(group.get(), geometry, *fast, chunk_counts, lost_set, list, parity.data, options);
    if (i_am_lost) {
      EXPECT_EQ(0, std::memcmp(mine.data, original.data(), original.size()))
          << "data of member " << lost << " not rebuilt bit for bit";
      EXPECT_EQ(0, std::memcmp(parity.data, expected[static_cast<std::size_t>(me)].data(),
                               geometry.parity_bytes()))
          << "parity of member " << lost << " not rebuilt bit for bit";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GroupOps,
                         ::testing::Values(Case{2, 4096, 10000, 4}, Case{3, 4096, 20000, 1},
                                           Case{4, 8192, 50000, 2}, Case{4, 4096, 100, 4},
                                           Case{5, 4096, 30001, 3}, Case{8, 4096, 40000, 4},
                                           Case{8, 65536, 300000, 8}));

}  // namespace
}  // namespace skt::enc
