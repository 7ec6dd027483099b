// Writes one process's part of SKT-HPL's [A|b] to stdout as raw doubles, column-major without
// padding, for comparison with netlib HPL's HPL_pdmatgen (tests/e2e/netlib_matgen.py).
//
//   skt-hpl-matgen N NB P Q MYROW MYCOL SEED
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hpl/grid.hpp"
#include "hpl/matgen.hpp"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: skt-hpl-matgen N NB P Q MYROW MYCOL SEED\n");
    return 2;
  }
  const int n = std::atoi(argv[1]), nb = std::atoi(argv[2]);
  const int nprow = std::atoi(argv[3]), npcol = std::atoi(argv[4]);
  const int myrow = std::atoi(argv[5]), mycol = std::atoi(argv[6]);
  const auto seed = static_cast<std::uint64_t>(std::atoll(argv[7]));
  const int mp = skt::hpl::numroc(n, nb, myrow, nprow);
  const int nq = skt::hpl::numroc(n + 1, nb, mycol, npcol);
  std::vector<double> a(static_cast<std::size_t>(mp) * static_cast<std::size_t>(nq));
  skt::hpl::generate_local(seed, n, nb, myrow, nprow, mycol, npcol, a.data(), mp > 0 ? mp : 1);
  // A process may hold no entry (N = 1 on a 2x2 grid): nothing to write, and fwrite must not be
  // given the empty vector's null pointer.
  if (a.empty()) return 0;
  return std::fwrite(a.data(), sizeof(double), a.size(), stdout) == a.size() ? 0 : 1;
}
