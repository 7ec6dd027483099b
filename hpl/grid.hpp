// The P×Q process grid and the 2-D block-cyclic distribution (blocks NB×NB, first block on
// process 0 in both dimensions), as in HPL and ScaLAPACK.
#pragma once

#include <mpi.h>

#include "common/mpi.hpp"

namespace skt::hpl {

// Elements of a dimension of `n` split in blocks of `nb` that process `iproc` of `nprocs` owns.
inline int numroc(int n, int nb, int iproc, int nprocs) noexcept {
  const int blocks = n / nb;
  int count = blocks / nprocs * nb;
  const int extra = blocks % nprocs;
  if (iproc < extra) {
    count += nb;
  } else if (iproc == extra) {
    count += n % nb;
  }
  return count;
}

// The process that owns global index `g`.
inline int owner(int g, int nb, int nprocs) noexcept {
  return g / nb % nprocs;
}

// The local index of global index `g` on its owner.
inline int local_index(int g, int nb, int nprocs) noexcept {
  return g / (nb * nprocs) * nb + g % nb;
}

// The global index of local index `l` on process `iproc`.
inline int global_index(int l, int nb, int iproc, int nprocs) noexcept {
  return (l / nb * nprocs + iproc) * nb + l % nb;
}

// A local matrix's leading dimension: a multiple of the alignment, and not a power of two (which
// would make cache sets collide).
inline int leading_dimension(int mp, int align) noexcept {
  int ld = (mp + align - 1) / align * align;
  if (ld < 1) ld = 1;
  if ((ld & (ld - 1)) == 0) ld += align;
  return ld;
}

class Grid {
 public:
  // Ranks 0 .. P·Q-1 of `world` form the grid, row-major (rank = p·Q + q) or column-major
  // (rank = q·P + p); other ranks are outside it (in() is false).
  Grid(MPI_Comm world, int nprow, int npcol, bool column_major);

  bool in() const noexcept { return in_; }
  bool column_major() const noexcept { return column_major_; }
  int nprow() const noexcept { return nprow_; }
  int npcol() const noexcept { return npcol_; }
  int myrow() const noexcept { return myrow_; }
  int mycol() const noexcept { return mycol_; }
  // The rank in all() of process (prow, pcol).
  int rank_of(int prow, int pcol) const noexcept {
    return column_major_ ? pcol * nprow_ + prow : prow * npcol_ + pcol;
  }
  MPI_Comm all() const noexcept { return all_.get(); }
  MPI_Comm row() const noexcept { return row_.get(); }  // my process row: ranks are columns
  MPI_Comm col() const noexcept { return col_.get(); }  // my process column: ranks are rows

 private:
  bool in_ = false;
  bool column_major_ = false;
  int nprow_, npcol_;
  int myrow_ = -1, mycol_ = -1;
  Comm all_, row_, col_;
};

}  // namespace skt::hpl
