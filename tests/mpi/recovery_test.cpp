// Recovery through the library within one mpirun: a "relaunch" is a new context on the same job
// tag; a lost node is a rank whose segments were removed and whose SKT_NODE changed. Groups are
// sub-communicators of exactly G ranks, so that every loss pattern of a group can be tried.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "encoders/codec.hpp"
#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "selfckpt/selfckpt.hpp"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A job tag chosen by the communicator's rank 0, new at every call.
std::string shared_tag(MPI_Comm comm, const char* prefix) {
  static int counter = 0;
  int numbers[2] = {static_cast<int>(MPI_Wtime() * 1000) % 100000, ++counter};
  MPI_Bcast(numbers, 2, MPI_INT, 0, comm);
  return fmt::format("{}-{}-{}", prefix, numbers[0], numbers[1]);
}

// Finite doubles of varied magnitude, different for every rank, version and index.
double value(int rank, int version, std::size_t i) {
  const auto h =
      static_cast<double>((i * 2654435761u + static_cast<unsigned>(rank) * 97u) % 100003u);
  return (h - 50000.0) / 7.0 + rank * 0.125 + version * 1000.0;
}

struct Program {
  skt::Context ctx;
  skt::Region<double> a;
  skt::Region<double> b;
  long counter = 0;

  Program(MPI_Comm comm, int rank, std::size_t elements = 9000)
      : ctx(comm),
        a(ctx.alloc<double>("a", elements + 41 * static_cast<std::size_t>(rank))),
        b(ctx.alloc<double>("b", 600 + 3 * static_cast<std::size_t>(rank))) {
    ctx.protect("counter", counter);
  }
  void fill(int rank, int version) {
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] = value(rank, version, i);
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = value(rank, version + 100, i);
    counter = version;
  }
  // Largest error against version `version`: 0 when bit-identical.
  double error(int rank, int version) const {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::fabs(a[i] - value(rank, version, i)));
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      worst = std::max(worst, std::fabs(b[i] - value(rank, version + 100, i)));
    }
    return worst;
  }
  bool identical(int rank, int version) const {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double v = value(rank, version, i);
      if (std::memcmp(&a[i], &v, sizeof v) != 0) return false;
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      const double v = value(rank, version + 100, i);
      if (std::memcmp(&b[i], &v, sizeof v) != 0) return false;
    }
    return true;
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

// Digest of each checkpoint segment's data (B, C and D) of a job, for this rank.
std::uint64_t checkpoint_digest(const std::string& job, int rank) {
  for (const auto& s : skt::list_own_segments()) {
    const auto& id = s.header.identity;
    if (id.job == job && id.rank == rank && id.kind == skt::SegmentKind::checkpoint) {
      auto seg = skt::Segment::attach(s.shmid, true);
      return skt::crc64(seg->data(), seg->header().data_bytes);
    }
  }
  return 0;
}

// A first run commits epochs 1 (version 1) and 2 (version 2), then changes its data (version 3)
// and stops without checkpointing, keeping its segments.
void first_run(MPI_Comm comm, int rank) {
  Program p(comm, rank);
  EXPECT_EQ(p.ctx.recover(), 0u);
  p.fill(rank, 1);
  p.ctx.checkpoint();
  p.fill(rank, 2);
  p.ctx.checkpoint();
  p.fill(rank, 3);
}

std::vector<std::vector<int>> combinations(int n, int k) {
  std::vector<std::vector<int>> out;
  std::vector<bool> pick(static_cast<std::size_t>(n), false);
  std::fill(pick.end() - k, pick.end(), true);
  do {
    std::vector<int> set;
    for (int i = 0; i < n; ++i) {
      if (pick[static_cast<std::size_t>(i)]) set.push_back(i);
    }
    out.push_back(set);
  } while (std::next_permutation(pick.begin(), pick.end()));
  return out;
}

struct Shape {
  const char* scheme;
  int group_size;
  int parity;
};

std::string describe(const Shape& s) {
  return fmt::format("{} G={} m={}", s.scheme, s.group_size, s.parity);
}

class EveryLossPattern : public ::testing::TestWithParam<Shape> {};

// Group 0 of a job of one or two groups of exactly G ranks: every set of up to m lost nodes must
// give back epoch 2 exactly (within the bound for sum), and one loss more must be refused. A job
// whose every rank lost its memory cannot tell a relaunch from a fresh start, so when m + 1 = G
// the job gets a second group, which survives to say that group 0 existed.
TEST_P(EveryLossPattern, UpToTheToleranceRecoversAndOneMoreIsRefused) {
  const Shape shape = GetParam();
  const int world = world_rank();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int job_size = 2 * shape.group_size <= size ? 2 * shape.group_size : shape.group_size;
  ASSERT_GE(size, job_size);
  ASSERT_TRUE(job_size > shape.group_size || shape.parity + 1 < shape.group_size);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world < job_size ? 0 : MPI_UNDEFINED, world, &comm);
  if (comm == MPI_COMM_NULL) return;
  const int rank = world;
  // Ranks sit on distinct nodes, so groups are dealt round-robin: group 0 holds every
  // (job_size / G)-th rank.
  const int stride = job_size / shape.group_size;
  const bool exact = std::string(shape.scheme) != "sum";
  setenv("SKT_SCHEME", shape.scheme, 1);
  setenv("SKT_PARITY", std::to_string(shape.parity).c_str(), 1);
  setenv("SKT_GROUP_SIZE", std::to_string(shape.group_size).c_str(), 1);
  setenv("SKT_CHUNK_SIZE", "4K", 1);

  std::vector<std::vector<int>> patterns;
  for (int k = 1; k <= shape.parity + 1 && k <= shape.group_size; ++k) {
    for (auto& set : combinations(shape.group_size, k))
      patterns.push_back(set);
  }
  for (const auto& members : patterns) {
    std::vector<int> lost;
    for (const int m : members)
      lost.push_back(m * stride);
    const bool beyond = static_cast<int>(lost.size()) > shape.parity;
    const std::string job = shared_tag(comm, "loss");
    setenv("SKT_JOB", job.c_str(), 1);
    use_node(fmt::format("n{}", rank));
    first_run(comm, rank);
    const bool i_am_lost = std::binary_search(lost.begin(), lost.end(), rank);
    if (i_am_lost) {
      destroy_memory(job, rank);
      use_node(fmt::format("spare{}", rank));
    }
    {
      Program p(comm, rank);
      if (beyond) {
        try {
          p.ctx.recover();
          ADD_FAILURE() << describe(shape) << ": losing " << lost.size() << " must be refused";
        } catch (const skt::Error& e) {
          EXPECT_EQ(e.code(), SKT_ERR_UNRECOVERABLE) << e.what();
          EXPECT_NE(std::string(e.what()).find("group 0 lost"), std::string::npos) << e.what();
        }
        if (!i_am_lost) {
          EXPECT_TRUE(p.identical(rank, 3)) << describe(shape) << ": a survivor was modified";
        }
      } else {
        EXPECT_EQ(p.ctx.recover(), 2u);
        EXPECT_EQ(p.counter, 2) << describe(shape) << ": private state not restored exactly";
        if (exact || !i_am_lost) {
          EXPECT_TRUE(p.identical(rank, 2))
              << describe(shape) << ": rank " << rank << " after losing " << lost.size();
        } else {
          // The sum rebuild: each value within the bound of its row, whose magnitudes are below
          // 8000 + 1000·version for every member.
          const double bound =
              skt::enc::sum_rebuild_bound(shape.group_size, shape.group_size * 10200.0);
          EXPECT_LE(p.error(rank, 2), bound) << describe(shape);
        }
        p.fill(rank, 4);
        p.ctx.checkpoint();
        p.ctx.finalize(true);
      }
    }
    destroy_memory(job, rank);
  }
  MPI_Comm_free(&comm);
}

INSTANTIATE_TEST_SUITE_P(Schemes, EveryLossPattern,
                         ::testing::Values(Shape{"xor", 2, 1}, Shape{"xor", 3, 1},
                                           Shape{"xor", 4, 1}, Shape{"xor", 8, 1},
                                           Shape{"sum", 3, 1}, Shape{"sum", 5, 1},
                                           Shape{"rs", 2, 1}, Shape{"rs", 3, 2}, Shape{"rs", 4, 2},
                                           Shape{"rs", 5, 3}, Shape{"rs", 6, 2}, Shape{"rs", 7, 3},
                                           Shape{"rs", 8, 3}));

class EveryRank : public ::testing::TestWithParam<const char*> {};

// With 8 ranks in groups of 4, every rank lost alone, by crash and by node loss.
TEST_P(EveryRank, LostAloneComesBackBitForBit) {
  const int rank = world_rank();
  setenv("SKT_SCHEME", GetParam(), 1);
  setenv("SKT_PARITY", "1", 1);
  setenv("SKT_GROUP_SIZE", "4", 1);
  setenv("SKT_CHUNK_SIZE", "4K", 1);
  for (const bool node_loss : {false, true}) {
    for (int lost = 0; lost < 8; ++lost) {
      const std::string job = shared_tag(MPI_COMM_WORLD, "every");
      setenv("SKT_JOB", job.c_str(), 1);
      use_node(fmt::format("n{}", rank));
      first_run(MPI_COMM_WORLD, rank);
      if (rank == lost && node_loss) {
        destroy_memory(job, rank);
        use_node(fmt::format("spare{}", rank));
      }
      Program p(MPI_COMM_WORLD, rank);
      EXPECT_EQ(p.ctx.recover(), 2u) << "lost " << lost;
      EXPECT_TRUE(p.identical(rank, 2) && p.counter == 2)
          << "rank " << rank << " after losing rank " << lost
          << (node_loss ? " (node)" : " (crash)");
      p.fill(rank, 4);
      p.ctx.checkpoint();
      EXPECT_EQ(p.ctx.stats().epoch, 3u);
      p.ctx.finalize(true);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, EveryRank, ::testing::Values("xor", "rs"));

class Incremental : public ::testing::TestWithParam<Shape> {};

// The same evolution checkpointed in full by one job (SKT_FIND_CHANGES=0), incrementally with
// declared ranges by another, and by a third with skt_checkpoint finding what changed: their
// checkpoint segments must hold the same bytes after every checkpoint, and a recovery of the
// incremental job must give the last state back.
TEST_P(Incremental, GivesTheSameCopyAndChecksumsAsFull) {
  const Shape shape = GetParam();
  const int rank = world_rank();
  setenv("SKT_SCHEME", shape.scheme, 1);
  setenv("SKT_PARITY", std::to_string(shape.parity).c_str(), 1);
  setenv("SKT_GROUP_SIZE", std::to_string(shape.group_size).c_str(), 1);
  setenv("SKT_CHUNK_SIZE", "4K", 1);
  use_node(fmt::format("n{}", rank));
  const std::string full_job = shared_tag(MPI_COMM_WORLD, "full");
  const std::string dirty_job = shared_tag(MPI_COMM_WORLD, "dirty");
  const std::string found_job = shared_tag(MPI_COMM_WORLD, "found");
  // Large enough that a slice is a small part of the stream even for wide groups.
  constexpr std::size_t kElements = 40000;
  setenv("SKT_JOB", full_job.c_str(), 1);
  setenv("SKT_FIND_CHANGES", "0", 1);
  Program full(MPI_COMM_WORLD, rank, kElements);
  unsetenv("SKT_FIND_CHANGES");
  setenv("SKT_JOB", dirty_job.c_str(), 1);
  Program dirty(MPI_COMM_WORLD, rank, kElements);
  setenv("SKT_JOB", found_job.c_str(), 1);
  Program found(MPI_COMM_WORLD, rank, kElements);
  full.ctx.recover();
  dirty.ctx.recover();
  found.ctx.recover();
  full.fill(rank, 1);
  dirty.fill(rank, 1);
  found.fill(rank, 1);
  full.ctx.checkpoint();
  dirty.ctx.checkpoint_dirty(std::vector<skt_range>{});  // first after a fresh start: in full
  found.ctx.checkpoint();
  for (int round = 2; round <= 6; ++round) {
    // Each round rewrites a different slice of `a`, at the same place on every rank (as the
    // trailing matrix of an LU factorisation shrinks), and on odd ranks one value of `b`.
    const std::size_t begin = static_cast<std::size_t>(round) * 7919 % 36000;
    const std::size_t count = 300 + 50 * static_cast<std::size_t>(round);
    std::vector<skt_range> ranges;
    for (Program* p : {&full, &dirty, &found}) {
      for (std::size_t i = begin; i < begin + count; ++i)
        p->a[i] = value(rank, round, i);
      if (rank % 2 == 1) p->b[5] = value(rank, round, 5);
      p->counter = round;
    }
    // Written, but with the values it held: not a change. Then one bit of one value, far from
    // the slice on even ranks: a change no declared range covers, which only comparing finds.
    for (std::size_t i = 0; i < 2000; ++i)
      found.a[i] = double(found.a[i]);
    std::size_t flipped = 0;
    if (rank % 2 == 0) {
      flipped = (begin + 20000) % kElements;
      for (Program* p : {&full, &found}) {
        std::uint64_t bits;
        std::memcpy(&bits, &p->a[flipped], sizeof bits);
        bits ^= std::uint64_t{1} << (round * 7 % 64);
        std::memcpy(&p->a[flipped], &bits, sizeof bits);
      }
      dirty.a[flipped] = full.a[flipped];
      ranges.push_back({"a", flipped * sizeof(double), sizeof(double)});
    }
    ranges.push_back({"a", begin * sizeof(double), count * sizeof(double)});
    if (rank % 2 == 1) ranges.push_back({"b", 5 * sizeof(double), sizeof(double)});
    full.ctx.checkpoint();
    dirty.ctx.checkpoint_dirty(ranges);
    found.ctx.checkpoint();
    EXPECT_EQ(checkpoint_digest(full_job, rank), checkpoint_digest(dirty_job, rank))
        << describe(shape) << ": round " << round << " rank " << rank;
    EXPECT_EQ(checkpoint_digest(full_job, rank), checkpoint_digest(found_job, rank))
        << describe(shape) << ": found changes, round " << round << " rank " << rank;
    const skt_stats f = full.ctx.stats(), d = dirty.ctx.stats(), c = found.ctx.stats();
    if (shape.group_size > 1) {
      EXPECT_LT(d.last_sent_bytes, f.last_sent_bytes / 2)
          << "the incremental encoding sent too much";
    }
    EXPECT_EQ(c.last_sent_bytes, d.last_sent_bytes) << "finding changes found other blocks";
    EXPECT_EQ(c.last_changed_bytes, d.last_changed_bytes);
    EXPECT_EQ(f.last_changed_bytes, f.workspace_bytes) << "SKT_FIND_CHANGES=0 is a full checkpoint";
    EXPECT_LT(c.last_changed_bytes, f.workspace_bytes / 4);
    // The checksum areas alternate, so the first incremental checkpoint after a full one also
    // carries over into D every checksum block it does not rewrite; later ones only what the
    // previous one rewrote. A group of one has no checksum to carry.
    if (round > 2 || shape.group_size == 1) {
      EXPECT_LT(d.last_flushed_bytes, f.last_flushed_bytes / 2)
          << "the incremental flush copied too much";
    }
  }
  std::vector<double> expected(dirty.a.begin(), dirty.a.end());
  full.ctx.finalize(true);
  found.ctx.finalize(true);
  // A node loss after incremental checkpoints rebuilds the last state (in groups of one, which
  // tolerate no loss of memory, a crash restores it).
  for (std::size_t i = 0; i < 100; ++i)
    dirty.a[i] = -1;
  dirty.ctx.finalize(false);
  if (rank == 1 && shape.group_size > 1) {
    destroy_memory(dirty_job, rank);
    use_node("spare1");
  }
  setenv("SKT_JOB", dirty_job.c_str(), 1);
  Program again(MPI_COMM_WORLD, rank, kElements);
  EXPECT_EQ(again.ctx.recover(), 6u);
  EXPECT_EQ(again.counter, 6);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), again.a.begin())) << describe(shape);
  again.ctx.finalize(true);
  destroy_memory(full_job, rank);
}

INSTANTIATE_TEST_SUITE_P(Schemes, Incremental,
                         ::testing::Values(Shape{"xor", 4, 1}, Shape{"rs", 4, 2}, Shape{"rs", 8, 3},
                                           Shape{"xor", 1, 1}));

TEST(Policy, NeedCheckpointFollowsTheIntervalAndNeedsAnMtbf) {
  const int rank = world_rank();
  setenv("SKT_SCHEME", "xor", 1);
  setenv("SKT_PARITY", "1", 1);
  setenv("SKT_GROUP_SIZE", "4", 1);
  use_node(fmt::format("n{}", rank));
  const std::string job = shared_tag(MPI_COMM_WORLD, "policy");
  setenv("SKT_JOB", job.c_str(), 1);
  {
    Program p(MPI_COMM_WORLD, rank);
    p.ctx.recover();
    try {
      p.ctx.need_checkpoint();
      ADD_FAILURE() << "an MTBF is required";
    } catch (const skt::Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_CONFIG);
      EXPECT_NE(std::string(e.what()).find("SKT_MTBF"), std::string::npos);
    }
    p.ctx.finalize(true);
  }
  setenv("SKT_MTBF", "1000000d", 1);
  {
    Program p(MPI_COMM_WORLD, rank);
    p.ctx.recover();
    EXPECT_TRUE(p.ctx.need_checkpoint()) << "the first checkpoint measures the cost";
    p.ctx.checkpoint();
    EXPECT_FALSE(p.ctx.need_checkpoint()) << "a huge MTBF gives a long interval";
    p.ctx.finalize(false);
  }
  {
    // A relaunch has the cost of a checkpoint from before, not its recovery's: the interval
    // goes on, and no checkpoint is needed at once.
    Program p(MPI_COMM_WORLD, rank);
    EXPECT_EQ(p.ctx.recover(), 1u);
    EXPECT_FALSE(p.ctx.need_checkpoint()) << "the recorded cost of a checkpoint serves";
    p.ctx.finalize(true);
  }
  setenv("SKT_MTBF", "1e-9", 1);
  {
    Program p(MPI_COMM_WORLD, rank);
    p.ctx.recover();
    p.ctx.checkpoint();
    EXPECT_TRUE(p.ctx.need_checkpoint()) << "a tiny MTBF makes every moment the right one";
    p.ctx.finalize(true);
  }
  unsetenv("SKT_MTBF");
}

}  // namespace

// Two contexts open at once in one process under one tag would take the same segments (the second
// waited SKT_ATTACH_WAIT for the first to let go of them): refused at once, on every rank; a tag
// of its own opens, and so does the first's once that one is finalized.
TEST(Contexts, OpenAtOnceTheyNeedATagEach) {
  const int rank = world_rank();
  setenv("SKT_GROUP_SIZE", "2", 1);
  setenv("SKT_SCHEME", "xor", 1);
  setenv("SKT_NODE", fmt::format("open{}", rank).c_str(), 1);
  const std::string job = shared_tag(MPI_COMM_WORLD, "open");
  setenv("SKT_JOB", job.c_str(), 1);
  setenv("SKT_RESTART", "0", 1);
  skt::Context first(MPI_COMM_WORLD);
  try {
    skt::Context second(MPI_COMM_WORLD);
    ADD_FAILURE() << "a second context opened under the tag of an open one";
  } catch (const skt::Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_CONFIG);
    EXPECT_NE(std::string(e.what()).find("is open in this process"), std::string::npos) << e.what();
  }
  setenv("SKT_JOB", (job + "+second").c_str(), 1);
  skt::Context second(MPI_COMM_WORLD);
  EXPECT_EQ(second.recover(), 0u);
  second.finalize(true);
  first.finalize(true);
  setenv("SKT_JOB", job.c_str(), 1);
  skt::Context again(MPI_COMM_WORLD);
  EXPECT_EQ(again.recover(), 0u);
  again.finalize(true);
  unsetenv("SKT_RESTART");
}

namespace {

// The code and message of `call`'s skt::Error, with the message's length the same on every rank.
template <class F>
std::pair<int, std::string> error_of(F call) {
  int code = SKT_OK;
  std::string message;
  try {
    call();
    ADD_FAILURE() << "the call succeeded";
  } catch (const skt::Error& e) {
    code = e.code();
    message = e.what();
  }
  int lengths[2] = {static_cast<int>(message.size()), -static_cast<int>(message.size())};
  MPI_Allreduce(MPI_IN_PLACE, lengths, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lengths[0], -lengths[1]) << "the ranks' messages differ: " << message;
  return {code, message};
}

}  // namespace

// Ranks that make different collective calls (each deciding by itself to checkpoint) end with the
// same SKT_ERR_STATE on every rank, naming who called what, and nothing is done: the ranks go on
// together, and a relaunch restores the checkpoint from before. Until the calls were compared, a
// rank in skt_need_checkpoint paired its broadcast with another's checkpoint, and one in
// skt_finalize hung against a checkpoint. A range one rank declares outside its regions stops
// every rank's checkpoint with its error (the others waited in it). A rank that waits at the start
// of a call longer than SKT_WAIT_WARNING says so.
TEST(CallOrder, DifferentCallsAreTheSameErrorOnEveryRank) {
  const int rank = world_rank();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  setenv("SKT_GROUP_SIZE", "2", 1);
  setenv("SKT_SCHEME", "xor", 1);
  setenv("SKT_MTBF", "1000000d", 1);
  setenv("SKT_NODE", fmt::format("order{}", rank).c_str(), 1);
  setenv("SKT_JOB", shared_tag(MPI_COMM_WORLD, "order").c_str(), 1);
  setenv("SKT_RESTART", "0", 1);
  const std::string others = size == 2 ? "rank 0" : fmt::format("ranks 0 and 2-{}", size - 1);
  {
    Program p(MPI_COMM_WORLD, rank);
    EXPECT_EQ(p.ctx.recover(), 0u);
    p.fill(rank, 1);
    p.ctx.checkpoint();
    p.fill(rank, 2);
    auto [code, message] = error_of([&] {
      if (rank == 1) {
        p.ctx.need_checkpoint();
      } else {
        p.ctx.checkpoint();
      }
    });
    EXPECT_EQ(code, SKT_ERR_STATE);
    EXPECT_NE(message.find(fmt::format("at epoch 1: skt_checkpoint on {}, skt_need_checkpoint on "
                                       "rank 1",
                                       others)),
              std::string::npos)
        << message;
    EXPECT_EQ(p.ctx.stats().epoch, 1u);

    const std::size_t past = p.a.size() * sizeof(double);
    std::tie(code, message) = error_of([&] {
      p.ctx.checkpoint_dirty(rank == size - 1 ? std::vector<skt_range>{{"a", past, 8}}
                                              : std::vector<skt_range>{});
    });
    EXPECT_EQ(code, SKT_ERR_ARG);
    EXPECT_NE(message.find("outside region 'a'"), std::string::npos) << message;
    EXPECT_EQ(p.ctx.stats().epoch, 1u);

    p.ctx.checkpoint();
    EXPECT_EQ(p.ctx.stats().epoch, 2u);
    p.fill(rank, 3);
    std::tie(code, message) = error_of([&] {
      if (rank == 0) {
        p.ctx.finalize(true);
      } else {
        p.ctx.checkpoint();
      }
    });
    EXPECT_EQ(code, SKT_ERR_STATE);
    EXPECT_NE(message.find("at epoch 2: skt_finalize on rank 0, skt_checkpoint on rank"),
              std::string::npos)
        << message;
  }
  setenv("SKT_RESTART", "1", 1);
  setenv("SKT_WAIT_WARNING", "0.05", 1);
  {
    Program p(MPI_COMM_WORLD, rank);
    EXPECT_EQ(p.ctx.recover(), 2u) << "the finalize that met a checkpoint removed nothing";
    EXPECT_TRUE(p.identical(rank, 2));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      // The library logs to stderr.
      testing::internal::CaptureStderr();
      p.ctx.checkpoint();
      const std::string said = testing::internal::GetCapturedStderr();
      EXPECT_NE(said.find("this rank has waited "), std::string::npos) << said;
      EXPECT_NE(said.find(" s in skt_checkpoint for the other ranks of the context to call it"),
                std::string::npos)
          << said;
    } else {
      // The others arrive late: busy, as a rank still computing would be.
      const double start = MPI_Wtime();
      while (MPI_Wtime() - start < 0.3) {
      }
      p.ctx.checkpoint();
    }
    p.ctx.finalize(true);
  }
  unsetenv("SKT_WAIT_WARNING");
  unsetenv("SKT_MTBF");
  unsetenv("SKT_RESTART");
}

namespace {

using Vector = std::vector<double, skt::allocator<double>>;

// Containers on skt::allocator, by order and by name, come back after a relaunch; growing one after
// recovery is refused with SKT_ERR_STATE.
TEST(Allocator, ContainersComeBackAfterARelaunch) {
  const int rank = world_rank();
  setenv("SKT_GROUP_SIZE", "2", 1);
  setenv("SKT_SCHEME", "xor", 1);
  setenv("SKT_NODE", fmt::format("alloc{}", rank).c_str(), 1);
  setenv("SKT_JOB", shared_tag(MPI_COMM_WORLD, "alloc").c_str(), 1);
  setenv("SKT_RESTART", "0", 1);
  const std::size_t n = 1000 + 13 * static_cast<std::size_t>(rank);
  {
    skt::Context ctx(MPI_COMM_WORLD);
    Vector by_order(n);
    Vector by_name(n / 2, 0.0, skt::allocator<double>("named"));
    ASSERT_EQ(ctx.recover(), 0u);
    for (std::size_t i = 0; i < n; ++i)
      by_order[i] = value(rank, 1, i);
    for (std::size_t i = 0; i < n / 2; ++i)
      by_name[i] = value(rank, 2, i);
    ctx.checkpoint();
    for (auto& x : by_order)
      x = -1;  // lost work after the checkpoint
    EXPECT_THROW(by_order.push_back(1.0), skt::Error);
    try {
      by_name.reserve(n);
      ADD_FAILURE() << "a container grew after recovery";
    } catch (const skt::Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_STATE);
      EXPECT_NE(std::string(e.what()).find("before recovering"), std::string::npos);
    }
    // The context goes out of scope unfinalized: the segments stay, as after a crash.
    by_order.clear();
  }
  setenv("SKT_RESTART", "1", 1);
  skt::Context ctx(MPI_COMM_WORLD);
  Vector by_order(n);
  Vector by_name(n / 2, 0.0, skt::allocator<double>("named"));
  EXPECT_EQ(ctx.recover(), 1u);
  bool same = true;
  for (std::size_t i = 0; i < n; ++i)
    same = same && by_order[i] == value(rank, 1, i);
  for (std::size_t i = 0; i < n / 2; ++i)
    same = same && by_name[i] == value(rank, 2, i);
  EXPECT_TRUE(same);
  ctx.finalize(true);
  unsetenv("SKT_RESTART");
}

}  // namespace
