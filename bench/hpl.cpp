// bench-hpl: SKT-HPL side by side with ScaLAPACK's PDGESV on the same matrix, N, NB and grid, in
// one run, next to the DGEMM rate of the same processes; the cost of checkpoints (every K panels,
// and at Daly's interval for some MTBFs); and checkpoint traffic for the full, right-side and
// corner strategies.
//
//   mpirun -n 2 bench-hpl --n 12288 --nb 192 --p 2 --q 1
#include <cblas.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "bench/table.hpp"
#include "hpl/grid.hpp"
#include "hpl/matgen.hpp"
#include "hpl/report.hpp"
#include "hpl/run.hpp"
#include "hpl/scalapack.hpp"
#include "hpl/verify.hpp"

namespace {

using skt::hpl::Grid;
using skt::hpl::numroc;

struct Settings {
  int n = 12288, nb = 192, p = 2, q = 1;
  int pairs = 3;
  std::string mtbfs = "60,300,1800";
  int every = 0;  // panels between checkpoints; 0: a tenth of the panels
  std::string csv = "hpl.csv";
  std::vector<std::string> parts{"compare", "overhead", "traffic"};
};

bool wanted(const Settings& s, const std::string& part) {
  return std::find(s.parts.begin(), s.parts.end(), part) != s.parts.end();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// PDGESV on the matrix SKT-HPL generates; returns (seconds, scaled residual).
std::pair<double, double> run_pdgesv(const Settings& s, const Grid& grid) {
  const auto r = skt::hpl::solve_with_pdgesv(grid, s.n, s.nb, skt::hpl::kSeed);
  return {r.seconds, skt::hpl::verify(grid, s.n, s.nb, skt::hpl::kSeed, r.x).scaled};
}

// The rate of the DGEMM at the heart of the update, on every rank at once: this process's share
// of the first trailing update.
double dgemm_rate(const Settings& s, const Grid& grid) {
  const int m = numroc(s.n, s.nb, grid.myrow(), grid.nprow());
  const int n = numroc(s.n, s.nb, grid.mycol(), grid.npcol());
  const int k = s.nb;
  std::vector<double> a(static_cast<std::size_t>(m) * k, 0.5),
      b(static_cast<std::size_t>(k) * n, 0.25), c(static_cast<std::size_t>(m) * n, 1.0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    MPI_Barrier(grid.all());
    const double start = MPI_Wtime();
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, -1.0, a.data(), m, b.data(), k,
                1.0, c.data(), m);
    double t = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, grid.all());
    best = std::min(best, t);
  }
  return 2.0 * m * n * k / best / 1e9 * s.p * s.q;
}

skt::hpl::Test test_of(const Settings& s) {
  skt::hpl::Test t;
  t.n = s.n;
  t.nb = s.nb;
  t.p = s.p;
  t.q = s.q;
  t.algo.pfact = skt::hpl::Fact::right;
  t.algo.rfact = skt::hpl::Fact::crout;
  t.algo.nbmin = 4;
  t.algo.ndiv = 2;
  t.algo.bcast = skt::hpl::Bcast::ring_modified;
  t.algo.depth = 1;
  t.algo.u_notrans = true;
  return t;
}

skt::hpl::TestResult run_skt(const Settings& s, const Grid& grid,
                             const skt::hpl::CheckpointPolicy& policy, const std::string& tag) {
  // Every rank must name the same job: rank 0's process id makes it unique on the machine.
  static const long job_id = [&] {
    long pid = getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, grid.all());
    return pid;
  }();
  static int counter = 0;
  setenv("SKT_JOB", fmt::format("bench-hpl-{}-{}-{}", job_id, tag, ++counter).c_str(), 1);
  skt::hpl::RunOptions run;
  run.policy = policy;
  const skt::hpl::TestResult result = skt::hpl::run_test(test_of(s), grid, run);
  if (result.out_of_memory) {
    throw std::runtime_error(fmt::format("N={}: this machine cannot hold SKT-HPL's matrix{}", s.n,
                                         policy.none ? "" : " and its checkpoints"));
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CLI::App app{"bench-hpl: SKT-HPL vs PDGESV and the DGEMM rate; checkpoint overhead and traffic"};
  Settings s;
  app.add_option("--n", s.n, "matrix order");
  app.add_option("--nb", s.nb, "block size");
  app.add_option("--p", s.p, "process rows");
  app.add_option("--q", s.q, "process columns");
  app.add_option("--pairs", s.pairs, "alternating SKT-HPL / PDGESV pairs");
  app.add_option("--mtbfs", s.mtbfs,
                 "MTBFs in seconds for the Daly-interval runs, comma separated");
  app.add_option("--every", s.every, "panels between checkpoints (default: a tenth of the panels)");
  app.add_option("--csv", s.csv, "CSV output (rank 0)");
  app.add_option("--parts", s.parts,
                 "what to run: compare, overhead, traffic (default: all), or dgemm (the DGEMM "
                 "rate alone, which compare also measures)")
      ->delimiter(',')
      ->check(CLI::IsMember({"dgemm", "compare", "overhead", "traffic"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : 0;
    MPI_Finalize();
    return code;
  }
  if (s.p * s.q != size || s.n < 1 || s.nb < 1) {
    if (rank == 0) fmt::print(stderr, "bench-hpl: need P·Q = {} ranks, N ≥ 1 and NB ≥ 1\n", size);
    MPI_Finalize();
    return 2;
  }
  setenv("SKT_NODE", fmt::format("h{}", rank).c_str(), 1);
  setenv("SKT_LOG", "warn", 0);
  if (std::getenv("SKT_GROUP_SIZE") == nullptr) {
    setenv("SKT_GROUP_SIZE", std::to_string(std::min(size, 4)).c_str(), 1);
  }
  const Grid grid(MPI_COMM_WORLD, s.p, s.q, false);
  const int panels = (s.n + s.nb - 1) / s.nb;
  const int every = s.every > 0 ? s.every : std::max(1, panels / 10);
  std::unique_ptr<skt::bench::Table> table;
  if (rank == 0) {
    fmt::print("N={} NB={} grid {}x{}, {} ranks, OPENBLAS_NUM_THREADS={}; variant {}\n", s.n, s.nb,
               s.p, s.q, size,
               std::getenv("OPENBLAS_NUM_THREADS") ? std::getenv("OPENBLAS_NUM_THREADS") : "unset",
               test_of(s).algo.encode(false));
    table = std::make_unique<skt::bench::Table>(
        std::vector<std::string>{"run", "what", "seconds", "Gflops", "ratio", "note"}, s.csv, true,
        std::vector<int>{10, 24, 10, 10, 8, 2});
  }
  auto row = [&](const std::string& run, const std::string& what, double seconds, double ratio,
                 const std::string& note) {
    if (rank == 0) {
      table->row({run, what, skt::bench::num(seconds, 2),
                  skt::bench::num(skt::hpl::Report::gflops(s.n, seconds), 2),
                  ratio > 0 ? skt::bench::num(ratio, 3) : "-", note});
    }
  };

  skt::hpl::CheckpointPolicy none;
  none.none = true;

  const double dgemm = wanted(s, "compare") || wanted(s, "dgemm") ? dgemm_rate(s, grid) : 0;
  if (dgemm > 0 && rank == 0) {
    table->row(
        {"dgemm", "all ranks at once", "-", skt::bench::num(dgemm, 2), "-", "m=mp n=nq k=NB"});
  }
  if (wanted(s, "compare")) {
    // Alternating pairs, so that drifts of the machine hit both alike.
    std::vector<double> ratios, skt_times;
    for (int i = 0; i < s.pairs; ++i) {
      const auto r = run_skt(s, grid, none, "plain");
      const auto [pd, pd_resid] = run_pdgesv(s, grid);
      skt_times.push_back(r.wall);
      ratios.push_back(pd / r.wall);
      row(fmt::format("pair {}", i + 1), "SKT-HPL no checkpoint", r.wall,
          skt::hpl::Report::gflops(s.n, r.wall) / dgemm,
          fmt::format("residual {:.3e}; ratio: of the DGEMM rate", r.residual.scaled));
      row(fmt::format("pair {}", i + 1), "PDGESV", pd, pd / r.wall,
          fmt::format("residual {:.3e}; ratio: SKT-HPL/PDGESV", pd_resid));
    }
    const double plain = median(skt_times);
    row("median", "SKT-HPL / PDGESV", plain, median(ratios), fmt::format("of {} pairs", s.pairs));
    row("median", "SKT-HPL / DGEMM rate", plain, skt::hpl::Report::gflops(s.n, plain) / dgemm,
        "efficiency");
  }

  if (wanted(s, "overhead")) {
    // Each run with checkpoints alternates with one without; every K panels is repeated like the
    // comparison, the Daly runs once per MTBF.
    skt::hpl::CheckpointPolicy k;
    k.every = every;
    std::vector<double> ratios;
    for (int i = 0; i < s.pairs; ++i) {
      const auto base = run_skt(s, grid, none, "base");
      const auto with = run_skt(s, grid, k, "every");
      ratios.push_back(base.wall / with.wall);
      row(fmt::format("pair {}", i + 1), fmt::format("every {} panels", every), with.wall,
          base.wall / with.wall,
          fmt::format("{} checkpoints ({:.2f} s in them); ratio: Gflops with/without ({:.2f} s)",
                      with.checkpoints, with.checkpoint_seconds, base.wall));
    }
    row("median", fmt::format("every {} panels", every), 0, median(ratios),
        fmt::format("of {} pairs: Gflops with/without checkpoints", s.pairs));
    std::stringstream in(s.mtbfs);
    std::string mtbf;
    while (std::getline(in, mtbf, ',')) {
      setenv("SKT_MTBF", mtbf.c_str(), 1);
      skt::hpl::CheckpointPolicy daly;
      daly.automatic = true;
      const auto base = run_skt(s, grid, none, "base");
      const auto with = run_skt(s, grid, daly, "daly");
      row("Daly", "MTBF " + mtbf + " s", with.wall, base.wall / with.wall,
          fmt::format("{} checkpoints, {:.1f} % over the run without ({:.2f} s)", with.checkpoints,
                      100.0 * (with.wall / base.wall - 1.0), base.wall));
    }
    unsetenv("SKT_MTBF");
  }

  if (wanted(s, "traffic")) {
    double full_bytes = 0;
    for (const auto strategy :
         {skt::hpl::Strategy::full, skt::hpl::Strategy::side, skt::hpl::Strategy::corner}) {
      skt::hpl::CheckpointPolicy p;
      p.every = every;
      p.strategy = strategy;
      const auto r = run_skt(s, grid, p, "traffic");
      const double bytes = static_cast<double>(r.sent_bytes);
      if (strategy == skt::hpl::Strategy::full) full_bytes = bytes;
      row("traffic", skt::hpl::strategy_name(strategy), r.wall, bytes > 0 ? full_bytes / bytes : 0,
          fmt::format("{:.1f} MiB sent in {} checkpoints ({:.2f} s in them); ratio: full/this",
                      bytes / 1048576.0, r.checkpoints, r.checkpoint_seconds));
    }
  }
  MPI_Finalize();
  return 0;
}
