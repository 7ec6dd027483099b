// XOR parity: every coefficient is 1; a lost item is the XOR of all the others in its row.
#include <isa-l.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "encoders/codecs.hpp"

namespace skt::enc {

namespace {

constexpr std::size_t kIsalLimit = std::size_t{1} << 30;  // ISA-L lengths are ints

bool aligned32(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 32 == 0;
}

// XOR of two or more sources into `out`, with ISA-L's vector kernel when every pointer is 32-byte
// aligned (all of the library's buffers are) and its portable kernel otherwise.
void xor_into(std::byte* out, std::span<const std::byte* const> sources, std::size_t bytes) {
  std::vector<void*> vectors(sources.size() + 1);
  const int count = static_cast<int>(vectors.size());
  for (std::size_t done = 0; done < bytes; done += kIsalLimit) {
    const auto len = static_cast<int>(std::min(kIsalLimit, bytes - done));
    bool aligned = aligned32(out + done);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      vectors[i] = const_cast<std::byte*>(sources[i] + done);
      aligned = aligned && aligned32(sources[i] + done);
    }
    vectors.back() = out + done;
    if (aligned) {
      xor_gen(count, len, vectors.data());
    } else {
      xor_gen_base(count, len, vectors.data());
    }
  }
}

void xor_into(std::byte* out, std::initializer_list<const std::byte*> sources, std::size_t bytes) {
  xor_into(out, std::span<const std::byte* const>(sources.begin(), sources.size()), bytes);
}

class XorCodec final : public Codec {
 public:
  XorCodec(int group_size, bool reference)
      : Codec(Scheme::xor_parity, group_size, 1), reference_(reference) {}

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

  void combine(std::byte* out, const std::byte* acc, const std::byte* src, std::size_t bytes,
               Coef c) const override {
    if (c == 0) {
      if (out != acc) std::memcpy(out, acc, bytes);
    } else if (reference_) {
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = acc[i] ^ src[i];
    } else {
      xor_into(out, {acc, src}, bytes);
    }
  }

  void combine_delta(std::byte* out, const std::byte* acc, const std::byte* x, const std::byte* y,
                     std::size_t bytes, Coef c) const override {
    if (c == 0) {
      if (out != acc) std::memcpy(out, acc, bytes);
    } else if (reference_) {
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = acc[i] ^ x[i] ^ y[i];
    } else {
      xor_into(out, {acc, x, y}, bytes);
    }
  }

  void encode_row(std::byte* out, const std::byte* base, std::span<const std::byte* const> sources,
                  int slot, std::size_t bytes) const override {
    std::vector<const std::byte*> all;
    if (base != nullptr) all.push_back(base);
    all.insert(all.end(), sources.begin(), sources.end());
    if (reference_ || all.size() < 2) {
      Codec::encode_row(out, base, sources, slot, bytes);
    } else {
      xor_into(out, all, bytes);
    }
  }

 private:
  bool reference_;
};

}  // namespace

std::unique_ptr<Codec> make_xor_codec(int group_size, bool reference) {
  return std::make_unique<XorCodec>(group_size, reference);
}

}  // namespace skt::enc
