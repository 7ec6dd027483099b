#include "encoders/codec.hpp"

#include <isa-l.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

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

bool scheme_available(Scheme scheme) noexcept {
  return scheme == Scheme::xor_parity;
}

int tolerance(Scheme /*scheme*/, int parity) noexcept {
  return parity;
}

namespace {

// XOR parity: every coefficient is 1, a lost item is the XOR of all the others in its row.
class XorCodecBase : public Codec {
 public:
  XorCodecBase(int group_size, int parity) : Codec(Scheme::xor_parity, group_size, parity) {
    if (parity != 1) {
      throw std::invalid_argument("xor keeps exactly one parity chunk per row, not " +
                                  std::to_string(parity));
    }
    if (group_size < 2) {
      throw std::invalid_argument("xor needs a group of at least 2 members, not " +
                                  std::to_string(group_size));
    }
  }

  Coef encode_coef(int /*slot*/, int /*data_position*/) const override { return identity; }

  std::vector<Coef> rebuild_coefs(int /*residue*/, std::span<const int> lost,
                                  int target) const override {
    if (lost.size() != 1 || lost[0] != target) {
      throw std::invalid_argument("xor rebuilds one lost member per group, " +
                                  std::to_string(lost.size()) + " were lost");
    }
    std::vector<Coef> coefs(static_cast<std::size_t>(group_size()), identity);
    coefs[static_cast<std::size_t>(target)] = 0;
    return coefs;
  }

  void scale(std::byte* out, const std::byte* src, std::size_t bytes, Coef c) const override {
    if (c == 0) {
      std::memset(out, 0, bytes);
    } else {
      std::memcpy(out, src, bytes);
    }
  }
};

class XorCodec final : public XorCodecBase {
 public:
  using XorCodecBase::XorCodecBase;

  void combine(std::byte* out, const std::byte* acc, const std::byte* src, std::size_t bytes,
               Coef c) const override {
    if (c == 0) {
      if (out != acc) std::memcpy(out, acc, bytes);
      return;
    }
    constexpr std::size_t kLimit = 1u << 30;  // ISA-L takes an int length
    for (std::size_t done = 0; done < bytes; done += kLimit) {
      const auto len = static_cast<int>(std::min(kLimit, bytes - done));
      void* vectors[3] = {const_cast<std::byte*>(acc + done), const_cast<std::byte*>(src + done),
                          out + done};
      const bool aligned = std::all_of(std::begin(vectors), std::end(vectors), [](void* p) {
        return reinterpret_cast<std::uintptr_t>(p) % 32 == 0;
      });
      // The vector kernels need 32-byte alignment; every buffer of the library is aligned, so the
      // portable ISA-L kernel only serves callers with odd pointers.
      if (aligned) {
        xor_gen(3, len, vectors);
      } else {
        xor_gen_base(3, len, vectors);
      }
    }
  }
};

class ReferenceXorCodec final : public XorCodecBase {
 public:
  using XorCodecBase::XorCodecBase;

  void combine(std::byte* out, const std::byte* acc, const std::byte* src, std::size_t bytes,
               Coef c) const override {
    for (std::size_t i = 0; i < bytes; ++i)
      out[i] = c == 0 ? acc[i] : (acc[i] ^ src[i]);
  }
};

}  // namespace

namespace {
template <class Xor>
std::unique_ptr<Codec> build(Scheme scheme, int group_size, int parity) {
  if (scheme == Scheme::xor_parity) return std::make_unique<Xor>(group_size, parity);
  throw std::invalid_argument("scheme '" + std::string(scheme_name(scheme)) +
                              "' is not available in this build");
}
}  // namespace

std::unique_ptr<Codec> make_codec(Scheme scheme, int group_size, int parity) {
  return build<XorCodec>(scheme, group_size, parity);
}

std::unique_ptr<Codec> make_reference_codec(Scheme scheme, int group_size, int parity) {
  return build<ReferenceXorCodec>(scheme, group_size, parity);
}

}  // namespace skt::enc
