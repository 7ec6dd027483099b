#include "hpl/reshape.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "hpl/grid.hpp"

namespace skt::hpl {
namespace {

// Element (i, j) of the global matrix: distinct everywhere.
double element(int i, int j) {
  return i * 100003.0 + j;
}

// Every process's local matrix of grid `g`, filled element by element from the global one.
std::vector<std::vector<double>> distribute(int n, int nb, int align, const GridShape& g) {
  std::vector<std::vector<double>> locals(static_cast<std::size_t>(g.nprow * g.npcol));
  for (int prow = 0; prow < g.nprow; ++prow) {
    for (int pcol = 0; pcol < g.npcol; ++pcol) {
      const int mp = numroc(n, nb, prow, g.nprow), nq = numroc(n + 1, nb, pcol, g.npcol);
      const int lda = leading_dimension(mp, align);
      auto& local = locals[static_cast<std::size_t>(g.rank_of(prow, pcol))];
      local.assign(static_cast<std::size_t>(lda) * static_cast<std::size_t>(std::max(nq, 1)), -1.0);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j <= n; ++j) {
          if (owner(i, nb, g.nprow) != prow || owner(j, nb, g.npcol) != pcol) continue;
          local[static_cast<std::size_t>(local_index(j, nb, g.npcol)) *
                    static_cast<std::size_t>(lda) +
                static_cast<std::size_t>(local_index(i, nb, g.nprow))] = element(i, j);
        }
      }
    }
  }
  return locals;
}

void expect_moves(int n, int nb, int align, const GridShape& from, const GridShape& to) {
  const auto old_locals = distribute(n, nb, align, from);
  const auto expected = distribute(n, nb, align, to);
  for (int prow = 0; prow < to.nprow; ++prow) {
    for (int pcol = 0; pcol < to.npcol; ++pcol) {
      const auto& want = expected[static_cast<std::size_t>(to.rank_of(prow, pcol))];
      std::vector<double> got(want.size(), -1.0);
      for (const MatrixPiece& p : redistribution(n, nb, align, from, to, prow, pcol)) {
        const auto& source = old_locals[static_cast<std::size_t>(p.from_rank)];
        ASSERT_LE(p.from + p.count, source.size());
        ASSERT_LE(p.to + p.count, got.size());
        std::copy_n(source.begin() + static_cast<long>(p.from), p.count,
                    got.begin() + static_cast<long>(p.to));
      }
      EXPECT_EQ(got, want) << "n " << n << " nb " << nb << ", " << from.nprow << "x" << from.npcol
                           << " to " << to.nprow << "x" << to.npcol << ", process (" << prow << ", "
                           << pcol << ")";
    }
  }
}

TEST(Redistribution, MovesEveryElementToItsNewOwner) {
  // 2x2 to 2x1 after two losses, and the other ways, with odd sizes, partial last blocks, both
  // rank orders and an alignment that pads the leading dimensions.
  const std::vector<GridShape> grids{{2, 2, false}, {2, 1, false}, {1, 2, false}, {2, 2, true},
                                     {3, 1, false}, {1, 1, false}, {2, 3, true}};
  for (const auto& from : grids) {
    for (const auto& to : grids) {
      expect_moves(37, 5, 4, from, to);
      expect_moves(16, 4, 8, from, to);
    }
  }
}

TEST(Redistribution, ReadsAWholeBlockOfColumnsInOnePieceWhereTheRowsStay) {
  // 2x2 to 2x1: each process keeps its rows, and so its leading dimension: a block of NB columns
  // of one old rank is one piece. Process (1, 0) was rank 2 (row-major) and takes from 2 and 3.
  const int n = 40, nb = 4;
  const auto lda = static_cast<std::size_t>(leading_dimension(numroc(n, nb, 1, 2), 4));
  const auto pieces = redistribution(n, nb, 4, {2, 2, false}, {2, 1, false}, 1, 0);
  EXPECT_EQ(pieces.size(), 11u);  // 41 columns in blocks of 4
  EXPECT_EQ(pieces[0], (MatrixPiece{2, 0, 0, nb * lda}));
  EXPECT_EQ(pieces[1], (MatrixPiece{3, 0, nb * lda, nb * lda}));
  EXPECT_EQ(pieces[2], (MatrixPiece{2, nb * lda, 2 * nb * lda, nb * lda}));
}

}  // namespace
}  // namespace skt::hpl
