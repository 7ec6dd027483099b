// The monitor datagram's signature (monitor_wire.hpp): what the library signs, skt-run verifies;
// another key, a changed byte or no tag does not.
#include "libselfckpt/src/monitor_wire.hpp"

#include <gtest/gtest.h>

namespace skt::wire {
namespace {

TEST(MonitorWire, SignedLinesVerifyAndNothingElse) {
  const std::string key(kKeyBytes, '\x5a');
  const std::string line = "skt1 job-a 3 1 4242 exit 0 1";
  const std::string datagram = sign(key, line);
  EXPECT_EQ(datagram.back(), '\n');
  EXPECT_EQ(datagram.size(), line.size() + 1 + 2 * kTagBytes + 1);
  EXPECT_EQ(verified(key, datagram), line);
  EXPECT_FALSE(verified(std::string(kKeyBytes, '\x5b'), datagram)) << "another launch's key";
  EXPECT_FALSE(verified(key, line + "\n")) << "unsigned, as a forger sends it";
  for (std::size_t at = 0; at + 1 < datagram.size(); ++at) {
    std::string changed = datagram;
    changed[at] = static_cast<char>(changed[at] ^ 1);
    EXPECT_FALSE(verified(key, changed)) << "byte " << at << " changed";
  }
}

TEST(MonitorWire, KeysAreHexOfTheirLength) {
  const std::string hex(2 * kKeyBytes, 'a');
  ASSERT_TRUE(key_from_hex(hex));
  EXPECT_EQ(*key_from_hex(hex), std::string(kKeyBytes, '\xaa'));
  EXPECT_FALSE(key_from_hex(hex.substr(1)));
  EXPECT_FALSE(key_from_hex(std::string(2 * kKeyBytes, 'g')));
  EXPECT_FALSE(key_from_hex(std::string(2 * kKeyBytes, 'A'))) << "lower case, as skt-run writes it";
}

}  // namespace
}  // namespace skt::wire
