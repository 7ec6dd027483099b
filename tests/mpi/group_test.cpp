// The MPI group operations against the single-process reference, bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/mpi.hpp"
#include "encoders/group.hpp"
#include "encoders/link.hpp"
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
// whole number of chunks; for sum, whole doubles of moderate range.
Bytes member_stream(int member, std::size_t base, unsigned seed, bool doubles) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<unsigned>(member));
  std::size_t size = base + static_cast<std::size_t>(member) * 1237u + (member % 3 == 0 ? 0 : 17);
  if (doubles) size -= size % sizeof(double);
  Bytes out(size);
  if (doubles) {
    std::uniform_real_distribution<double> value(-100.0, 100.0);
    for (std::size_t i = 0; i < size; i += sizeof(double)) {
      const double v = value(rng);
      std::memcpy(out.data() + i, &v, sizeof v);
    }
  } else {
    for (auto& b : out)
      b = static_cast<std::byte>(rng());
  }
  return out;
}

// Largest |a - b| over the doubles of two equal buffers, and the largest |a|.
std::pair<double, double> double_difference(const std::byte* a, const std::byte* b,
                                            std::size_t bytes) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i + sizeof(double) <= bytes; i += sizeof(double)) {
    double x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    worst = std::max(worst, std::fabs(x - y));
    scale = std::max(scale, std::fabs(x));
  }
  return {worst, scale};
}

ChunkList chunks_of(std::byte* data, std::size_t bytes, std::size_t chunk) {
  ChunkList list;
  for (std::size_t off = 0; off < bytes; off += chunk) {
    list.add(data + off, static_cast<std::uint32_t>(std::min(chunk, bytes - off)));
  }
  return list;
}

struct Case {
  Scheme scheme;
  int group_size;
  int parity;
  std::size_t chunk;
  std::size_t base;
  int depth;
};

std::string describe(const Case& c) {
  return std::string(scheme_name(c.scheme)) + " G=" + std::to_string(c.group_size) +
         " m=" + std::to_string(c.parity);
}

class GroupOps : public ::testing::TestWithParam<Case> {};

// Every combination of `count` members out of `g`, in a fixed order.
std::vector<std::vector<int>> combinations(int g, int count) {
  std::vector<std::vector<int>> out;
  std::vector<bool> pick(static_cast<std::size_t>(g), false);
  std::fill(pick.end() - count, pick.end(), true);
  do {
    std::vector<int> set;
    for (int i = 0; i < g; ++i) {
      if (pick[static_cast<std::size_t>(i)]) set.push_back(i);
    }
    out.push_back(set);
  } while (std::next_permutation(pick.begin(), pick.end()));
  return out;
}

TEST_P(GroupOps, EncodeIncrementalAndEveryLossPatternMatchTheReference) {
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
    streams.push_back(member_stream(m, c.base, 7, c.scheme == Scheme::sum));
    chunk_counts.push_back((streams.back().size() + c.chunk - 1) / c.chunk);
    longest = std::max(longest, chunk_counts.back());
  }
  const auto geometry = StripeGeometry::plan(c.group_size, c.parity, c.chunk, longest);
  const auto fast = make_codec(c.scheme, c.group_size, c.parity);
  const auto plain = make_reference_codec(c.scheme, c.group_size, c.parity);
  const auto expected = reference_encode(geometry, *plain, streams);

  const Bytes& original = streams[static_cast<std::size_t>(me)];
  Aligned mine(original.size());
  std::memcpy(mine.data, original.data(), original.size());
  Aligned parity(geometry.parity_bytes());
  PipelineOptions options;
  options.depth = c.depth;
  const ChunkList list = chunks_of(mine.data, original.size(), c.chunk);
  GroupLink link(group.get());
  const auto blocks = static_cast<std::size_t>(geometry.blocks_per_chunk());
  std::vector<std::uint32_t> data_crcs(list.size() * blocks, 0),
      parity_crcs(geometry.parity_chunks() * blocks, 0);
  const Digests digests{data_crcs.data(), parity_crcs.data()};
  encode_group(link, geometry, *fast, chunk_counts, list, parity.data, options, nullptr, &digests);
  // Non-fatal checks only: every rank must go on to the collective operations below.
  EXPECT_EQ(0, std::memcmp(parity.data, expected[static_cast<std::size_t>(me)].data(),
                           geometry.parity_bytes()))
      << describe(c) << ": member " << me << " parity differs from the reference";
  // The digests taken on the way are the CRCs of what was encoded and of what it gave.
  auto digests_match = [&](const char* when) {
    for (std::uint64_t j = 0; j < list.size(); ++j) {
      for (std::size_t b = 0; b < blocks; ++b) {
        EXPECT_EQ(data_crcs[j * blocks + b],
                  block_crc(geometry, list.data[j], list.bytes[j], static_cast<int>(b)))
            << describe(c) << " " << when << ": data chunk " << j << " block " << b;
      }
    }
    for (std::uint64_t p = 0; p < geometry.parity_chunks(); ++p) {
      for (std::size_t b = 0; b < blocks; ++b) {
        EXPECT_EQ(parity_crcs[p * blocks + b],
                  block_crc(geometry, parity.data + p * c.chunk,
                            static_cast<std::uint32_t>(c.chunk), static_cast<int>(b)))
            << describe(c) << " " << when << ": parity chunk " << p << " block " << b;
      }
    }
  };
  digests_match("full");

  // Incremental: members change a byte range here and there (member 0 none), and all of them
  // their last third (segments every member changed, encoded afresh, next to segments some
  // changed), every other chunk of it, the last included, in stripes a block apart (several fresh
  // segments in a row, which travel as one message, cut short where a stream ends); encoding only
  // the changed blocks must give the parity a full encoding gives.
  Aligned committed(geometry.parity_bytes());
  std::memcpy(committed.data, parity.data, geometry.parity_bytes());
  Aligned copy(original.size());
  std::memcpy(copy.data, original.data(), original.size());
  const ChunkList base = chunks_of(copy.data, original.size(), c.chunk);
  std::vector<Bytes> changed = streams;
  std::vector<std::uint64_t> changed_blocks;
  for (int m = 0; m < c.group_size; ++m) {
    std::mt19937 rng(static_cast<unsigned>(m) + 11u);
    auto& bytes = changed[static_cast<std::size_t>(m)];
    const std::uint64_t count = chunk_counts[static_cast<std::size_t>(m)];
    std::vector<std::uint64_t> masks(count, 0);
    for (std::uint64_t j = 0; j < count; ++j) {
      const std::size_t from = j * c.chunk, to = std::min(bytes.size(), from + c.chunk);
      std::vector<std::pair<std::size_t, std::size_t>> ranges{{from, to}};
      if (j < count * 2 / 3) {
        if (m == 0 ||
            j % (3 + static_cast<std::uint64_t>(m)) != static_cast<std::uint64_t>(m % 3)) {
          continue;
        }
        const std::size_t lo = from + rng() % (to - from);
        ranges = {{lo, lo + 1 + rng() % (to - lo)}};
      } else if ((count - 1 - j) % 2 == 0) {
        ranges.clear();
        const std::size_t block = geometry.block_bytes();
        for (std::size_t s = from; s < to; s += 3 * block)
          ranges.emplace_back(s, std::min(to, s + 2 * block));
      }
      for (const auto& [lo, hi] : ranges) {
        masks[j] |= geometry.block_mask(lo - from, hi - from);
        for (std::size_t i = lo; i < hi; i += 5)
          bytes[i] = static_cast<std::byte>(static_cast<unsigned>(bytes[i]) * 7u + 3u);
      }
    }
    if (m == me) changed_blocks = masks;
  }
  if (fast->exact()) {
    std::memcpy(mine.data, changed[static_cast<std::size_t>(me)].data(), original.size());
    const auto expected_changed = reference_encode(geometry, *plain, changed);
    const RowMasks rows = agree_row_masks(group.get(), geometry, list, changed_blocks);
    Incremental inc{&base, committed.data, &changed_blocks, &rows};
    encode_group(link, geometry, *fast, chunk_counts, list, parity.data, options, &inc, &digests);
    EXPECT_EQ(0, std::memcmp(parity.data, expected_changed[static_cast<std::size_t>(me)].data(),
                             geometry.parity_bytes()))
        << describe(c) << ": incremental parity of member " << me << " differs from full";
    // Only the changed blocks were read and written, and only their CRCs taken again: the others
    // kept theirs, which still hold.
    digests_match("incremental");
    std::memcpy(mine.data, original.data(), original.size());
    std::memcpy(parity.data, expected[static_cast<std::size_t>(me)].data(),
                geometry.parity_bytes());
  }

  // Where a lost member is the XOR of the others (xor; rs with G = 2), its CRCs come from the
  // survivors' (RebuildHooks::digests): every member's CRCs of the original first.
  for (std::uint64_t j = 0; j < list.size(); ++j) {
    for (std::size_t b = 0; b < blocks; ++b)
      data_crcs[j * blocks + b] =
          block_crc(geometry, list.data[j], list.bytes[j], static_cast<int>(b));
  }
  for (std::uint64_t p = 0; p < geometry.parity_chunks(); ++p) {
    for (std::size_t b = 0; b < blocks; ++b)
      parity_crcs[p * blocks + b] =
          block_crc(geometry, parity.data + p * c.chunk, static_cast<std::uint32_t>(c.chunk),
                    static_cast<int>(b));
  }
  RebuildHooks hooks;
  hooks.digests = &digests;
  for (int count = 1; count <= fast->parity(); ++count) {
    for (const auto& lost : combinations(c.group_size, count)) {
      const bool i_am_lost = std::binary_search(lost.begin(), lost.end(), me);
      const bool derive = count == 1 && rebuilt_as_xor_of_the_others(*fast, lost.front());
      if (i_am_lost) {
        std::memset(mine.data, 0xA5, original.size());
        std::memset(parity.data, 0x5A, geometry.parity_bytes());
        std::fill(data_crcs.begin(), data_crcs.end(), 0x5a5a5a5au);
        std::fill(parity_crcs.begin(), parity_crcs.end(), 0x5a5a5a5au);
      }
      rebuild_group(link, geometry, *fast, chunk_counts, lost, {}, list, parity.data, options,
                    derive ? &hooks : nullptr);
      if (i_am_lost && fast->exact()) {
        EXPECT_EQ(0, std::memcmp(mine.data, original.data(), original.size()))
            << describe(c) << ": data of member " << me << " not rebuilt bit for bit";
        EXPECT_EQ(0, std::memcmp(parity.data, expected[static_cast<std::size_t>(me)].data(),
                                 geometry.parity_bytes()))
            << describe(c) << ": parity of member " << me << " not rebuilt bit for bit";
        if (derive) digests_match("rebuilt, its CRCs derived from the survivors'");
      }
      if (i_am_lost && !fast->exact()) {
        // Sum rebuilds within its bound: values are below 100 in magnitude, so each row's sum of
        // magnitudes is below 100·(G-1).
        const double bound = sum_rebuild_bound(c.group_size, 100.0 * (c.group_size - 1));
        const auto [worst, scale] = double_difference(mine.data, original.data(), original.size());
        EXPECT_LE(worst, bound) << describe(c) << ": member " << me << " rebuilt beyond the bound";
        EXPECT_GT(scale, 1.0);
        std::memcpy(mine.data, original.data(), original.size());
        std::memcpy(parity.data, expected[static_cast<std::size_t>(me)].data(),
                    geometry.parity_bytes());
      }
    }
  }
}

// Scattered damage: in a few rows, up to m items (data or parity, of any members) are gone; each
// is rebuilt by its member from the rest of its row, bit for bit.
TEST_P(GroupOps, ScatteredItemsAreRepairedRowByRow) {
  const Case c = GetParam();
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const bool inside = world_rank < c.group_size;
  Comm group = Comm::split(MPI_COMM_WORLD, inside ? 0 : MPI_UNDEFINED, world_rank);
  if (!inside) return;
  const int me = group.rank();
  std::vector<Bytes> streams;
  std::vector<std::uint64_t> chunk_counts;
  std::uint64_t longest = 0;
  for (int m = 0; m < c.group_size; ++m) {
    streams.push_back(member_stream(m, c.base, 5, c.scheme == Scheme::sum));
    chunk_counts.push_back((streams.back().size() + c.chunk - 1) / c.chunk);
    longest = std::max(longest, chunk_counts.back());
  }
  const auto geometry = StripeGeometry::plan(c.group_size, c.parity, c.chunk, longest);
  const auto fast = make_codec(c.scheme, c.group_size, c.parity);
  const auto expected =
      reference_encode(geometry, *make_reference_codec(c.scheme, c.group_size, c.parity), streams);
  const Bytes& original = streams[static_cast<std::size_t>(me)];
  Aligned mine(original.size());
  std::memcpy(mine.data, original.data(), original.size());
  Aligned parity(geometry.parity_bytes());
  std::memcpy(parity.data, expected[static_cast<std::size_t>(me)].data(), geometry.parity_bytes());
  const ChunkList list = chunks_of(mine.data, original.size(), c.chunk);

  // Every third row loses the items of up to m members, starting at a member that moves on.
  std::vector<RowRepair> repairs;
  for (std::uint64_t row = 1; row < geometry.rows; row += 3) {
    RowRepair r{row, {}};
    for (int k = 0; k < fast->parity(); ++k)
      r.erased.push_back(static_cast<int>((row + static_cast<std::uint64_t>(k) * 2) %
                                          static_cast<std::uint64_t>(c.group_size)));
    std::sort(r.erased.begin(), r.erased.end());
    r.erased.erase(std::unique(r.erased.begin(), r.erased.end()), r.erased.end());
    repairs.push_back(r);
    if (!std::binary_search(r.erased.begin(), r.erased.end(), me)) continue;
    if (const auto p = geometry.parity_index(me, row)) {
      std::memset(parity.data + *p * c.chunk, 0x77, c.chunk);
    } else if (const auto j = geometry.chunk_of_row(me, row); *j < list.size()) {
      std::memset(list.data[*j], 0x66, list.bytes[*j]);
    }
  }
  GroupLink link(group.get());
  repair_rows(link, geometry, *fast, chunk_counts, repairs, list, parity.data,
              {c.depth, {}, nullptr});
  if (fast->exact()) {
    EXPECT_EQ(0, std::memcmp(mine.data, original.data(), original.size()))
        << describe(c) << ": data of member " << me << " not repaired bit for bit";
    EXPECT_EQ(0, std::memcmp(parity.data, expected[static_cast<std::size_t>(me)].data(),
                             geometry.parity_bytes()))
        << describe(c) << ": parity of member " << me << " not repaired bit for bit";
  } else {
    const double bound = sum_rebuild_bound(c.group_size, 100.0 * (c.group_size - 1));
    const auto [worst, scale] = double_difference(mine.data, original.data(), original.size());
    EXPECT_LE(worst, bound) << describe(c) << ": member " << me << " repaired beyond the bound";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupOps,
                         ::testing::Values(Case{Scheme::xor_parity, 2, 1, 4096, 10000, 4},
                                           Case{Scheme::xor_parity, 3, 1, 4096, 20000, 1},
                                           Case{Scheme::xor_parity, 4, 1, 8192, 50000, 2},
                                           Case{Scheme::xor_parity, 4, 1, 4096, 100, 4},
                                           Case{Scheme::xor_parity, 5, 1, 4096, 30001, 3},
                                           Case{Scheme::xor_parity, 8, 1, 4096, 40000, 4},
                                           Case{Scheme::xor_parity, 8, 1, 65536, 300000, 8},
                                           Case{Scheme::reed_solomon, 2, 1, 4096, 9000, 2},
                                           Case{Scheme::reed_solomon, 3, 2, 4096, 9000, 1},
                                           Case{Scheme::reed_solomon, 4, 2, 4096, 20000, 4},
                                           Case{Scheme::reed_solomon, 5, 3, 4096, 15000, 2},
                                           Case{Scheme::reed_solomon, 6, 2, 4096, 15000, 3},
                                           Case{Scheme::reed_solomon, 7, 3, 4096, 15000, 4},
                                           Case{Scheme::reed_solomon, 8, 3, 4096, 12000, 4},
                                           Case{Scheme::sum, 4, 1, 4096, 16000, 4}));

// A member that fails in the middle of an operation makes every other member leave it too, with
// an exception, instead of leaving them waiting: encoding, rebuilding and repairing alike.
TEST(GroupAbort, AFailingMemberEndsTheOperationOnEveryMember) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const int g = std::min(world_size, 4);
  const bool inside = world_rank < g;
  for (int operation = 0; operation < 3; ++operation) {
    for (int failing = 0; failing < g; ++failing) {
      Comm group = Comm::split(MPI_COMM_WORLD, inside ? 0 : MPI_UNDEFINED, world_rank);
      if (!inside) continue;
      const int me = group.rank();
      const std::size_t chunk = 4096;
      const Bytes original = member_stream(me, 64 * chunk, 3, false);
      Aligned mine(original.size());
      std::copy(original.begin(), original.end(), mine.data);
      const ChunkList list = chunks_of(mine.data, original.size(), chunk);
      std::vector<std::uint64_t> counts(static_cast<std::size_t>(g));
      for (int m = 0; m < g; ++m)
        counts[static_cast<std::size_t>(m)] =
            (member_stream(m, 64 * chunk, 3, false).size() + chunk - 1) / chunk;
      const auto geometry =
          StripeGeometry::plan(g, 1, chunk, *std::max_element(counts.begin(), counts.end()));
      const auto codec = make_codec(Scheme::xor_parity, g, 1);
      Aligned parity(geometry.parity_bytes());
      ScratchPool pool;
      PipelineOptions options{2, {}, &pool};
      if (me == failing) {
        options.progress = [](std::uint64_t done, std::uint64_t total) {
          if (2 * done >= total) throw std::runtime_error("injected");
        };
      }
      std::string outcome = "completed";
      try {
        GroupLink link(group.get());
        if (operation == 0) {
          encode_group(link, geometry, *codec, counts, list, parity.data, options);
        } else if (operation == 1) {
          const std::vector<int> lost{(failing + 1) % g};
          rebuild_group(link, geometry, *codec, counts, lost, {}, list, parity.data, options);
        } else {
          std::vector<RowRepair> rows;
          for (std::uint64_t row = 0; row < geometry.rows; ++row)
            rows.push_back({row, {static_cast<int>(row % static_cast<std::uint64_t>(g))}});
          repair_rows(link, geometry, *codec, counts, rows, list, parity.data, options);
        }
      } catch (const MemberAborted&) {
        outcome = "aborted";
      } catch (const std::runtime_error&) {
        outcome = "failed";
        GroupLink::abort_members(group.get());
      }
      // Nobody hangs. In an encoding every member waits for the failing one's data of the second
      // half, so every member leaves with an exception; in a rebuild, the member being rebuilt
      // does. (A member that got all it needed before the failure may finish its part.)
      if (me == failing) {
        EXPECT_EQ(outcome, "failed") << "operation " << operation << ", member " << failing;
      } else if (operation == 0 || (operation == 1 && me == (failing + 1) % g)) {
        EXPECT_EQ(outcome, "aborted")
            << "operation " << operation << ", failing member " << failing << ", member " << me;
      }
      MPI_Barrier(group.get());
    }
  }
}

}  // namespace
}  // namespace skt::enc
