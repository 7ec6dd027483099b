// skt-testapp: a small MPI program that keeps its state in selfckpt regions, for end-to-end tests.
//
// Each rank owns a few regions of odd, rank-dependent sizes and a protected private state (the
// iteration and an accumulator). Every iteration scrambles the data deterministically and folds a
// job-wide checksum into the accumulator, so the final RESULT line depends on every byte of every
// rank at every iteration: a relaunched run prints the same RESULT as an uninterrupted one only if
// recovery gave back exactly the checkpointed state. With --verify-recovery, a relaunched rank also
// replays the computation from scratch up to the restored iteration and compares its regions byte
// for byte. With --doubles the regions hold doubles in [-1, 1] (what the sum scheme protects), and
// the replay allows the sum scheme's rounding bound.
#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "selfckpt/selfckpt.hpp"

namespace {

struct Options {
  int iterations = 12;
  int checkpoint_every = 3;
  std::size_t bytes = 100000;
  int regions = 2;
  int crash_at = -1;
  int crash_rank = -1;
  // From its first checkpoint after iteration asking_after on, this rank asks skt_need_checkpoint
  // where the others checkpoint: a decision each rank takes by itself.
  int asking_rank = -1;
  int asking_after = 0;
  // From its first checkpoint after iteration waiting_after on, on every launch, this rank waits in
  // an MPI_Barrier of its own where the others checkpoint: a deadlock of the program, which every
  // relaunch repeats.
  int waiting_rank = -1;
  int waiting_after = 0;
  bool crash_launcher = false;  // at --crash-at, --crash-rank kills its launcher, not itself
  bool stop_launcher = false;   // at --crash-at, --crash-rank stops its launcher and goes on
  bool suspend_job = false;     // at --crash-at, --crash-rank suspends its Slurm job (launch 0)
  bool verify_recovery = false;
  bool report_memory = false;
  bool doubles = false;
  // Region sizes from 1/8 to 3 times --bytes, the same on every rank, as a real code's arrays in a
  // balanced decomposition.
  bool uneven = false;
  std::uint64_t seed = 20181001;
  std::vector<std::string> pauses;  // "L:K": on launch L (SKT_RESTART), stop after iteration K
  std::vector<std::string> holds;   // "L:K": as pauses, but each rank stops until continued
  // On a first launch, end after this iteration (and its checkpoint) keeping the checkpoints, as a
  // program does when its allocation ends: skt_finalize(ctx, 0), exit 0.
  int stop_after = -1;
  // Before recovering, write into every region as real programs do (zero-filling containers,
  // initialisation code): "zero" or "random".
  std::string scribble;
  // --crash-rank stops itself (SIGSTOP) after its context ended, before MPI_Finalize, as a rank
  // on a node that freezes while it writes its results would.
  bool stop_after_work = false;
  // What an iteration rewrites: a window of this share of each region, moving from one iteration to
  // the next; none of region 0 with static_first (set up once and marked static).
  int touch_percent = 100;
  bool static_first = false;
  // Checkpoints declare what the iterations since the last one rewrote (skt_checkpoint_dirty):
  // "bytes" exactly; "elements" each length in 8-byte elements where bytes are meant, the slip a
  // program makes. Empty: skt_checkpoint.
  std::string declare;
  // A region holding a pointer to each data region, set up once, as C codes keep a table of row
  // pointers: after a recovery, each must still point at its region.
  bool pointer_table = false;
  // An ensemble: MPI_COMM_WORLD split into this many members (world rank modulo members), each a
  // computation of its own (another seed) with a context on its part, all under one SKT_JOB.
  int members = 1;
};

struct Window {
  std::size_t begin = 0;
  std::size_t bytes = 0;
};

// The bytes of region k (of `size` bytes) that iteration `iteration` rewrites.
Window stepped(const Options& o, std::size_t k, std::size_t size, std::uint64_t iteration) {
  if (o.static_first && k == 0) return {};
  if (o.touch_percent >= 100) return {0, size};
  const std::size_t bytes = size * static_cast<std::size_t>(o.touch_percent) / 100 / 8 * 8;
  const std::size_t begin = (iteration * 104729u) % (size - bytes + 1) / 8 * 8;
  return {begin, bytes};
}

// The ranges of each region that the iterations since the last checkpoint (every
// --checkpoint-every) rewrote, as --declare says: in bytes, or lengths in 8-byte elements.
std::vector<skt_range> touched_since_last_checkpoint(
    const std::vector<skt::Region<std::uint8_t>>& regions, const std::vector<std::string>& names,
    const Options& o, std::uint64_t iteration) {
  std::vector<skt_range> ranges;
  const std::size_t unit = o.declare == "elements" ? sizeof(double) : 1;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    for (std::uint64_t it = iteration - static_cast<std::uint64_t>(o.checkpoint_every);
         it < iteration; ++it) {
      const Window w = stepped(o, k, regions[k].size(), it);
      ranges.push_back({names[k].c_str(), w.begin, w.bytes / unit});
    }
  }
  return ranges;
}

// SKT_RESTART's value: 0 on a first launch (or when unset); -1 for auto, a resume of segments
// whose launches skt-run has no state of, where no launch's test behaviour applies.
int launch_number() {
  const char* restart = std::getenv("SKT_RESTART");
  if (restart == nullptr) return 0;
  return std::string_view(restart) == "auto" ? -1 : std::atoi(restart);
}

// Whether `points` ("L:K", launch and iteration) has this launch's `iteration`: a point where a
// test acts (kills a node, removes segments).
bool due(const std::vector<std::string>& points, std::uint64_t iteration) {
  const std::string wanted = fmt::format("{}:{}", launch_number(), iteration);
  return std::find(points.begin(), points.end(), wanted) != points.end();
}

struct State {
  std::uint64_t iteration;
  std::uint64_t accumulator;
};

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::size_t region_bytes(const Options& o, int rank, int region) {
  const std::size_t bytes = o.uneven
                                ? o.bytes * (1 + static_cast<std::size_t>(region) * 37 % 23) / 8 +
                                      777u * static_cast<std::size_t>(region)
                                : o.bytes + 4099u * static_cast<std::size_t>(rank) +
                                      777u * static_cast<std::size_t>(region);
  return o.doubles ? bytes / sizeof(double) * sizeof(double) : bytes;
}

// A value in [-0.5, 0.5) from random bits.
double half_unit(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1p-53 - 0.5;
}

double load_double(const std::uint8_t* at) {
  double v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

void initialise(std::uint8_t* data, std::size_t bytes, const Options& o, int rank, int region) {
  const std::uint64_t base = o.seed ^ (static_cast<std::uint64_t>(rank) << 40) ^
                             (static_cast<std::uint64_t>(region) << 32);
  if (o.doubles) {
    for (std::size_t i = 0; i < bytes; i += sizeof(double)) {
      const double v = 2 * half_unit(splitmix(base ^ i));
      std::memcpy(data + i, &v, sizeof v);
    }
    return;
  }
  for (std::size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<std::uint8_t>(splitmix(base ^ i));
}

// One iteration of "computation" on one region; returns a checksum of the result.
std::uint64_t step(std::uint8_t* data, std::size_t bytes, std::uint64_t iteration, int rank,
                   bool doubles) {
  std::uint64_t key = splitmix(iteration * 1315423911u + static_cast<std::uint64_t>(rank));
  std::uint64_t sum = 0;
  if (doubles) {
    // Stays in [-1, 1]: half the old value plus a value in [-0.5, 0.5).
    for (std::size_t i = 0; i < bytes; i += sizeof(double)) {
      key = splitmix(key + i);
      const double v = 0.5 * load_double(data + i) + half_unit(key);
      std::memcpy(data + i, &v, sizeof v);
      sum = sum * 131 + static_cast<std::uint64_t>(std::llround(v * 0x1p20));
    }
    return sum;
  }
  for (std::size_t i = 0; i < bytes; ++i) {
    key = splitmix(key + data[i]);
    data[i] = static_cast<std::uint8_t>(data[i] ^ key);
    sum = sum * 131 + data[i];
  }
  return sum;
}

std::uint64_t iterate(std::vector<skt::Region<std::uint8_t>>& regions, State& state, int rank,
                      const Options& o, MPI_Comm comm) {
  std::uint64_t local = 0;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    const Window w = stepped(o, k, regions[k].size(), state.iteration);
    local ^= step(regions[k].data() + w.begin, w.bytes, state.iteration, rank, o.doubles);
  }
  std::uint64_t global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_UINT64_T, MPI_BXOR, comm);
  state.accumulator = splitmix(state.accumulator ^ global);
  ++state.iteration;
  return global;
}

// Recomputes what the regions held after `iterations` iterations and compares byte for byte, or
// for doubles within `tolerance`.
bool verify_replay(const std::vector<skt::Region<std::uint8_t>>& regions, const Options& o,
                   int rank, std::uint64_t iterations, double tolerance) {
  bool same = true;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    std::vector<std::uint8_t> expected(regions[k].size());
    initialise(expected.data(), expected.size(), o, rank, static_cast<int>(k));
    for (std::uint64_t it = 0; it < iterations; ++it) {
      const Window w = stepped(o, k, expected.size(), it);
      step(expected.data() + w.begin, w.bytes, it, rank, o.doubles);
    }
    if (o.doubles) {
      for (std::size_t i = 0; i < expected.size(); i += sizeof(double)) {
        const double want = load_double(expected.data() + i);
        const double got = load_double(regions[k].data() + i);
        if (!(std::fabs(got - want) <= tolerance)) {
          fmt::print(stderr, "RECOVERY MISMATCH rank {} region {} double {}: {:.17g} != {:.17g}\n",
                     rank, k, i / sizeof(double), got, want);
          same = false;
          break;
        }
      }
      continue;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (expected[i] != regions[k][i]) {
        fmt::print(stderr, "RECOVERY MISMATCH rank {} region {} byte {}: {} != {}\n", rank, k, i,
                   regions[k][i], expected[i]);
        same = false;
        break;
      }
    }
  }
  return same;
}

int run(const Options& given) {
  int world = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const int member = world % given.members;
  Options o = given;
  o.seed += static_cast<std::uint64_t>(member) * 1000003u;
  MPI_Comm comm = MPI_COMM_WORLD;
  if (o.members > 1) MPI_Comm_split(MPI_COMM_WORLD, member, world, &comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  skt::Context ctx(comm);
  std::vector<skt::Region<std::uint8_t>> regions;
  std::vector<std::string> names;
  for (int k = 0; k < o.regions; ++k) {
    names.push_back(fmt::format("data{}", k));
    regions.push_back(ctx.alloc<std::uint8_t>(names.back(), region_bytes(o, rank, k)));
  }
  skt::Region<std::uint8_t*> table;
  if (o.pointer_table) table = ctx.alloc<std::uint8_t*>("table", regions.size());
  State state{0, 0};
  ctx.protect("state", state);
  if (!o.scribble.empty()) {
    // A word at a time, as a program's own fill would: a region may be most of the machine's
    // memory (the tests of a job too large for it), and byte by byte under the sanitizers that
    // took minutes.
    std::uint64_t noise = splitmix(static_cast<std::uint64_t>(rank) + 77);
    for (auto& r : regions) {
      if (o.scribble == "zero") {
        std::memset(r.data(), 0, r.size());
        continue;
      }
      for (std::size_t i = 0; i < r.size(); i += sizeof noise) {
        noise = splitmix(noise);
        std::memcpy(r.data() + i, &noise, std::min(sizeof noise, r.size() - i));
      }
    }
  }
  const std::uint64_t epoch = ctx.recover();
  if (epoch == 0) {
    for (int k = 0; k < o.regions; ++k) {
      initialise(regions[static_cast<std::size_t>(k)].data(),
                 regions[static_cast<std::size_t>(k)].size(), o, rank, k);
    }
    state = State{0, 0};
    for (std::size_t k = 0; k < table.size(); ++k)
      table[k] = regions[k].data();
  } else {
    if (rank == 0) {
      fmt::print("recovered epoch {} at iteration {}{}\n", epoch, state.iteration,
                 o.members > 1 ? fmt::format(" (member {})", member) : "");
    }
    int pointers_right = 1;
    for (std::size_t k = 0; k < table.size(); ++k) {
      if (table[k] != regions[k].data()) {
        fmt::print(stderr,
                   "STALE POINTER rank {} region {}: the table says {}, the region is at {}\n",
                   rank, k, static_cast<void*>(table[k]), static_cast<void*>(regions[k].data()));
        pointers_right = 0;
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, &pointers_right, 1, MPI_INT, MPI_MIN, comm);
    if (pointers_right == 0) return 4;
    if (o.verify_recovery) {
      // The sum scheme's bound for values in [-1, 1]: a rebuilt value sums G-2 data values and a
      // parity of at most G-1 in magnitude (see enc::sum_rebuild_bound).
      const double g = ctx.stats().group_size;
      const double tolerance = o.doubles ? 3.03 * (g - 1) * 0x1p-53 * (2 * g - 3) : 0.0;
      int ok = verify_replay(regions, o, rank, state.iteration, tolerance) ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
      if (ok == 0) return 4;
      if (rank == 0) fmt::print("recovered data verified by replay on every rank\n");
    }
  }
  if (o.static_first) ctx.mark_static(regions[0].data());
  std::fflush(stdout);

  while (state.iteration < static_cast<std::uint64_t>(o.iterations)) {
    iterate(regions, state, rank, o, comm);
    if (static_cast<int>(state.iteration) == o.crash_at && world == o.crash_rank &&
        !(o.suspend_job && launch_number() != 0)) {
      fmt::print(stderr, "testapp: rank {} {} at iteration {}\n", world,
                 o.stop_launcher    ? "stops its launcher"
                 : o.crash_launcher ? "kills its launcher"
                 : o.suspend_job    ? "suspends its Slurm job"
                                    : "crashing",
                 state.iteration);
      std::fflush(stderr);
      if (o.suspend_job) {
        // As an operator or a preempting job does; this rank stops with the others, and goes on
        // once the job is resumed.
        if (std::system("scontrol suspend \"$SLURM_JOB_ID\"") != 0) return 1;
      } else if (o.stop_launcher) {
        kill(getppid(), SIGSTOP);
      } else if (o.crash_launcher) {
        kill(getppid(), SIGKILL);
        for (;;)
          ::pause();  // every rank must die with the launcher
      } else {
        kill(getpid(), SIGKILL);
      }
    }
    if (o.checkpoint_every > 0 &&
        state.iteration % static_cast<std::uint64_t>(o.checkpoint_every) == 0) {
      if (world == o.asking_rank && static_cast<int>(state.iteration) > o.asking_after) {
        if (ctx.need_checkpoint()) ctx.checkpoint();
      } else if (world == o.waiting_rank && static_cast<int>(state.iteration) > o.waiting_after) {
        MPI_Barrier(MPI_COMM_WORLD);
      } else if (!o.declare.empty()) {
        ctx.checkpoint_dirty(touched_since_last_checkpoint(regions, names, o, state.iteration));
      } else {
        ctx.checkpoint();
      }
    }
    if (static_cast<int>(state.iteration) == o.stop_after && launch_number() == 0) {
      ctx.finalize(false);
      if (world == 0) fmt::print("STOPPED after iteration {}\n", state.iteration);
      return 0;
    }
    if (due(o.pauses, state.iteration)) {
      MPI_Barrier(MPI_COMM_WORLD);
      if (world == 0) fmt::print("PAUSED after iteration {}\n", state.iteration);
      std::fflush(stdout);
      for (;;)
        ::pause();  // until a test kills the job
    }
    if (due(o.holds, state.iteration)) {
      MPI_Barrier(MPI_COMM_WORLD);
      if (world == 0) fmt::print("HELD after iteration {}\n", state.iteration);
      std::fflush(stdout);
      raise(SIGSTOP);  // until a test continues it
    }
  }

  if (o.report_memory) {
    const skt_stats s = ctx.stats();
    const double w = static_cast<double>(s.workspace_bytes);
    const double g = s.group_size;
    const double formula = g > 1 ? 2.0 * w * g / (g - 1.0) : 2.0 * w;
    const double measured =
        static_cast<double>(s.workspace_bytes + s.checkpoint_bytes + 2 * s.checksum_bytes);
    fmt::print(
        "MEMORY rank {} group_size {} W {} B {} C {} D {} W+B+C+D {} formula_2WG/(G-1) {:.0f} "
        "ratio {:.4f} shm_segments {}\n",
        rank, s.group_size, s.workspace_bytes, s.checkpoint_bytes, s.checksum_bytes,
        s.checksum_bytes, static_cast<std::uint64_t>(measured), formula, measured / formula,
        s.shm_bytes);
  }

  std::uint64_t digest = state.accumulator;
  for (const auto& r : regions) {
    for (std::size_t i = 0; i < r.size(); ++i)
      digest = digest * 1099511628211ull + r[i];
  }
  // Every member's ranks in the one RESULT, in the order of MPI_COMM_WORLD.
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world_size));
  MPI_Gather(&digest, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (world == 0) {
    std::uint64_t result = 0;
    for (const auto d : all)
      result = splitmix(result ^ d);
    fmt::print("RESULT {:016x} after {} iterations\n", result, state.iteration);
  }
  ctx.finalize(true);
  if (o.stop_after_work && world == o.crash_rank && launch_number() == 0) {
    fmt::print(stderr, "testapp: rank {} stops itself after its work\n", world);
    std::fflush(stderr);
    raise(SIGSTOP);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skt-testapp: an MPI program for selfckpt's end-to-end tests"};
  Options o;
  app.add_option("--iterations", o.iterations, "iterations to run")->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "iterations between checkpoints (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", o.bytes, "base size of each region in bytes")
      ->check(CLI::PositiveNumber);
  app.add_option("--regions", o.regions, "workspace regions per rank")->check(CLI::Range(1, 64));
  app.add_flag("--uneven", o.uneven,
               "region sizes from 1/8 to 3 times --bytes, unevenly, the same on every rank");
  app.add_option("--crash-at", o.crash_at, "iteration after which --crash-rank kills itself");
  app.add_option("--crash-rank", o.crash_rank, "rank that crashes at --crash-at");
  app.add_option("--asking-rank", o.asking_rank,
                 "rank that asks skt_need_checkpoint where the others checkpoint (a decision of "
                 "its own), after --asking-after");
  app.add_option("--asking-after", o.asking_after,
                 "iteration after which --asking-rank asks instead of checkpointing");
  app.add_option("--waiting-rank", o.waiting_rank,
                 "rank that waits in an MPI_Barrier where the others checkpoint (a deadlock), "
                 "after --waiting-after, on every launch");
  app.add_option("--waiting-after", o.waiting_after,
                 "iteration after which --waiting-rank waits instead of checkpointing");
  app.add_flag("--crash-launcher", o.crash_launcher,
               "at --crash-at, --crash-rank kills its launcher (mpirun) instead of itself");
  app.add_flag("--stop-launcher", o.stop_launcher,
               "at --crash-at, --crash-rank stops its launcher (SIGSTOP) and goes on");
  app.add_flag("--suspend-job", o.suspend_job,
               "on a first launch, at --crash-at, --crash-rank suspends its Slurm job (scontrol "
               "suspend) and goes on once it is resumed");
  app.add_option("--pause", o.pauses,
                 "L:K: on launch L (SKT_RESTART), every rank stops after "
                 "iteration K and waits to be killed (repeatable)");
  app.add_option("--hold", o.holds,
                 "L:K: on launch L, every rank stops itself (SIGSTOP) after iteration K, for a "
                 "test to act and continue it (repeatable)");
  app.add_flag("--stop-after-work", o.stop_after_work,
               "on a first launch, --crash-rank stops itself (SIGSTOP) after its context ended, "
               "before MPI_Finalize");
  app.add_flag("--verify-recovery", o.verify_recovery, "replay and compare restored data");
  app.add_option("--stop-after", o.stop_after,
                 "on a first launch, end after this iteration keeping the checkpoints "
                 "(skt_finalize(ctx, 0)), as at the end of an allocation");
  app.add_flag("--report-memory", o.report_memory, "print the shared memory of every rank");
  app.add_flag("--doubles", o.doubles, "regions of doubles in [-1, 1], as the sum scheme needs");
  app.add_option("--scribble", o.scribble,
                 "before recovering, overwrite every region: zero or random (what the library "
                 "must survive)")
      ->check(CLI::IsMember({"zero", "random"}));
  app.add_option("--seed", o.seed, "data seed");
  app.add_option("--declare", o.declare,
                 "checkpoints declare what changed since the last (skt_checkpoint_dirty): bytes, "
                 "or elements (lengths in 8-byte elements, a program's slip)")
      ->check(CLI::IsMember({"bytes", "elements"}));
  app.add_option("--touch-percent", o.touch_percent,
                 "share of each region an iteration rewrites (a window that moves)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--pointer-table", o.pointer_table,
               "a region of pointers to the data regions, checked after a recovery");
  app.add_option("--members", o.members,
                 "split MPI_COMM_WORLD into this many computations (world rank modulo members), "
                 "each with a context of its own")
      ->check(CLI::PositiveNumber);
  app.add_flag("--static-first", o.static_first,
               "region 0 is set up once, never rewritten, and marked static (skt_mark_static)");
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(o);
  } catch (const skt::Error& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fmt::print(stderr, "testapp rank {}: selfckpt error: {}\n", rank, e.what());
    std::fflush(stderr);
    // Errors of collective calls are the same on every rank, so every rank leaves with this code;
    // a rank alone with a local error ends the job, and mpirun reports its code. A while for the
    // others to say theirs first (mpirun ends the job as soon as one rank exits), never forever.
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    for (int i = 0; i < 500; ++i) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done != 0) break;
      usleep(10000);
    }
    std::exit(e.exit_code());
  }
  MPI_Finalize();
  return code;
}
