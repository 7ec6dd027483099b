#include "hpl/matgen.hpp"

#include <algorithm>

#include "hpl/grid.hpp"

namespace skt::hpl {

namespace {

// x ↦ mul·x + add (mod 2^64): k steps of the stream are one such map.
struct AffineMap {
  std::uint64_t mul = 1;
  std::uint64_t add = 0;
  std::uint64_t operator()(std::uint64_t x) const noexcept { return mul * x + add; }
};

constexpr AffineMap kOneStep{6364136223846793005ull, 1};

// `first`, then `second`.
AffineMap then(const AffineMap& first, const AffineMap& second) noexcept {
  return {second.mul * first.mul, second.mul * first.add + second.add};
}

// The map of k steps, by squaring.
AffineMap steps(std::uint64_t k) noexcept {
  AffineMap result, power = kOneStep;
  for (; k != 0; k >>= 1) {
    if ((k & 1) != 0) result = then(result, power);
    power = then(power, power);
  }
  return result;
}

}  // namespace

double stream_value(std::uint64_t x) noexcept {
  // The low and high 32-bit words, scaled and subtracted in netlib's order, so that the rounding
  // is the same.
  const auto low = static_cast<double>(x & 0xffffffffull);
  const auto high = static_cast<double>(x >> 32);
  return 0.5 - ((low / 2147483648.0 * 0.5 + high) / 2147483648.0 * 0.5);
}

// The state of entry (row, column).
std::uint64_t state_of(std::uint64_t seed, int n, std::int64_t row, std::int64_t column) {
  return steps(static_cast<std::uint64_t>(1 + row + column * n))(seed);
}

void fill(std::uint64_t x, int count, double* out) {
  for (int i = 0; i < count; ++i) {
    out[i] = stream_value(x);
    x = kOneStep(x);
  }
}

void generate_column_part(std::uint64_t seed, int n, std::int64_t row0, std::int64_t column,
                          int count, double* out) {
  fill(state_of(seed, n, row0, column), count, out);
}

void generate_local_column(std::uint64_t seed, int n, int nb, int myrow, int nprow,
                           std::int64_t column, double* out) {
  const int mp = numroc(n, nb, myrow, nprow);
  if (mp == 0) return;
  // From one of this process's row blocks to the next: nprow·nb rows further down the column.
  const AffineMap next_block =
      steps(static_cast<std::uint64_t>(nprow) * static_cast<std::uint64_t>(nb));
  std::uint64_t x = state_of(seed, n, global_index(0, nb, myrow, nprow), column);
  for (int lr = 0; lr < mp; lr += nb) {
    fill(x, std::min(nb, mp - lr), out + lr);
    x = next_block(x);
  }
}

void generate_local(std::uint64_t seed, int n, int nb, int myrow, int nprow, int mycol, int npcol,
                    double* a, int lda) {
  const int nq = numroc(n + 1, nb, mycol, npcol);
  for (int lc = 0; lc < nq; ++lc) {
    generate_local_column(seed, n, nb, myrow, nprow, global_index(lc, nb, mycol, npcol),
                          a + static_cast<std::int64_t>(lc) * lda);
  }
}

}  // namespace skt::hpl
