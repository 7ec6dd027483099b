#include "hpl/grid.hpp"

namespace skt::hpl {

Grid::Grid(MPI_Comm world, int nprow, int npcol, bool column_major)
    : column_major_(column_major), nprow_(nprow), npcol_(npcol) {
  int rank = 0;
  SKT_MPI(MPI_Comm_rank(world, &rank));
  in_ = rank < nprow * npcol;
  all_ = Comm::split(world, in_ ? 0 : MPI_UNDEFINED, rank);
  if (!in_) return;
  myrow_ = column_major ? rank % nprow : rank / npcol;
  mycol_ = column_major ? rank / nprow : rank % npcol;
  row_ = Comm::split(all_.get(), myrow_, mycol_);
  col_ = Comm::split(all_.get(), mycol_, myrow_);
}

}  // namespace skt::hpl
