// Plain whole-group computations in one process, the yardstick for the MPI group operations.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/geometry.hpp"

namespace skt::enc {

using Bytes = std::vector<std::byte>;

// Every member's parity, from every member's stream (member i's stream is streams[i], cut into
// chunks of geometry.chunk_bytes, the last one zero-padded).
std::vector<Bytes> reference_encode(const StripeGeometry& geometry, const Codec& codec,
                                    std::span<const Bytes> streams);

// Rebuilds the streams and parities of the members in `lost` (sorted) in place, from the others.
// `streams[i]` of a lost member must already have its original size.
void reference_rebuild(const StripeGeometry& geometry, const Codec& codec,
                       std::span<const int> lost, std::span<Bytes> streams,
                       std::span<Bytes> parities);

}  // namespace skt::enc
