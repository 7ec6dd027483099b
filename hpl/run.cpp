#include "hpl/run.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/mpi.hpp"
#include "hpl/matgen.hpp"
#include "hpl/report.hpp"
#include "hpl/reshape.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt::hpl {

namespace {

// What a test checkpoints besides the matrix.
struct TestState {
  std::uint64_t fingerprint;  // of the test's parameters: a relaunch must run the same test
  std::int32_t next_panel;
  std::int32_t last_checkpoint_panel;
  std::int32_t relaunches;
  std::int32_t checkpoints;
  double compute_seconds;  // time in the solve up to the last checkpoint
  double start_wall;       // when the test first started, seconds since 1970
  double checkpoint_seconds;
  // What a run on another grid continues (skt-hpl --from-job): the test without its grid, and the
  // grid the matrix is distributed over.
  std::uint64_t problem;
  std::int32_t nprow;
  std::int32_t npcol;
  std::int32_t column_major;
};

// The pages of a matrix that is never checkpointed: the process's own, as netlib HPL's malloc
// gives, with nothing to make room for beside them (no committed copy, no checksums) and nothing
// left behind.
class OwnPages {
 public:
  explicit OwnPages(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 1)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw skt::Error(SKT_ERR_NOMEM, fmt::format("cannot allocate {} bytes for the matrix: {}",
                                                  bytes, std::strerror(errno)));
    }
    data_ = static_cast<double*>(p);
  }
  ~OwnPages() { munmap(data_, bytes_); }
  OwnPages(const OwnPages&) = delete;
  OwnPages& operator=(const OwnPages&) = delete;
  double* data() const noexcept { return data_; }

 private:
  std::size_t bytes_;
  double* data_ = nullptr;
};

// Collective over comm: the lowest rank that has a message ("" where a rank has none) and that
// message, on every rank; -1 where no rank has one.
std::pair<int, std::string> first_message(MPI_Comm comm, const std::string& own) {
  int rank = 0, size = 0;
  SKT_MPI(MPI_Comm_rank(comm, &rank));
  SKT_MPI(MPI_Comm_size(comm, &size));
  int first = own.empty() ? size : rank;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return {-1, std::string()};
  return {first, broadcast_string(comm, own, first)};
}

// Collective: the lowest rank's refusal ("" where a rank has none), on every rank of the grid, so
// that a test one rank cannot hold is skipped by all.
std::string first_refusal(const Grid& grid, const std::string& own) {
  return first_message(grid.all(), own).second;
}

// Collective: the lowest rank's error, on every rank of the grid (nothing where no rank has one).
std::optional<skt::Error> first_error(const Grid& grid, const std::optional<skt::Error>& own) {
  const auto [first, message] = first_message(grid.all(), own ? own->what() : "");
  if (first < 0) return std::nullopt;
  int code = own ? own->code() : 0;
  SKT_MPI(MPI_Bcast(&code, 1, MPI_INT, first, grid.all()));
  return skt::Error(code, message);
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// SKT_HPL_CRASH=<panel>:<rank> (testing): on a first launch, the process of that rank kills itself
// in the middle of iteration <panel>, with the panel factored and broadcast and its update not yet
// applied. A relaunch restores from a checkpoint and goes through, even with the variable still
// set. SKT_HPL_PAUSE=<panel> (testing, demonstrations): on a first launch, every rank stops at the
// same point of that iteration, rank 0 says so, and they wait to be killed, so that a node can be
// killed at a known point from outside.
struct CrashPoint {
  int panel = -1;
  int rank = -1;
  int pause_panel = -1;
};

CrashPoint crash_point() {
  CrashPoint c;
  char tail = 0;
  const char* v = std::getenv("SKT_HPL_CRASH");
  if (v != nullptr && *v != '\0' &&
      (std::sscanf(v, "%d:%d%c", &c.panel, &c.rank, &tail) != 2 || c.panel < 0 || c.rank < 0)) {
    throw std::invalid_argument(fmt::format("SKT_HPL_CRASH='{}': expected <panel>:<rank>", v));
  }
  const char* p = std::getenv("SKT_HPL_PAUSE");
  if (p != nullptr && *p != '\0' &&
      (std::sscanf(p, "%d%c", &c.pause_panel, &tail) != 1 || c.pause_panel < 0)) {
    throw std::invalid_argument(fmt::format("SKT_HPL_PAUSE='{}': expected a panel number", p));
  }
  return c;
}

void crash_if_due(const CrashPoint& c, int panel, bool restarted, MPI_Comm grid) {
  if (restarted) return;
  int rank = 0;
  SKT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (panel == c.panel && rank == c.rank) {
    std::fprintf(stderr, "SKT_HPL_CRASH: rank %d kills itself in the middle of panel %d\n", rank,
                 panel);
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  if (panel == c.pause_panel) {
    SKT_MPI(MPI_Barrier(grid));
    if (rank == 0)
      std::printf("SKT_HPL_PAUSE: every rank waits in the middle of panel %d\n", panel);
    std::fflush(stdout);
    for (;;)
      ::pause();
  }
}

// The state of the test an old job's epoch holds, when it can go on as `t` on another grid; throws
// skt::Error(SKT_ERR_MISMATCH) naming why not.
TestState continuable_state(skt::Epoch& old, const std::string& job, const Test& t) {
  // A state of another size is of another version of skt-hpl, which alone can continue it.
  if (old.region_bytes(0, "state") != sizeof(TestState)) {
    throw skt::Error(SKT_ERR_MISMATCH,
                     fmt::format("job '{}' was written by another version of skt-hpl (its test "
                                 "state has {} bytes, this one's {})",
                                 job, old.region_bytes(0, "state"), sizeof(TestState)));
  }
  TestState was{};
  old.read({{0, "state", 0, sizeof was, &was}});
  if (was.problem != problem_fingerprint(t)) {
    throw skt::Error(SKT_ERR_MISMATCH,
                     fmt::format("job '{}' ran another test than N={} NB={} with these variants: "
                                 "only its grid may change (P, Q, PMAP)",
                                 job, t.n, t.nb));
  }
  if (was.nprow * was.npcol != old.ranks()) {
    throw skt::Error(SKT_ERR_MISMATCH,
                     fmt::format("job '{}' records a {}x{} grid but its epoch has {} ranks", job,
                                 was.nprow, was.npcol, old.ranks()));
  }
  return was;
}

// The old job's epoch of the test, or nothing when it drained none (the test then starts afresh,
// as rank 0 says, when `say` is set). Collective over comm.
std::optional<skt::Epoch> open_old_test(MPI_Comm comm, const std::string& job, bool say) {
  try {
    return std::optional<skt::Epoch>(std::in_place, comm, job);
  } catch (const skt::Error& e) {
    if (e.code() != SKT_ERR_UNRECOVERABLE) throw;
    int rank = 0;
    SKT_MPI(MPI_Comm_rank(comm, &rank));
    if (say && rank == 0) {
      std::fprintf(stderr, "skt-hpl: the test starts afresh on this grid: %s\n", e.what());
    }
    return std::nullopt;
  }
}

// The last drained epoch of this test that job `job` wrote on another grid, continued on this one:
// its state, and the matrix taken piece by piece from the old ranks that held it. The epoch's
// number and the old grid ("2x2"), or nothing where the job drained no epoch of the test.
// Collective over the grid; throws skt::Error.
struct Continued {
  std::uint64_t epoch = 0;
  std::string grid;  // the old grid, and where its ranks' matrices were read from
};
std::optional<Continued> continue_from(const std::string& job, const Test& t, const Grid& grid,
                                       bool column_major_map, LocalMatrix& m, TestState& state) {
  std::optional<skt::Epoch> old = open_old_test(grid.all(), job, true);
  if (!old) return std::nullopt;
  const TestState was = continuable_state(*old, job, t);
  const GridShape from{was.nprow, was.npcol, was.column_major != 0};
  const GridShape to{grid.nprow(), grid.npcol(), grid.column_major()};
  std::vector<skt_epoch_piece> pieces;
  for (const MatrixPiece& p :
       redistribution(t.n, t.nb, t.algo.align, from, to, grid.myrow(), grid.mycol())) {
    pieces.push_back(
        {p.from_rank, "A", p.from * sizeof(double), p.count * sizeof(double), m.a + p.to});
  }
  old->read(pieces);
  state = was;
  state.fingerprint = test_fingerprint(t, column_major_map);
  state.nprow = to.nprow;
  state.npcol = to.npcol;
  state.column_major = to.column_major ? 1 : 0;
  ++state.relaunches;
  const int in_memory = old->ranks_in_memory();
  return Continued{old->number(),
                   fmt::format("{}x{} grid ({} of its ranks read from memory, {} from drained "
                               "files)",
                               from.nprow, from.npcol, in_memory, old->ranks() - in_memory)};
}

// What iterations since panel `since` changed: rows and columns from since·NB (corner), or whole
// columns from there (side).
std::vector<skt_range> changed_since(const LocalMatrix& m, const Grid& grid, Strategy strategy,
                                     int since) {
  const int from = since * m.nb;
  const int r0 = strategy == Strategy::corner ? numroc(from, m.nb, grid.myrow(), grid.nprow()) : 0;
  const int c0 = numroc(from, m.nb, grid.mycol(), grid.npcol());
  std::vector<skt_range> ranges;
  if (m.mp <= r0) return ranges;
  for (int c = c0; c < m.nq; ++c) {
    ranges.push_back({"A",
                      (static_cast<std::size_t>(c) * static_cast<std::size_t>(m.lda) +
                       static_cast<std::size_t>(r0)) *
                          sizeof(double),
                      static_cast<std::size_t>(m.mp - r0) * sizeof(double)});
  }
  return ranges;
}

}  // namespace

namespace {

// The test's parameters but its grid, and how the matrix is generated: a checkpoint of a matrix
// drawn another way (the hash generator of earlier versions) must not be resumed and verified
// against this one.
std::string problem_text(const Test& t) {
  return fmt::format("netlib-pdmatgen {} {} {} {} {} {} {} {} {} {} {} {} {} {}", t.n, t.nb,
                     static_cast<int>(t.algo.pfact), static_cast<int>(t.algo.rfact), t.algo.nbmin,
                     t.algo.ndiv, static_cast<int>(t.algo.bcast), t.algo.depth,
                     static_cast<int>(t.algo.swap), t.algo.swap_threshold, t.algo.l1_notrans,
                     t.algo.u_notrans, t.algo.equil, t.algo.align);
}

}  // namespace

std::string continuation_refusal(MPI_Comm comm, const std::string& job, const Test& t) {
  std::optional<skt::Error> error;
  try {
    if (std::optional<skt::Epoch> old = open_old_test(comm, job, false)) {
      continuable_state(*old, job, t);
    }
  } catch (const skt::Error& e) {
    error = e;
  }
  return first_message(comm, error ? error->what() : "").second;
}

std::uint64_t problem_fingerprint(const Test& t) {
  return std::hash<std::string>{}(problem_text(t));
}

// PMAP decides which local matrix each rank holds, and local matrices of the same size at two
// places of a grid are common (N = 255, NB = 16 on 2x2 in either mapping): a changed PMAP is no
// size mismatch.
std::uint64_t test_fingerprint(const Test& t, bool column_major_map) {
  return std::hash<std::string>{}(fmt::format("{} grid {} {} {}", problem_text(t), t.p, t.q,
                                              column_major_map ? "column-major" : "row-major"));
}

int default_checkpoint_every(int panels) noexcept {
  return std::max(1, panels / 10);
}

const char* strategy_name(Strategy s) noexcept {
  switch (s) {
    case Strategy::corner:
      return "corner";
    case Strategy::side:
      return "right side";
    case Strategy::full:
      return "full";
  }
  return "?";
}

TestResult run_test(const Test& t, const Grid& grid, const RunOptions& options) {
  const CheckpointPolicy& policy = options.policy;
  Report* const report = options.report;
  TestResult result;
  LocalMatrix m;
  m.n = t.n;
  m.nb = t.nb;
  m.mp = numroc(t.n, t.nb, grid.myrow(), grid.nprow());
  m.nq = numroc(t.n + 1, t.nb, grid.mycol(), grid.npcol());
  m.lda = leading_dimension(m.mp, t.algo.align);
  const std::size_t elements =
      static_cast<std::size_t>(m.lda) * static_cast<std::size_t>(std::max(1, m.nq));
  std::optional<skt::Context> ctx;
  std::optional<OwnPages> own;
  if (!policy.none) ctx.emplace(grid.all());
  std::string refusal;
  try {
    if (ctx) {
      m.a = ctx->alloc<double>("A", elements).data();
    } else {
      m.a = own.emplace(elements * sizeof(double)).data();
    }
  } catch (const skt::Error& e) {
    if (e.code() != SKT_ERR_NOMEM) throw;
    refusal = fmt::format("rank {}: {}", grid.rank_of(grid.myrow(), grid.mycol()), e.what());
  }
  refusal = first_refusal(grid, refusal);
  if (!refusal.empty() && ctx && options.resuming) throw skt::Error(SKT_ERR_NOMEM, refusal);
  TestState state{};
  if (ctx && refusal.empty()) {
    ctx->protect("state", state);
    try {
      result.epoch = ctx->recover();
    } catch (const skt::Error& e) {
      // The library agrees on its refusal: every rank of the grid is here with the same one.
      if (e.code() != SKT_ERR_NOMEM || options.resuming) throw;
      refusal = e.what();
    }
  }
  if (!refusal.empty()) {
    result.out_of_memory = true;
    if (report != nullptr) {
      result.text += report->line(fmt::format(
          "HPL ERROR: N={} NB={} P={} Q={}: Memory allocation failed for A, x and b. Skip. ({})",
          t.n, t.nb, t.p, t.q, refusal));
      if (ctx) {
        result.text += report->line(
            "SKT: checkpoints keep a committed copy of the matrix and checksums beside it; "
            "--no-checkpoint runs this test in the memory netlib HPL takes, and --suggest-n gives "
            "the largest N whose checkpoints fit the memory this job has");
      }
    }
    return result;  // a context that never recovered removes what it created
  }
  result.restarted = result.epoch > 0;
  std::optional<Continued> continued;
  if (!result.restarted && !options.from_job.empty()) {
    // Refused on any rank (a block of a file damaged), refused on all: the test's context, which
    // holds nothing yet, goes, and the old job stays for another try.
    std::optional<skt::Error> error;
    try {
      continued = continue_from(options.from_job, t, grid, options.column_major_map, m, state);
    } catch (const skt::Error& e) {
      error = e;
    }
    if (const auto agreed = first_error(grid, error)) {
      ctx->finalize(true);
      throw *agreed;
    }
  }
  if (continued) {
    // The test's own first checkpoint, at once: from here on the old job is not needed.
    result.restarted = true;
    result.epoch = continued->epoch;
    result.moved_from = continued->grid;
    state.last_checkpoint_panel = state.next_panel;
    ctx->checkpoint();
  } else if (!result.restarted) {
    state = TestState{};
    state.fingerprint = test_fingerprint(t, options.column_major_map);
    state.problem = problem_fingerprint(t);
    state.nprow = grid.nprow();
    state.npcol = grid.npcol();
    state.column_major = grid.column_major() ? 1 : 0;
    state.start_wall = wall_now();
    generate_local(kSeed, t.n, t.nb, grid.myrow(), grid.nprow(), grid.mycol(), grid.npcol(), m.a,
                   m.lda);
  } else {
    // Agreed, so that every rank refuses together. skt-hpl's record of the run's tests refuses an
    // edited HPL.dat first; this holds where that record was removed and the test's was not.
    int foreign = state.fingerprint != test_fingerprint(t, options.column_major_map) ? 1 : 0;
    SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &foreign, 1, MPI_INT, MPI_MAX, grid.all()));
    if (foreign != 0) {
      throw skt::Error(SKT_ERR_MISMATCH,
                       "the checkpoint of this job belongs to another test of HPL.dat, or to "
                       "another process mapping (PMAP); relaunch with the same HPL.dat");
    }
    ++state.relaunches;
  }
  result.next_panel = state.next_panel;
  Factorization lu(grid, t.algo, m);
  const int panels = lu.panels();
  const CrashPoint crash = crash_point();
  ProgressReport progress(grid.myrow() == 0 && grid.mycol() == 0, options.progress_every, t.n, t.nb,
                          t.p, t.q, panels, state.next_panel, MPI_Wtime());
  auto due = [&](int j) {
    crash_if_due(crash, j, result.restarted, grid.all());
    progress.at(j, MPI_Wtime());
    if (policy.none || j + 1 >= panels) return false;
    if (policy.automatic) return ctx->need_checkpoint();
    const int every = policy.every > 0 ? policy.every : default_checkpoint_every(panels);
    return (j + 1) % every == 0;
  };
  const double accumulated = state.compute_seconds;
  double start = 0;
  auto checkpoint = [&](int next) {
    const int since = state.last_checkpoint_panel;
    state.next_panel = next;
    state.last_checkpoint_panel = next;
    state.compute_seconds = accumulated + (MPI_Wtime() - start);
    ++state.checkpoints;
    const double begin = MPI_Wtime();
    if (policy.strategy == Strategy::full) {
      ctx->checkpoint();
    } else {
      ctx->checkpoint_dirty(changed_since(m, grid, policy.strategy, since));
    }
    state.checkpoint_seconds += MPI_Wtime() - begin;
    result.sent_bytes += ctx->stats().last_sent_bytes;
  };
  SKT_MPI(MPI_Barrier(grid.all()));
  const std::time_t started = std::time(nullptr);
  start = MPI_Wtime();
  lu.factor(state.next_panel, due, checkpoint);
  const std::vector<double> x = lu.solve();
  double elapsed = MPI_Wtime() - start;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, grid.all()));
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &result.sent_bytes, 1, MPI_UINT64_T, MPI_SUM, grid.all()));
  const std::time_t ended = std::time(nullptr);
  result.uninterrupted = accumulated + elapsed;
  result.wall = result.restarted ? wall_now() - state.start_wall : elapsed;
  result.relaunches = state.relaunches;
  result.checkpoints = state.checkpoints;
  result.checkpoint_seconds = state.checkpoint_seconds;
  const auto& tm = lu.timing();
  double phases[6] = {tm.factor, tm.receive, tm.swap, tm.trsm, tm.update, tm.solve};
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, phases, 6, MPI_DOUBLE, MPI_MAX, grid.all()));
  // The wait for panels of every rank: what an oversubscribed run can still compare.
  int grid_size = 0;
  SKT_MPI(MPI_Comm_size(grid.all(), &grid_size));
  std::vector<double> waits(static_cast<std::size_t>(grid_size));
  SKT_MPI(MPI_Allgather(&tm.receive, 1, MPI_DOUBLE, waits.data(), 1, MPI_DOUBLE, grid.all()));
  result.timing = {phases[0], phases[1], phases[2], phases[3], phases[4], phases[5]};

  auto print = [&](const std::string& line) {
    if (report != nullptr) result.text += report->line(line);
  };
  if (report != nullptr) {
    result.text += report->result(
        t.algo.encode(options.column_major_map), t.n, t.nb, t.p, t.q, result.wall,
        result.restarted ? static_cast<std::time_t>(state.start_wall) : started, ended);
  }
  if (!result.moved_from.empty()) {
    print(fmt::format(
        "SKT: continued on the {}x{} grid from epoch {} of job {}, which ran on the {}, at panel "
        "{} of {}, the matrix redistributed; {} relaunch{} in all; time lost {:.2f} s",
        t.p, t.q, result.epoch, options.from_job, result.moved_from, result.next_panel, panels,
        state.relaunches, state.relaunches == 1 ? "" : "es", result.wall - result.uninterrupted));
  } else if (result.restarted) {
    print(fmt::format(
        "SKT: restored epoch {} (panel {} of {}) after {} relaunch{}; time lost {:.2f} s",
        result.epoch, result.next_panel, panels, state.relaunches,
        state.relaunches == 1 ? "" : "es", result.wall - result.uninterrupted));
  }
  if (result.restarted) {
    print(
        fmt::format("SKT: wall time {:.2f} s ({:.4e} Gflops); uninterrupted computation {:.2f} s "
                    "({:.4e} Gflops)",
                    result.wall, Report::gflops(t.n, result.wall), result.uninterrupted,
                    Report::gflops(t.n, result.uninterrupted)));
  }
  if (state.checkpoints > 0) {
    print(fmt::format(
        "SKT: {} checkpoint{} ({}), {:.2f} s in all ({:.1f} % of the solve); {:.1f} MiB "
        "sent by all ranks in this run",
        state.checkpoints, state.checkpoints == 1 ? "" : "s", strategy_name(policy.strategy),
        state.checkpoint_seconds,
        100.0 * state.checkpoint_seconds / std::max(result.uninterrupted, 1e-9),
        static_cast<double>(result.sent_bytes) / 1048576.0));
  }
  if (options.timing) {
    print(
        fmt::format("SKT: max time per rank: factor {:.2f} s, receive {:.2f} s, swap {:.2f} s, "
                    "trsm {:.2f} s, update {:.2f} s, solve {:.2f} s",
                    phases[0], phases[1], phases[2], phases[3], phases[4], phases[5]));
    std::string per_rank;
    for (const double w : waits)
      per_rank += fmt::format(" {:.3f}", w);
    print("SKT: waiting for panels, seconds per rank:" + per_rank);
  }
  if (options.threshold <= 0) {
    result.passed = true;  // as netlib: a threshold ≤ 0 asks for no check
  } else if (lu.info() != 0) {
    result.singular = true;
    print(fmt::format("HPL ERROR: the matrix is singular at column {}; skip", lu.info() - 1));
  } else {
    result.residual = verify(grid, t.n, t.nb, kSeed, x);
    if (report != nullptr) result.text += report->residual(result.residual, options.threshold);
    result.passed = result.residual.scaled < options.threshold;
  }
  if (ctx) ctx->finalize(true);
  return result;
}

}  // namespace skt::hpl
