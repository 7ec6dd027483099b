// Reed-Solomon over GF(2^8): a Cauchy generator (ISA-L), so that any G-m surviving items of a row
// determine the others; decoding inverts the survivors' rows with gf_invert_matrix.
#include <isa-l.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "encoders/codecs.hpp"

namespace skt::enc {

namespace {

constexpr std::size_t kIsalLimit = std::size_t{1} << 30;

class RsCodec final : public Codec {
 public:
  RsCodec(int group_size, int parity, bool reference)
      : Codec(Scheme::reed_solomon, group_size, parity),
        k_(group_size - parity),
        matrix_(static_cast<std::size_t>(group_size * (group_size - parity))),
        reference_(reference) {
    gf_gen_cauchy1_matrix(matrix_.data(), group_size, k_);
    // One-pass kernels for every coefficient, built once: out = c·x, out = acc + c·x and
    // out = acc + c·x + c·y are dot products of 1, 2 and 3 sources.
    for (int c = 0; c < 256; ++c) {
      const auto v = static_cast<unsigned char>(c);
      unsigned char one[1] = {v};
      unsigned char two[2] = {1, v};
      unsigned char three[3] = {1, v, v};
      ec_init_tables(1, 1, one, scale_tables_[static_cast<std::size_t>(c)].data());
      ec_init_tables(2, 1, two, combine_tables_[static_cast<std::size_t>(c)].data());
      ec_init_tables(3, 1, three, delta_tables_[static_cast<std::size_t>(c)].data());
    }
    // A parity slot's row of the generator, with and without a leading 1 for a base.
    for (int slot = 0; slot < parity; ++slot) {
      std::vector<unsigned char> coefs(static_cast<std::size_t>(k_) + 1, 1);
      for (int t = 0; t < k_; ++t)
        coefs[static_cast<std::size_t>(t) + 1] = generator(k_ + slot, t);
      row_tables_.emplace_back(32 * static_cast<std::size_t>(k_));
      ec_init_tables(k_, 1, coefs.data() + 1, row_tables_.back().data());
      base_row_tables_.emplace_back(32 * static_cast<std::size_t>(k_ + 1));
      ec_init_tables(k_ + 1, 1, coefs.data(), base_row_tables_.back().data());
    }
  }

  void encode_row(std::byte* out, const std::byte* base, std::span<const std::byte* const> sources,
                  int slot, std::size_t bytes) const override {
    if (reference_) {
      Codec::encode_row(out, base, sources, slot, bytes);
      return;
    }
    std::vector<unsigned char*> src;
    if (base != nullptr)
      src.push_back(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(base)));
    for (const std::byte* s : sources) {
      src.push_back(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(s)));
    }
    const auto& tables = base != nullptr ? base_row_tables_[static_cast<std::size_t>(slot)]
                                         : row_tables_[static_cast<std::size_t>(slot)];
    for (std::size_t done = 0; done < bytes; done += kIsalLimit) {
      const auto len = static_cast<int>(std::min(kIsalLimit, bytes - done));
      std::vector<unsigned char*> at(src.size());
      for (std::size_t i = 0; i < src.size(); ++i)
        at[i] = src[i] + done;
      unsigned char* dest[1] = {reinterpret_cast<unsigned char*>(out + done)};
      ec_encode_data(len, static_cast<int>(at.size()), 1, const_cast<unsigned char*>(tables.data()),
                     at.data(), dest);
    }
  }

  Coef encode_coef(int slot, int data_position) const override {
    return generator(k_ + slot, data_position);
  }

  std::vector<Coef> rebuild_coefs(int residue, std::span<const int> lost,
                                  int target) const override {
    const int g = group_size();
    const int m = parity();
    if (static_cast<int>(lost.size()) > m) {
      throw std::invalid_argument(
          "rs with " + std::to_string(m) + " parity chunks rebuilds at most " + std::to_string(m) +
          " lost members per group, " + std::to_string(lost.size()) + " were lost");
    }
    // Generator row of each member in this row: identity for a data position, a Cauchy row for a
    // parity slot.
    auto role_row = [&](int member) {
      const int d = ((member - residue) % g + g) % g;
      return d < m ? k_ + d : d - m;  // index into the (G × k) generator [I; A]
    };
    std::vector<int> sources;
    for (int member = 0; member < g && static_cast<int>(sources.size()) < k_; ++member) {
      if (!std::binary_search(lost.begin(), lost.end(), member)) sources.push_back(member);
    }
    const auto k = static_cast<std::size_t>(k_);
    std::vector<unsigned char> chosen(k * k), inverse(k * k);
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < k; ++j) {
        chosen[i * k + j] = generator(role_row(sources[i]), static_cast<int>(j));
      }
    }
    if (gf_invert_matrix(chosen.data(), inverse.data(), k_) != 0) {
      throw std::logic_error("rs: singular decoding matrix (Cauchy rows should never be)");
    }
    // The target's item is (its generator row) · data, and data = inverse · (sources' items).
    const int target_row = role_row(target);
    std::vector<Coef> coefs(static_cast<std::size_t>(g), 0);
    for (std::size_t s = 0; s < k; ++s) {
      unsigned char c = 0;
      for (std::size_t j = 0; j < k; ++j) {
        c ^= gf_mul(generator(target_row, static_cast<int>(j)), inverse[j * k + s]);
      }
      coefs[static_cast<std::size_t>(sources[s])] = c;
    }
    return coefs;
  }

  void scale(std::byte* out, const std::byte* src, std::size_t bytes, Coef c) const override {
    if (reference_) {
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = mul(c, src[i]);
      return;
    }
    run(scale_tables_[c].data(), {src}, out, bytes);
  }

  void combine(std::byte* out, const std::byte* acc, const std::byte* src, std::size_t bytes,
               Coef c) const override {
    if (reference_) {
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = acc[i] ^ mul(c, src[i]);
      return;
    }
    run(combine_tables_[c].data(), {acc, src}, out, bytes);
  }

  void combine_delta(std::byte* out, const std::byte* acc, const std::byte* x, const std::byte* y,
                     std::size_t bytes, Coef c) const override {
    if (reference_) {
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = acc[i] ^ mul(c, x[i] ^ y[i]);
      return;
    }
    run(delta_tables_[c].data(), {acc, x, y}, out, bytes);
  }

 private:
  Coef generator(int row, int column) const {
    return matrix_[static_cast<std::size_t>(row * k_ + column)];
  }
  static std::byte mul(Coef c, std::byte v) {
    return static_cast<std::byte>(gf_mul(c, static_cast<unsigned char>(v)));
  }
  // ec_encode_data takes any length and alignment, falling back to its portable kernel below the
  // vector width.
  static void run(const unsigned char* tables, std::initializer_list<const std::byte*> sources,
                  std::byte* out, std::size_t bytes) {
    std::array<unsigned char*, 3> src{};
    for (std::size_t done = 0; done < bytes; done += kIsalLimit) {
      const auto len = static_cast<int>(std::min(kIsalLimit, bytes - done));
      std::size_t i = 0;
      for (const std::byte* s : sources) {
        src[i++] = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(s + done));
      }
      unsigned char* dest[1] = {reinterpret_cast<unsigned char*>(out + done)};
      ec_encode_data(len, static_cast<int>(sources.size()), 1, const_cast<unsigned char*>(tables),
                     src.data(), dest);
    }
  }

  int k_;
  std::vector<unsigned char> matrix_;  // G × k: identity on top of the Cauchy rows
  std::array<std::array<unsigned char, 32>, 256> scale_tables_{};
  std::array<std::array<unsigned char, 64>, 256> combine_tables_{};
  std::array<std::array<unsigned char, 96>, 256> delta_tables_{};
  std::vector<std::vector<unsigned char>> row_tables_;       // per parity slot
  std::vector<std::vector<unsigned char>> base_row_tables_;  // the same after a leading 1
  bool reference_;
};

}  // namespace

std::unique_ptr<Codec> make_rs_codec(int group_size, int parity, bool reference) {
  return std::make_unique<RsCodec>(group_size, parity, reference);
}

}  // namespace skt::enc
