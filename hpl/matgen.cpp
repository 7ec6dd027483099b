#include "hpl/matgen.hpp"

#include "hpl/grid.hpp"

namespace skt::hpl {

void generate_local(std::uint64_t seed, int n, int nb, int myrow, int nprow, int mycol, int npcol,
                    double* a, int lda) {
  const int mp = numroc(n, nb, myrow, nprow);
  const int nq = numroc(n + 1, nb, mycol, npcol);
  for (int lc = 0; lc < nq; ++lc) {
    const int gc = global_index(lc, nb, mycol, npcol);
    double* column = a + static_cast<std::int64_t>(lc) * lda;
    for (int lr = 0; lr < mp; ++lr) {
      column[lr] = matrix_entry(seed, global_index(lr, nb, myrow, nprow), gc);
    }
  }
}

}  // namespace skt::hpl
