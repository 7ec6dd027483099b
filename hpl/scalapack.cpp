#include "hpl/scalapack.hpp"

#include <algorithm>
#include <cstddef>

#include "hpl/matgen.hpp"

extern "C" {
int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridexit(int context);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb,
               const int* irsrc, const int* icsrc, const int* ictxt, const int* lld, int* info);
void pdgesv_(const int* n, const int* nrhs, double* a, const int* ia, const int* ja,
             const int* desca, int* ipiv, double* b, const int* ib, const int* jb, const int* descb,
             int* info);
}

namespace skt::hpl {

namespace {

// A BLACS grid over the ranks of an SKT-HPL grid (not all of MPI_COMM_WORLD), in the same
// order, released when it goes out of scope.
class BlacsGrid {
 public:
  explicit BlacsGrid(const Grid& grid) : system_(Csys2blacs_handle(grid.all())), context_(system_) {
    Cblacs_gridinit(&context_, grid.column_major() ? "Col" : "Row", grid.nprow(), grid.npcol());
  }
  ~BlacsGrid() {
    Cblacs_gridexit(context_);
    Cfree_blacs_system_handle(system_);
  }
  BlacsGrid(const BlacsGrid&) = delete;
  BlacsGrid& operator=(const BlacsGrid&) = delete;
  int context() const noexcept { return context_; }

 private:
  int system_;
  int context_;
};

}  // namespace

PdgesvResult solve_with_pdgesv(const Grid& grid, int n, int nb, std::uint64_t seed) {
  const BlacsGrid blacs(grid);
  const int mp = numroc(n, nb, grid.myrow(), grid.nprow());
  const int lld = std::max(1, mp);
  const auto rows = static_cast<std::size_t>(lld);
  // [A|b] as SKT-HPL lays it out; b, column N, is then handed to PDGESV on its own.
  const int nq_ab = numroc(n + 1, nb, grid.mycol(), grid.npcol());
  std::vector<double> a(rows * static_cast<std::size_t>(std::max(1, nq_ab)));
  generate_local(seed, n, nb, grid.myrow(), grid.nprow(), grid.mycol(), grid.npcol(), a.data(),
                 lld);
  const int bcol = owner(n, nb, grid.npcol());
  std::vector<double> b(rows, 0.0);
  if (grid.mycol() == bcol) {
    const auto first =
        a.begin() + static_cast<std::ptrdiff_t>(
                        rows * static_cast<std::size_t>(local_index(n, nb, grid.npcol())));
    std::copy(first, first + mp, b.begin());
  }
  std::vector<int> ipiv(static_cast<std::size_t>(mp + nb));
  int desca[9], descb[9], info = 0;
  const int zero = 0, one = 1;
  const int context = blacs.context();
  descinit_(desca, &n, &n, &nb, &nb, &zero, &zero, &context, &lld, &info);
  descinit_(descb, &n, &one, &nb, &nb, &zero, &bcol, &context, &lld, &info);
  MPI_Barrier(grid.all());
  PdgesvResult result;
  const double start = MPI_Wtime();
  pdgesv_(&n, &one, a.data(), &one, &one, desca, ipiv.data(), b.data(), &one, &one, descb, &info);
  result.seconds = MPI_Wtime() - start;
  result.info = info;
  MPI_Allreduce(MPI_IN_PLACE, &result.seconds, 1, MPI_DOUBLE, MPI_MAX, grid.all());
  result.x.assign(static_cast<std::size_t>(n), 0.0);
  if (grid.mycol() == bcol) {
    for (int r = 0; r < mp; ++r) {
      result.x[static_cast<std::size_t>(global_index(r, nb, grid.myrow(), grid.nprow()))] =
          b[static_cast<std::size_t>(r)];
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, result.x.data(), n, MPI_DOUBLE, MPI_SUM, grid.all());
  return result;
}

}  // namespace skt::hpl
