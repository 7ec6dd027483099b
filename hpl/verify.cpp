#include "hpl/verify.hpp"

#include <algorithm>
#include <cmath>

#include "common/mpi.hpp"
#include "hpl/matgen.hpp"

namespace skt::hpl {

Residual verify(const Grid& grid, int n, int nb, std::uint64_t seed, const std::vector<double>& x) {
  const int nprow = grid.nprow(), npcol = grid.npcol();
  const int myrow = grid.myrow(), mycol = grid.mycol();
  const int mp = numroc(n, nb, myrow, nprow);
  const int nqa = numroc(n, nb, mycol, npcol);
  std::vector<double> ax(static_cast<std::size_t>(mp), 0.0),
      row_abs(static_cast<std::size_t>(mp), 0.0);
  std::vector<double> col_abs(static_cast<std::size_t>(nqa), 0.0);
  std::vector<double> values(static_cast<std::size_t>(mp));
  for (int c = 0; c < nqa; ++c) {
    const int gc = global_index(c, nb, mycol, npcol);
    const double xc = x[static_cast<std::size_t>(gc)];
    generate_local_column(seed, n, nb, myrow, nprow, gc, values.data());
    double column = 0;
    for (int r = 0; r < mp; ++r) {
      const double a = values[static_cast<std::size_t>(r)];
      ax[static_cast<std::size_t>(r)] += a * xc;
      row_abs[static_cast<std::size_t>(r)] += std::fabs(a);
      column += std::fabs(a);
    }
    col_abs[static_cast<std::size_t>(c)] = column;
  }
  if (mp > 0) {
    SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, ax.data(), mp, MPI_DOUBLE, MPI_SUM, grid.row()));
    SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, row_abs.data(), mp, MPI_DOUBLE, MPI_SUM, grid.row()));
  }
  if (nqa > 0) {
    SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, col_abs.data(), nqa, MPI_DOUBLE, MPI_SUM, grid.col()));
  }
  Residual out;
  double local[3] = {0, 0, 0};  // ||Ax-b||, ||A||_oo, ||A||_1 over this process's part
  generate_local_column(seed, n, nb, myrow, nprow, n, values.data());
  for (int r = 0; r < mp; ++r) {
    const double b = values[static_cast<std::size_t>(r)];
    local[0] = std::max(local[0], std::fabs(ax[static_cast<std::size_t>(r)] - b));
    local[1] = std::max(local[1], row_abs[static_cast<std::size_t>(r)]);
  }
  for (const double c : col_abs)
    local[2] = std::max(local[2], c);
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, local, 3, MPI_DOUBLE, MPI_MAX, grid.all()));
  out.norm_r = local[0];
  out.norm_a = local[1];
  out.norm_a1 = local[2];
  std::vector<double> b(static_cast<std::size_t>(n));
  generate_column_part(seed, n, 0, n, n, b.data());
  for (int i = 0; i < n; ++i) {
    out.norm_b = std::max(out.norm_b, std::fabs(b[static_cast<std::size_t>(i)]));
    out.norm_x = std::max(out.norm_x, std::fabs(x[static_cast<std::size_t>(i)]));
    out.norm_x1 += std::fabs(x[static_cast<std::size_t>(i)]);
  }
  out.scaled = n == 0 ? 0
                      : out.norm_r / (kHplEpsilon * (out.norm_a * out.norm_x + out.norm_b) *
                                      static_cast<double>(n));
  return out;
}

}  // namespace skt::hpl
