// Recovery through the library within one mpirun: a "relaunch" is a new context on the same job
// tag; a lost node is a rank whose segments were removed and whose SKT_NODE changed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "libselfckpt/src/segment.hpp"
#include "selfckpt/selfckpt.hpp"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string shared_tag(const char* prefix) {
  static int counter = 0;
  int stamp = static_cast<int>(MPI_Wtime() * 1000) % 100000;
  MPI_Bcast(&stamp, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return fmt::format("{}-{}-{}", prefix, stamp, ++counter);
}

std::uint8_t pattern(int rank, int version, std::size_t i) {
  return static_cast<std::uint8_t>((i * 2654435761u) ^ (static_cast<unsigned>(rank) << 4) ^
                                   static_cast<unsigned>(version * 77));
}

struct Program {
  skt::Context ctx;
  skt::Region<std::uint8_t> a, b;
  long counter = 0;

  explicit Program(int rank)
      : ctx(MPI_COMM_WORLD),
        a(ctx.alloc<std::uint8_t>("a", 70000 + 333 * static_cast<std::size_t>(rank))),
        b(ctx.alloc<std::uint8_t>("b", 5000 + 7 * static_cast<std::size_t>(rank))) {
    ctx.protect("counter", counter);
  }
  void fill(int rank, int version) {
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] = pattern(rank, version, i);
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = pattern(rank, version + 100, i);
    counter = version;
  }
  bool regions_hold(int rank, int version) const {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i] != pattern(rank, version, i)) return false;
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (b[i] != pattern(rank, version + 100, i)) return false;
    }
    return true;
  }
  bool holds(int rank, int version) const {
    return regions_hold(rank, version) && counter == version;
  }
};

void use_node(const std::string& node) {
  setenv("SKT_NODE", node.c_str(), 1);
}

void destroy_memory(const std::string& job, int rank) {
  for (const auto& s : skt::list_own_segments()) {
    if (s.header.identity.job == job && s.header.identity.rank == rank) {
      if (auto seg = skt::Segment::attach(s.shmid, true)) seg->remove();
    }
  }
}

// A first run commits epochs 1 (version 1) and 2 (version 2), then changes its data (version 3)
// and stops without checkpointing, keeping its segments.
void first_run(int rank) {
  Program p(rank);
  EXPECT_EQ(p.ctx.recover(), 0u);
  p.fill(rank, 1);
  p.ctx.checkpoint();
  p.fill(rank, 2);
  p.ctx.checkpoint();
  p.fill(rank, 3);
}

class LossRecovery : public ::testing::TestWithParam<int> {};

TEST_P(LossRecovery, EveryRankLostAloneComesBackBitForBit) {
  const int rank = world_rank();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  setenv("SKT_GROUP_SIZE", std::to_string(GetParam()).c_str(), 1);
  setenv("SKT_CHUNK_SIZE", "4K", 1);
  for (const bool node_loss : {false, true}) {
    for (int lost = 0; lost < size; ++lost) {
      const std::string job = shared_tag("loss");
      setenv("SKT_JOB", job.c_str(), 1);
      use_node(fmt::format("n{}", rank));
      first_run(rank);
      if (rank == lost && node_loss) {
        destroy_memory(job, rank);
        use_node(fmt::format("spare{}", rank));
      }
      Program p(rank);
      EXPECT_EQ(p.ctx.recover(), 2u) << "lost " << lost;
      EXPECT_TRUE(p.holds(rank, 2)) << "rank " << rank << " after losing rank " << lost
                                    << (node_loss ? " (node)" : " (crash)");
      p.fill(rank, 4);
      p.ctx.checkpoint();
      EXPECT_EQ(p.ctx.stats().epoch, 3u);
      p.ctx.finalize(true);
    }
  }
}

TEST_P(LossRecovery, TwoLossesInOneGroupAreRefusedWithoutChangingTheSurvivors) {
  const int rank = world_rank();
  setenv("SKT_GROUP_SIZE", std::to_string(GetParam()).c_str(), 1);
  setenv("SKT_CHUNK_SIZE", "4K", 1);
  const std::string job = shared_tag("two");
  setenv("SKT_JOB", job.c_str(), 1);
  use_node(fmt::format("n{}", rank));
  first_run(rank);
  // 8 ranks on 8 nodes: groups are the ranks congruent modulo 8 / G.
  const int groups = 8 / GetParam();
  const bool lost = rank == 1 || rank == 1 + groups;
  if (lost) {
    destroy_memory(job, rank);
    use_node(fmt::format("spare{}", rank));
  }
  {
    Program p(rank);
    try {
      p.ctx.recover();
      ADD_FAILURE() << "recovery should be refused";
    } catch (const skt::Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_UNRECOVERABLE);
      EXPECT_NE(std::string(e.what()).find("lost"), std::string::npos) << e.what();
    }
    if (!lost) {
      EXPECT_TRUE(p.regions_hold(rank, 3)) << "a survivor's workspace was modified";
    }
  }
  destroy_memory(job, rank);
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, LossRecovery, ::testing::Values(2, 4, 8));

}  // namespace
