#include "hpl/reshape.hpp"

#include <algorithm>

#include "hpl/grid.hpp"

namespace skt::hpl {

std::vector<MatrixPiece> redistribution(int n, int nb, int align, const GridShape& from,
                                        const GridShape& to, int myrow, int mycol) {
  const int mp = numroc(n, nb, myrow, to.nprow);
  const int nq = numroc(n + 1, nb, mycol, to.npcol);
  const auto lda = static_cast<std::size_t>(leading_dimension(mp, align));
  std::vector<std::size_t> old_lda(static_cast<std::size_t>(from.nprow));
  for (int prow = 0; prow < from.nprow; ++prow) {
    old_lda[static_cast<std::size_t>(prow)] =
        static_cast<std::size_t>(leading_dimension(numroc(n, nb, prow, from.nprow), align));
  }
  std::vector<MatrixPiece> pieces;
  for (int lc = 0; lc < nq; ++lc) {
    const int column = global_index(lc, nb, mycol, to.npcol);
    const int pcol = owner(column, nb, from.npcol);
    const auto old_column = static_cast<std::size_t>(local_index(column, nb, from.npcol));
    for (int lr = 0; lr < mp;) {
      // The rest of this block of rows: one old rank holds it, one after the other.
      const int row = global_index(lr, nb, myrow, to.nprow);
      const int rows = std::min(nb - row % nb, mp - lr);
      const int prow = owner(row, nb, from.nprow);
      const MatrixPiece piece{from.rank_of(prow, pcol),
                              old_column * old_lda[static_cast<std::size_t>(prow)] +
                                  static_cast<std::size_t>(local_index(row, nb, from.nprow)),
                              static_cast<std::size_t>(lc) * lda + static_cast<std::size_t>(lr),
                              static_cast<std::size_t>(rows)};
      MatrixPiece* last = pieces.empty() ? nullptr : &pieces.back();
      if (last != nullptr && last->from_rank == piece.from_rank &&
          last->from + last->count == piece.from && last->to + last->count == piece.to) {
        last->count += piece.count;
      } else {
        pieces.push_back(piece);
      }
      lr += rows;
    }
  }
  return pieces;
}

}  // namespace skt::hpl
