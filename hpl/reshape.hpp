// A test's matrix moved from one process grid to another: how a factorization that ran on P×Q goes
// on on P'×Q' (skt-hpl --from-job). Pure functions of the block-cyclic distribution.
#pragma once

#include <cstddef>
#include <vector>

namespace skt::hpl {

// A process grid and how its ranks are numbered (PMAP).
struct GridShape {
  int nprow = 1;
  int npcol = 1;
  bool column_major = false;

  int rank_of(int prow, int pcol) const noexcept {
    return column_major ? pcol * nprow + prow : prow * npcol + pcol;
  }
};

// Elements of an old rank's local matrix that go to this process's: `count` of them from element
// `from` of rank `from_rank`'s, to element `to` of this one's (both column-major, each with its
// leading dimension).
struct MatrixPiece {
  int from_rank = 0;
  std::size_t from = 0;
  std::size_t to = 0;
  std::size_t count = 0;

  bool operator==(const MatrixPiece&) const = default;
};

// What process (myrow, mycol) of grid `to` holds of an n×(n+1) matrix (the right-hand side its
// last column) in blocks of nb, each local matrix with the leading dimension `align` gives, taken
// from the local matrices of grid `from`: column by column, the rows one old rank holds one after
// the other in one piece.
std::vector<MatrixPiece> redistribution(int n, int nb, int align, const GridShape& from,
                                        const GridShape& to, int myrow, int mycol);

}  // namespace skt::hpl
