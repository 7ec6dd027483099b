// copy_uncached against memcpy: every size and alignment around the stream's 16- and 64-byte
// steps, and nothing written outside the destination.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "encoders/copy.hpp"

namespace skt::enc {
namespace {

TEST(CopyUncached, IsMemcpyAtEverySizeAndAlignment) {
  constexpr std::size_t kGuard = 80;
  const std::size_t sizes[] = {0,  1,   15,  16,  17,   63,   64,   65,         79,
                               80, 127, 128, 129, 4095, 4096, 4097, 65536 + 37, 262144 + 5};
  std::vector<std::byte> source(262144 + 5 + 2 * kGuard);
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<std::byte>((i * 131 + 7) % 251);
  for (const std::size_t bytes : sizes) {
    for (std::size_t to_offset = 0; to_offset < 18; ++to_offset) {
      for (const std::size_t from_offset : {std::size_t{0}, std::size_t{3}, std::size_t{16}}) {
        std::vector<std::byte> got(bytes + 2 * kGuard, std::byte{0xee});
        std::vector<std::byte> want = got;
        copy_uncached(got.data() + kGuard + to_offset, source.data() + from_offset, bytes);
        std::memcpy(want.data() + kGuard + to_offset, source.data() + from_offset, bytes);
        ASSERT_EQ(got, want) << bytes << " bytes to offset " << to_offset << " from offset "
                             << from_offset;
      }
    }
  }
}

}  // namespace
}  // namespace skt::enc
