// The CRC-32C digests of a chunk's blocks, which recovery checks every byte it trusts against.
#pragma once

#include <cstddef>
#include <cstdint>

#include "encoders/geometry.hpp"

namespace skt::enc {

// The CRC-32C of block `block` of a chunk, over the whole block, the bytes past the chunk's
// `valid` ones (all of them for a null chunk) taken as zeros. One block at a time, through ISA-L:
// the reference that chunk_crcs is held to.
std::uint32_t block_crc(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                        int block) noexcept;

// How chunk_crcs digests the blocks that are all data: one at a time through ISA-L, or several
// interleaved, each its own chain of CRC-32C instructions (see crc.cpp).
enum class CrcRoute { isal, interleaved };

// The faster route on this processor, measured once per process.
CrcRoute fastest_crc_route() noexcept;

// The CRCs of the blocks of `mask` into out[block], equal to block_crc's, by the fastest route:
// the checkpoint digests every block it encodes.
void chunk_crcs(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                std::uint64_t mask, std::uint32_t* out) noexcept;
// The same by a given route (tests and benchmarks hold each route to the reference).
void chunk_crcs(const StripeGeometry& geometry, const std::byte* chunk, std::uint32_t valid,
                std::uint64_t mask, std::uint32_t* out, CrcRoute route) noexcept;

// The blocks of a chunk whose CRC is not want[block].
std::uint64_t mismatched_blocks(const StripeGeometry& geometry, const std::byte* chunk,
                                std::uint32_t valid, const std::uint32_t* want);

}  // namespace skt::enc
