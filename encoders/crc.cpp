#include "encoders/crc.hpp"

#include <isa-l.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace skt::enc {

namespace {

// Seeded with all ones, so that a block of zeros does not have a CRC of zero.
constexpr std::uint32_t kCrcSeed = 0xffffffffu;

// Continues a CRC over `count` zero bytes.
std::uint32_t crc_zeros(std::uint32_t crc, std::size_t count) noexcept {
  static const std::vector<unsigned char> zeros(std::size_t{64} << 10, 0);
  while (count > 0) {
    const std::size_t n = std::min(count, zeros.size());
    crc = crc32_iscsi(const_cast<unsigned char*>(zeros.data()), static_cast<int>(n), crc);
    count -= n;
  }
  return crc;
}

// Blocks digested together by the interleaved route. One CRC-32C instruction waits for the
// previous one's result (three cycles), so one block is a chain of dependent instructions. Where
// ISA-L has no wider kernel it breaks a buffer into parallel streams of the same instruction, and a
// block of a few KiB is too short for that: on the Xeons this project first ran on, 3.6 GB/s on
// 4 KiB blocks against 9 GB/s for four blocks interleaved, each its own stream.
constexpr int kStreams = 4;

#if defined(__x86_64__)
// The CRCs of kStreams blocks of `bytes` bytes each (a multiple of 8), from the seed.
__attribute__((target("sse4.2"))) void crc_streams(const std::array<const std::byte*, kStreams>& at,
                                                   std::size_t bytes,
                                                   std::array<std::uint32_t, kStreams>& out) {
  std::array<std::uint64_t, kStreams> crc;
  crc.fill(kCrcSeed);
  for (std::size_t offset = 0; offset < bytes; offset += 8) {
    for (int s = 0; s < kStreams; ++s) {
      std::uint64_t word;
      std::memcpy(&word, at[static_cast<std::size_t>(s)] + offset, sizeof word);
      crc[static_cast<std::size_t>(s)] = _mm_crc32_u64(crc[static_cast<std::size_t>(s)], word);
    }
  }
  for (int s = 0; s < kStreams; ++s)
    out[static_cast<std::size_t>(s)] = static_cast<std::uint32_t>(crc[static_cast<std::size_t>(s)]);
}

bool has_crc_instruction() noexcept {
  static const bool supported = __builtin_cpu_supports("sse4.2") != 0;
  return supported;
}
#endif

// The whole-data blocks of `mask`, kStreams at a time; returns the blocks below the first one it
// left to block_crc (a block holding the end of the data, the chunk's last block when shorter).
int interleaved_crcs(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                     std::uint64_t mask, std::uint32_t* out) noexcept {
  int b = 0;
#if defined(__x86_64__)
  if (!has_crc_instruction()) return 0;
  const std::size_t size = geometry.block_bytes();
  const std::size_t whole = std::min<std::size_t>(valid, geometry.chunk_bytes) / size;
  std::array<const std::byte*, kStreams> at{};
  std::array<int, kStreams> index{};
  std::array<std::uint32_t, kStreams> crc{};
  int gathered = 0;
  for (; b < static_cast<int>(whole); ++b) {
    if ((mask >> b & 1u) == 0) continue;
    at[static_cast<std::size_t>(gathered)] = chunk + static_cast<std::size_t>(b) * size;
    index[static_cast<std::size_t>(gathered)] = b;
    if (++gathered < kStreams) continue;
    crc_streams(at, size, crc);
    for (int s = 0; s < kStreams; ++s)
      out[index[static_cast<std::size_t>(s)]] = crc[static_cast<std::size_t>(s)];
    gathered = 0;
  }
  for (int s = 0; s < gathered; ++s) {
    const int left = index[static_cast<std::size_t>(s)];
    out[left] = block_crc(geometry, chunk, valid, left);
  }
#else
  (void)geometry, (void)chunk, (void)valid, (void)mask, (void)out;
#endif
  return b;
}

// Seconds for one route to digest 16 blocks of 4 KiB held in cache, the best of a few tries.
double route_seconds(CrcRoute route) {
  const auto geometry = StripeGeometry::plan(2, 1, std::size_t{64} << 10, 1);
  static std::vector<std::byte> chunk(geometry.chunk_bytes, std::byte{0x5a});
  std::array<std::uint32_t, 64> out{};
  double best = 1e30;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    chunk_crcs(geometry, chunk.data(), static_cast<std::uint32_t>(chunk.size()), ~std::uint64_t{0},
               out.data(), route);
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

std::uint32_t block_crc(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                        int block) noexcept {
  const std::size_t size = geometry.block_bytes();
  const std::size_t begin = static_cast<std::size_t>(block) * size;
  const std::size_t end = std::min<std::size_t>(begin + size, geometry.chunk_bytes);
  if (begin >= end) return kCrcSeed;
  // Over the whole block, the bytes past the chunk's valid ones as the zeros they read as: so a
  // parity block's CRC is a function of its sources' (see combine_parity_crcs).
  const std::size_t data_end =
      chunk == nullptr ? begin : std::clamp<std::size_t>(valid, begin, end);
  std::uint32_t crc = kCrcSeed;
  if (data_end > begin) {
    crc = crc32_iscsi(
        const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(chunk + begin)),
        static_cast<int>(data_end - begin), crc);
  }
  return crc_zeros(crc, end - data_end);
}

CrcRoute fastest_crc_route() noexcept {
  // Which route is faster is the processor's and ISA-L's business. Where ISA-L has its kernel of
  // carry-less multiplications over 512-bit registers (this project's AMD EPYC machines), it
  // digests a 4 KiB block held in cache at 65 GB/s, five times the interleaved route, and 1.25
  // times it from memory (bench-kernels); on the first Xeons it was the other way round (above).
  // Both routes give the same CRCs, so measuring once per process, in microseconds, is safe.
  static const CrcRoute fastest =
      route_seconds(CrcRoute::isal) <= route_seconds(CrcRoute::interleaved) ? CrcRoute::isal
                                                                            : CrcRoute::interleaved;
  return fastest;
}

void chunk_crcs(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                std::uint64_t mask, std::uint32_t* out, CrcRoute route) noexcept {
  int b = 0;
  if (chunk != nullptr && route == CrcRoute::interleaved)
    b = interleaved_crcs(geometry, chunk, valid, mask, out);
  for (; b < geometry.blocks_per_chunk(); ++b) {
    if ((mask >> b & 1u) != 0) out[b] = block_crc(geometry, chunk, valid, b);
  }
}

void chunk_crcs(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                std::uint64_t mask, std::uint32_t* out) noexcept {
  chunk_crcs(geometry, chunk, valid, mask, out, fastest_crc_route());
}

std::uint64_t mismatched_blocks(const StripeGeometry& geometry, const std::byte* chunk,
                                std::uint32_t valid, const std::uint32_t* want) {
  const int blocks = geometry.blocks_per_chunk();
  std::array<std::uint32_t, 64> crcs{};  // a chunk has at most 64 blocks, one bit each of a mask
  chunk_crcs(geometry, chunk, valid, geometry.block_mask(0, geometry.chunk_bytes), crcs.data());
  std::uint64_t bad = 0;
  for (int b = 0; b < blocks; ++b) {
    if (crcs[static_cast<std::size_t>(b)] != want[b]) bad |= std::uint64_t{1} << b;
  }
  return bad;
}

}  // namespace skt::enc
