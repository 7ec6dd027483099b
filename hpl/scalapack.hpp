// ScaLAPACK's PDGESV on the matrix SKT-HPL generates: the reference that tests compare SKT-HPL's
// solution with, and that the benchmark compares its speed with.
#pragma once

#include <cstdint>
#include <vector>

#include "hpl/grid.hpp"

namespace skt::hpl {

struct PdgesvResult {
  double seconds = 0;     // PDGESV alone, slowest rank
  int info = 0;           // PDGESV's INFO
  std::vector<double> x;  // all N entries, on every rank of the grid
};

// Collective over grid.all(), and called by its ranks only.
PdgesvResult solve_with_pdgesv(const Grid& grid, int n, int nb, std::uint64_t seed);

}  // namespace skt::hpl
