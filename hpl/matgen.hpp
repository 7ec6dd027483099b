// The random matrix [A|b]: every entry a pure function of (seed, row, column), uniform in
// [-0.5, 0.5), so any process regenerates any part of it without communication, a restarted run
// skips generation, and verification regenerates A and b instead of keeping a copy.
#pragma once

#include <cstdint>

namespace skt::hpl {

inline double matrix_entry(std::uint64_t seed, std::int64_t row, std::int64_t column) noexcept {
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(column) * 0x9e3779b97f4a7c15ull) ^
                    (static_cast<std::uint64_t>(row) * 0xc2b2ae3d27d4eb4full);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * 0x1p-53 - 0.5;
}

// Fills the local part of the N × (N+1) matrix [A|b] of this process: `mp` rows and `nq`
// columns, leading dimension `lda`.
void generate_local(std::uint64_t seed, int n, int nb, int myrow, int nprow, int mycol, int npcol,
                    double* a, int lda);

}  // namespace skt::hpl
