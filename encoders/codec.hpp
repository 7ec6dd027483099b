// A checksum scheme over one row of a group: linear, so a member scales its own chunk locally and
// the group only combines partial results. Fast codecs use ISA-L; reference codecs are plain loops
// that tests compare the fast ones with, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace skt::enc {

enum class Scheme { xor_parity, sum, reed_solomon };

std::string_view scheme_name(Scheme scheme) noexcept;
std::optional<Scheme> parse_scheme(std::string_view name) noexcept;

// A coefficient of the code: a GF(2^8) element for xor (always 1) and rs; for sum, 1 stands for
// +1 and kMinusOne for -1. Zero always means "no contribution".
using Coef = std::uint8_t;
inline constexpr Coef kMinusOne = 0xff;

class Codec {
 public:
  Codec(Scheme scheme, int group_size, int parity)
      : scheme_(scheme), group_size_(group_size), parity_(parity) {}
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  Scheme scheme() const noexcept { return scheme_; }
  int group_size() const noexcept { return group_size_; }
  int parity() const noexcept { return parity_; }

  static constexpr Coef identity = 1;

  // Coefficient of the data chunk at `data_position` in parity slot `slot`.
  virtual Coef encode_coef(int slot, int data_position) const = 0;

  // Coefficients, indexed by member, that rebuild `target`'s item of a row whose residue is
  // `residue` (row mod G) from the items of the members not in `lost`; zero where a member does
  // not contribute. `lost` is sorted and includes `target`.
  virtual std::vector<Coef> rebuild_coefs(int residue, std::span<const int> lost,
                                          int target) const = 0;

  // out = c·src
  virtual void scale(std::byte* out, const std::byte* src, std::size_t bytes, Coef c) const = 0;
  // out = acc + c·src, where + is the scheme's addition
  virtual void combine(std::byte* out, const std::byte* acc, const std::byte* src,
                       std::size_t bytes, Coef c) const = 0;
  // out = acc + c·(x - y): the change of a contribution since y, for incremental encoding.
  // Only exact (GF(2^8)) schemes support it.
  virtual void combine_delta(std::byte* out, const std::byte* acc, const std::byte* x,
                             const std::byte* y, std::size_t bytes, Coef c) const = 0;

  // One parity item of a row: out = [base +] Σ_t coef(slot, t)·sources[t], t over the row's G-m
  // data positions in order. `base` may be null. Fast codecs do it in one pass over the sources.
  virtual void encode_row(std::byte* out, const std::byte* base,
                          std::span<const std::byte* const> sources, int slot,
                          std::size_t bytes) const;

  // Whether a rebuilt item is bit-identical to the lost one (false for sum: rounding).
  virtual bool exact() const noexcept { return true; }
  // Byte granularity of the data the scheme can encode (8 for sum's doubles).
  virtual std::size_t granule() const noexcept { return 1; }

 private:
  Scheme scheme_;
  int group_size_;
  int parity_;
};

// The fast codec of a scheme. Throws std::invalid_argument for an impossible group size or parity.
std::unique_ptr<Codec> make_codec(Scheme scheme, int group_size, int parity);
// The plain reference version of the same code.
std::unique_ptr<Codec> make_reference_codec(Scheme scheme, int group_size, int parity);

// The largest error of a value the sum scheme rebuilds, for a group of `group_size` members whose
// data values at that position of the row have absolute values summing to `abs_sum`:
// 3.03 (G - 1) 2^-53 abs_sum. The parity is a recursive sum of G-1 values, and the rebuild a
// recursive sum of G-1 items, each adding at most (G-2) unit roundoffs relative to the sum of
// magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 4.2).
double sum_rebuild_bound(int group_size, double abs_sum) noexcept;

// How many lost members per group a scheme with `parity` parity chunks per row survives.
int tolerance(Scheme scheme, int parity) noexcept;

}  // namespace skt::enc
