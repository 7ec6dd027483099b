// SKT-HPL's factorization and solve against ScaLAPACK's PDGESV on the same matrix, over grids
// from 1x1 to 2x4, several block sizes, look-ahead depths 0 to 3, N a multiple of NB·P and NB·Q
// or not, and every algorithm variant; and a factorization resumed from a mid-run copy of the
// matrix (what a relaunch does) against the uninterrupted one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "hpl/grid.hpp"
#include "hpl/lu.hpp"
#include "hpl/matgen.hpp"
#include "hpl/run.hpp"
#include "hpl/scalapack.hpp"
#include "hpl/verify.hpp"

namespace {

using skt::hpl::Algorithm;
using skt::hpl::Bcast;
using skt::hpl::Fact;
using skt::hpl::Grid;
using skt::hpl::SwapAlgo;

struct Case {
  std::string name;
  int p, q, nb;
  Algorithm algo;
  bool column_major = false;
};

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// N = k·lcm(NB·P, NB·Q) + extra: every process holds the same share when extra is 0; otherwise
// the last block is partial and the processes' shares differ.
int size_of(const Case& c, int multiple, int extra) {
  return multiple * std::lcm(c.nb * c.p, c.nb * c.q) + extra;
}

// [A|b] of this process, generated like skt-hpl does.
struct Matrix {
  std::vector<double> storage;
  skt::hpl::LocalMatrix local;

  Matrix(const Grid& grid, int n, int nb) {
    local.n = n;
    local.nb = nb;
    local.mp = skt::hpl::numroc(n, nb, grid.myrow(), grid.nprow());
    local.nq = skt::hpl::numroc(n + 1, nb, grid.mycol(), grid.npcol());
    local.lda = std::max(1, local.mp);
    storage.assign(
        static_cast<std::size_t>(local.lda) * static_cast<std::size_t>(std::max(1, local.nq)), 0.0);
    local.a = storage.data();
    skt::hpl::generate_local(skt::hpl::kSeed, n, nb, grid.myrow(), grid.nprow(), grid.mycol(),
                             grid.npcol(), local.a, local.lda);
  }
};

double max_abs_difference(const std::vector<double>& x, const std::vector<double>& y) {
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    d = std::max(d, std::fabs(x[i] - y[i]));
  return d;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (const double v : x)
    m = std::max(m, std::fabs(v));
  return m;
}

class AgreesWithPdgesv : public ::testing::TestWithParam<Case> {};

TEST_P(AgreesWithPdgesv, SolutionAndResidual) {
  const Case& c = GetParam();
  if (c.p * c.q > world_size()) GTEST_SKIP() << "needs " << c.p * c.q << " ranks";
  const Grid grid(MPI_COMM_WORLD, c.p, c.q, c.column_major);
  if (!grid.in()) return;
  // Panels fewer than the grid's width, and well more; equal shares, and not.
  for (const int n : {size_of(c, 1, 0), size_of(c, 3, c.nb / 2 + 1)}) {
    Matrix m(grid, n, c.nb);
    skt::hpl::Factorization lu(grid, c.algo, m.local);
    lu.factor(
        0, [](int) { return false; }, [](int) {});
    ASSERT_EQ(lu.info(), 0);
    const std::vector<double> x = lu.solve();
    const auto reference = skt::hpl::solve_with_pdgesv(grid, n, c.nb, skt::hpl::kSeed);
    ASSERT_EQ(reference.info, 0);
    ASSERT_EQ(x.size(), reference.x.size());
    // Both are backward stable on the same matrix; they differ only in rounding.
    EXPECT_LT(max_abs_difference(x, reference.x), 1e-9 * max_abs(reference.x)) << "N=" << n;
    const auto residual = skt::hpl::verify(grid, n, c.nb, skt::hpl::kSeed, x);
    EXPECT_LT(residual.scaled, 16.0) << "N=" << n;
  }
}

TEST_P(AgreesWithPdgesv, ResumedFromAMidRunCopyGivesTheSameBits) {
  const Case& c = GetParam();
  if (c.p * c.q > world_size()) GTEST_SKIP() << "needs " << c.p * c.q << " ranks";
  const Grid grid(MPI_COMM_WORLD, c.p, c.q, c.column_major);
  if (!grid.in()) return;
  const int n = size_of(c, 3, 3);
  Matrix m(grid, n, c.nb);
  std::vector<double> copy;
  int resume_at = 0;
  skt::hpl::Factorization lu(grid, c.algo, m.local);
  const int stop = lu.panels() / 2;
  lu.factor(
      0, [&](int j) { return j + 1 == stop; },
      [&](int next) {
        copy = m.storage;
        resume_at = next;
      });
  const std::vector<double> uninterrupted = lu.solve();
  ASSERT_EQ(resume_at, stop);
  Matrix restored(grid, n, c.nb);
  restored.storage = copy;
  restored.local.a = restored.storage.data();
  skt::hpl::Factorization resumed(grid, c.algo, restored.local);
  resumed.factor(
      resume_at, [](int) { return false; }, [](int) {});
  EXPECT_EQ(resumed.solve(), uninterrupted);
}

Algorithm variant(Fact pfact, Fact rfact, int nbmin, int ndiv, Bcast bcast, int depth,
                  SwapAlgo swap, int swap_threshold, bool l1_notrans, bool u_notrans, bool equil) {
  Algorithm a;
  a.pfact = pfact;
  a.rfact = rfact;
  a.nbmin = nbmin;
  a.ndiv = ndiv;
  a.bcast = bcast;
  a.depth = depth;
  a.swap = swap;
  a.swap_threshold = swap_threshold;
  a.l1_notrans = l1_notrans;
  a.u_notrans = u_notrans;
  a.equil = equil;
  return a;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const Algorithm hpl_default;  // WR11C2R4-like: right, Crout... as in Algorithm's defaults
  const int grids[][2] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4}};
  for (const auto& g : grids) {
    const bool wide = g[0] * g[1] >= 4;
    for (const int nb : {4, 8}) {
      for (const int depth : {0, 1, 2, 3}) {
        if (depth > 1 && !wide) continue;
        Algorithm a = hpl_default;
        a.depth = depth;
        out.push_back({"grid" + std::to_string(g[0]) + "x" + std::to_string(g[1]) + "_nb" +
                           std::to_string(nb) + "_depth" + std::to_string(depth),
                       g[0], g[1], nb, a});
      }
    }
  }
  // Every panel factorization, broadcast topology, swap algorithm and storage form, on 2x4.
  const Fact facts[] = {Fact::left, Fact::crout, Fact::right};
  for (const Fact pf : facts) {
    for (const Fact rf : facts) {
      out.push_back(
          {std::string("pfact") + skt::hpl::fact_name(pf) + "_rfact" + skt::hpl::fact_name(rf), 2,
           4, 8,
           variant(pf, rf, 2, 2, Bcast::ring_modified, 1, SwapAlgo::mix, 16, false, false, true)});
    }
  }
  for (int b = 0; b <= 5; ++b) {
    const auto bcast = static_cast<Bcast>(b);
    out.push_back({std::string("bcast") + skt::hpl::bcast_name(bcast), 2, 4, 8,
                   variant(Fact::right, Fact::crout, 4, 2, bcast, b % 2, SwapAlgo::mix, 16, false,
                           true, true)});
  }
  const std::pair<SwapAlgo, const char*> swaps[] = {{SwapAlgo::binary_exchange, "binexch"},
                                                    {SwapAlgo::spread_roll, "long"},
                                                    {SwapAlgo::mix, "mix"}};
  for (const auto& [swap, name] : swaps) {
    for (const bool equil : {false, true}) {
      out.push_back({std::string("swap_") + name + (equil ? "_equil" : "_noequil"), 4, 2, 4,
                     variant(Fact::left, Fact::right, 1, 3, Bcast::two_rings, 1, swap, 8, true,
                             false, equil)});
    }
  }
  out.push_back({"column_major_2x2_nbmin3_ndiv3", 2, 2, 8,
                 variant(Fact::crout, Fact::left, 3, 3, Bcast::spread, 0, SwapAlgo::mix, 64, true,
                         true, false),
                 true});
  out.push_back({"column_major_2x4", 2, 4, 4, hpl_default, true});
  // Rows moved by a swap travel in chunks of 256 columns: several chunks, to several process rows.
  out.push_back({"swap_in_chunks_4x2", 4, 2, 64, hpl_default});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Hpl, AgreesWithPdgesv, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
