// Sum: the parity is the IEEE double sum of the data, as MPI_SUM would compute it; a lost value is
// the parity minus the others. Rebuilt values carry rounding error (sum_rebuild_bound); data must
// be whole doubles.
#include <cstring>
#include <stdexcept>
#include <string>

#include "encoders/codecs.hpp"

namespace skt::enc {

namespace {

double sign_of(Coef c) {
  if (c == Codec::identity) return 1.0;
  if (c == kMinusOne) return -1.0;
  throw std::invalid_argument("sum coefficients are +1 or -1, not " + std::to_string(c));
}

void check_whole_doubles(std::size_t bytes) {
  if (bytes % sizeof(double) != 0) {
    throw std::invalid_argument("sum encodes whole doubles; " + std::to_string(bytes) +
                                " bytes is not a multiple of 8");
  }
}

class SumCodec final : public Codec {
 public:
  SumCodec(int group_size, bool reference)
      : Codec(Scheme::sum, group_size, 1), reference_(reference) {}

  bool exact() const noexcept override { return false; }
  std::size_t granule() const noexcept override { return sizeof(double); }

  Coef encode_coef(int /*slot*/, int /*data_position*/) const override { return identity; }

  std::vector<Coef> rebuild_coefs(int residue, std::span<const int> lost,
                                  int target) const override {
    if (lost.size() != 1 || lost[0] != target) {
      throw std::invalid_argument("sum rebuilds one lost member per group, " +
                                  std::to_string(lost.size()) + " were lost");
    }
    // In this row the parity sits with member `residue`: a lost data value is parity minus the
    // other data, a lost parity the sum of the data.
    const int g = group_size();
    std::vector<Coef> coefs(static_cast<std::size_t>(g), identity);
    if (target != residue) {
      for (int member = 0; member < g; ++member) {
        if (member != residue) coefs[static_cast<std::size_t>(member)] = kMinusOne;
      }
    }
    coefs[static_cast<std::size_t>(target)] = 0;
    return coefs;
  }

  void scale(std::byte* out, const std::byte* src, std::size_t bytes, Coef c) const override {
    check_whole_doubles(bytes);
    if (c == 0) {
      std::memset(out, 0, bytes);
      return;
    }
    const double s = sign_of(c);
    const std::size_t n = bytes / sizeof(double);
    for (std::size_t i = 0; i < n; ++i)
      store(out, i, s * load(src, i));
  }

  void combine(std::byte* out, const std::byte* acc, const std::byte* src, std::size_t bytes,
               Coef c) const override {
    check_whole_doubles(bytes);
    if (c == 0) {
      if (out != acc) std::memcpy(out, acc, bytes);
      return;
    }
    const double s = sign_of(c);
    const std::size_t n = bytes / sizeof(double);
    if (reference_) {
      for (std::size_t i = 0; i < n; ++i)
        store(out, i, load(acc, i) + s * load(src, i));
      return;
    }
    // Element-wise IEEE additions: the compiler vectorises the loop, and s * x is exact, so the
    // result is the same as the scalar reference's.
    const auto* a = reinterpret_cast<const double*>(acc);
    const auto* x = reinterpret_cast<const double*>(src);
    auto* o = reinterpret_cast<double*>(out);
    if (s > 0) {
      for (std::size_t i = 0; i < n; ++i)
        o[i] = a[i] + x[i];
    } else {
      for (std::size_t i = 0; i < n; ++i)
        o[i] = a[i] - x[i];
    }
  }

  void combine_delta(std::byte*, const std::byte*, const std::byte*, const std::byte*, std::size_t,
                     Coef) const override {
    throw std::logic_error("sum is not exact, so it has no incremental encoding");
  }

 private:
  static double load(const std::byte* p, std::size_t i) {
    double v;
    std::memcpy(&v, p + i * sizeof(double), sizeof v);
    return v;
  }
  static void store(std::byte* p, std::size_t i, double v) {
    std::memcpy(p + i * sizeof(double), &v, sizeof v);
  }

  bool reference_;
};

}  // namespace

double sum_rebuild_bound(int group_size, double abs_sum) noexcept {
  return 3.03 * (group_size - 1) * 0x1p-53 * abs_sum;
}

std::unique_ptr<Codec> make_sum_codec(int group_size, bool reference) {
  return std::make_unique<SumCodec>(group_size, reference);
}

}  // namespace skt::enc
