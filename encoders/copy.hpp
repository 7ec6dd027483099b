// Copying large amounts into memory that is not read again soon.
#pragma once

#include <cstddef>

namespace skt::enc {

// memcpy(to, from, bytes), with the destination written around the caches (non-temporal stores,
// where the processor has them): a store that misses the cache first reads the line it writes,
// so a copy into memory that will not be read soon moves half as many bytes again as it needs to.
// glibc's memcpy streams only copies larger than most of the cache, one call at a time; the
// flush into B copies a chunk per call. The stores are complete, in order, before it returns.
void copy_uncached(std::byte* to, const std::byte* from, std::size_t bytes) noexcept;

}  // namespace skt::enc
