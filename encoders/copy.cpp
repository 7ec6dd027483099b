#include "encoders/copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace skt::enc {

void copy_uncached(std::byte* to, const std::byte* from, std::size_t bytes) noexcept {
#if defined(__SSE2__)
  constexpr std::size_t kLine = 64;
  // Up to the destination's first 16-byte boundary, and the tail, as memcpy does them.
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(to) % 16) % 16;
  if (bytes < head + kLine) {
    std::memcpy(to, from, bytes);
    return;
  }
  std::memcpy(to, from, head);
  to += head;
  from += head;
  bytes -= head;
  std::size_t i = 0;
  for (; i + kLine <= bytes; i += kLine) {
    const auto* in = reinterpret_cast<const __m128i*>(from + i);
    auto* out = reinterpret_cast<__m128i*>(to + i);
    const __m128i a = _mm_loadu_si128(in);
    const __m128i b = _mm_loadu_si128(in + 1);
    const __m128i c = _mm_loadu_si128(in + 2);
    const __m128i d = _mm_loadu_si128(in + 3);
    _mm_stream_si128(out, a);
    _mm_stream_si128(out + 1, b);
    _mm_stream_si128(out + 2, c);
    _mm_stream_si128(out + 3, d);
  }
  std::memcpy(to + i, from + i, bytes - i);
  // Non-temporal stores are not ordered with the stores after them (the control block's).
  _mm_sfence();
#else
  std::memcpy(to, from, bytes);
#endif
}

}  // namespace skt::enc
