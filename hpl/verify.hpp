// HPL's check of a solution, from a regenerated [A|b]: the scaled residual
// ||Ax-b||_oo / (eps·(||A||_oo·||x||_oo + ||b||_oo)·N), with eps = 2^-53.
#pragma once

#include <cstdint>
#include <vector>

#include "hpl/grid.hpp"

namespace skt::hpl {

struct Residual {
  double scaled = 0;   // what is compared with the threshold
  double norm_r = 0;   // ||Ax-b||_oo
  double norm_a = 0;   // ||A||_oo
  double norm_a1 = 0;  // ||A||_1
  double norm_x = 0;   // ||x||_oo
  double norm_x1 = 0;  // ||x||_1
  double norm_b = 0;   // ||b||_oo
};

inline constexpr double kHplEpsilon = 0x1p-53;

// Collective over the grid; x holds all N entries on every rank.
Residual verify(const Grid& grid, int n, int nb, std::uint64_t seed, const std::vector<double>& x);

}  // namespace skt::hpl
