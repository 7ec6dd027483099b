// One HPL test on selfckpt: the matrix in a context of its own, checkpoints between panels, and
// resumption after a relaunch; without checkpoints, the matrix in the process's own memory, as
// netlib HPL's. Shared by skt-hpl and the benchmarks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "hpl/algorithm.hpp"
#include "hpl/grid.hpp"
#include "hpl/lu.hpp"
#include "hpl/verify.hpp"

namespace skt::hpl {

class Report;

inline constexpr std::uint64_t kSeed = 100;  // HPL's ISEED

// What a checkpoint declares changed: the trailing submatrix changed since the last one (corner),
// every column from there (side), or nothing, leaving skt_checkpoint to find the changed blocks by
// comparing the whole matrix with the committed copy (full).
enum class Strategy { corner, side, full };
const char* strategy_name(Strategy s) noexcept;

struct CheckpointPolicy {
  bool none = false;
  int every = 0;           // panels; 0: default_checkpoint_every, unless automatic
  bool automatic = false;  // when skt_need_checkpoint says so (Daly's interval, SKT_MTBF)
  Strategy strategy = Strategy::corner;
};

// How many panels apart a test checkpoints when no interval is asked for: a tenth of its panels
// (every panel below 20), so that skt-hpl run as it comes is fault tolerant, at the cadence its
// benchmarks measure.
int default_checkpoint_every(int panels) noexcept;

struct Test {
  int n = 0, nb = 0, p = 1, q = 1;
  Algorithm algo;
};

// The test's parameters as HPL.dat gives them, its process mapping (PMAP) included: what a
// relaunch must find unchanged.
std::uint64_t test_fingerprint(const Test& t, bool column_major_map);
// The same but the grid and its mapping: what a run on another grid may continue.
std::uint64_t problem_fingerprint(const Test& t);

// Collective over comm: why the test whose context job `job` (TAG+t<i>) drained cannot go on as
// `t` on another grid (another test, another version of skt-hpl), the same on every rank; empty
// when it can, or when the job drained no epoch of it (the test then starts afresh).
std::string continuation_refusal(MPI_Comm comm, const std::string& job, const Test& t);

// How a test runs: what it checkpoints, how it is judged, what it prints.
struct RunOptions {
  CheckpointPolicy policy;
  bool column_major_map = false;  // PMAP 1
  double threshold = 16.0;        // ≤ 0: no residual check
  Report* report = nullptr;       // null: nothing is printed
  bool timing = false;
  double progress_every = 0;  // seconds between rank 0's progress lines on stderr; ≤ 0: none
  // The test may hold checkpoints of an earlier launch. Memory it cannot have then ends the run
  // (exit 2), its checkpoints kept for a launch with more, where a first launch skips the test.
  bool resuming = false;
  // A job of another grid whose last drained epoch of this test to continue on this one (its
  // context's tag, TAG+t<i>), when the test has no checkpoint of its own: the matrix is
  // redistributed and the factorization goes on from the panel that epoch reached.
  std::string from_job;
};

struct TestResult {
  bool passed = false;
  bool singular = false;
  // Not run: its memory could not be had on some rank (the matrix, or with checkpoints the
  // committed copy and checksums beside it). netlib HPL skips such a test too.
  bool out_of_memory = false;
  Residual residual;
  double wall = 0;           // from the first start to the end, relaunches included
  double uninterrupted = 0;  // the computation as if no failure had happened
  bool restarted = false;
  std::uint64_t epoch = 0;  // restored on the last relaunch
  int next_panel = 0;       // where it resumed
  std::string moved_from;   // the grid it was continued from (from_job), described; else empty
  int relaunches = 0;
  int checkpoints = 0;
  double checkpoint_seconds = 0;
  std::uint64_t sent_bytes = 0;  // by all ranks, for checkpoints, in this run
  Factorization::Timing timing;  // slowest rank's time per phase
  std::string text;              // what was printed, if anything
};

// Runs `test` on the ranks of `grid` (collective over grid.all()). The context's job tag comes
// from SKT_JOB.
TestResult run_test(const Test& test, const Grid& grid, const RunOptions& options);

}  // namespace skt::hpl
