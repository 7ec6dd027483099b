// The random matrix [A|b] of netlib HPL (HPL_pdmatgen), so that SKT-HPL and xhpl solve the same
// system. netlib draws the N × (N+1) entries, column after column, from one 64-bit linear
// congruential stream x(k+1) = a·x(k) + c (mod 2^64), a = 6364136223846793005, c = 1, started at
// x(0) = ISEED: entry (i, j) is the value of x(1 + i + j·N), in [-0.5, 0.5]. A jump of k steps is
// itself an affine map, found in O(log k), so any process regenerates any block of it without
// communication: a restarted run skips generation, and verification regenerates A and b instead
// of keeping a copy.
#pragma once

#include <cstdint>

namespace skt::hpl {

// The entry of the stream at state x, exactly as netlib's HPL_rand computes it.
double stream_value(std::uint64_t x) noexcept;

// Entries (row0 .. row0+count-1, column) of the N × (N+1) matrix, into out[0 .. count).
void generate_column_part(std::uint64_t seed, int n, std::int64_t row0, std::int64_t column,
                          int count, double* out);

// The rows of global column `column` that process row `myrow` owns (numroc(n, nb, myrow, nprow) of
// them), into out.
void generate_local_column(std::uint64_t seed, int n, int nb, int myrow, int nprow,
                           std::int64_t column, double* out);

// Fills the local part of the N × (N+1) matrix [A|b] of this process: `mp` rows and `nq`
// columns, leading dimension `lda`.
void generate_local(std::uint64_t seed, int n, int nb, int myrow, int nprow, int mycol, int npcol,
                    double* a, int lda);

}  // namespace skt::hpl
