#include "encoders/codec.hpp"

#include <stdexcept>
#include <string>

#include "encoders/codecs.hpp"

namespace skt::enc {

std::string_view scheme_name(Scheme scheme) noexcept {
  switch (scheme) {
    case Scheme::xor_parity:
      return "xor";
    case Scheme::sum:
      return "sum";
    case Scheme::reed_solomon:
      return "rs";
  }
  return "?";
}

std::optional<Scheme> parse_scheme(std::string_view name) noexcept {
  if (name == "xor") return Scheme::xor_parity;
  if (name == "sum") return Scheme::sum;
  if (name == "rs") return Scheme::reed_solomon;
  return std::nullopt;
}

int tolerance(Scheme /*scheme*/, int parity) noexcept {
  return parity;
}

void Codec::encode_row(std::byte* out, const std::byte* base,
                       std::span<const std::byte* const> sources, int slot,
                       std::size_t bytes) const {
  // Source by source, in data-position order, so that even sum's rounding is reproducible.
  for (std::size_t t = 0; t < sources.size(); ++t) {
    const Coef c = encode_coef(slot, static_cast<int>(t));
    if (t == 0 && base == nullptr) {
      scale(out, sources[t], bytes, c);
    } else {
      combine(out, t == 0 ? base : out, sources[t], bytes, c);
    }
  }
}

void check_shape(Scheme scheme, int group_size, int parity) {
  const std::string name(scheme_name(scheme));
  if (scheme != Scheme::reed_solomon && parity != 1) {
    throw std::invalid_argument(name + " keeps exactly one parity chunk per row, not " +
                                std::to_string(parity));
  }
  if (parity < 1 || group_size < parity + 1) {
    throw std::invalid_argument(
        name + " with " + std::to_string(parity) + " parity chunk(s) needs a group of at least " +
        std::to_string(parity + 1) + " members, not " + std::to_string(group_size));
  }
  if (scheme == Scheme::reed_solomon && group_size > 255) {
    throw std::invalid_argument("rs over GF(2^8) supports groups of at most 255 members");
  }
}

std::unique_ptr<Codec> make_codec(Scheme scheme, int group_size, int parity) {
  check_shape(scheme, group_size, parity);
  switch (scheme) {
    case Scheme::xor_parity:
      return make_xor_codec(group_size, false);
    case Scheme::sum:
      return make_sum_codec(group_size, false);
    case Scheme::reed_solomon:
      return make_rs_codec(group_size, parity, false);
  }
  throw std::invalid_argument("unknown scheme");
}

std::unique_ptr<Codec> make_reference_codec(Scheme scheme, int group_size, int parity) {
  check_shape(scheme, group_size, parity);
  switch (scheme) {
    case Scheme::xor_parity:
      return make_xor_codec(group_size, true);
    case Scheme::sum:
      return make_sum_codec(group_size, true);
    case Scheme::reed_solomon:
      return make_rs_codec(group_size, parity, true);
  }
  throw std::invalid_argument("unknown scheme");
}

}  // namespace skt::enc
