// The monitor datagram's signature (monitor_wire.hpp): what the library signs, skt-run verifies;
// another key, a changed byte or no tag does not.
#include "libselfckpt/internal/monitor_wire.hpp"

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

// The line is written once (format_line, in the library's monitor) and read once (parse_line, in
// skt-run's watchdog): whatever the library says, skt-run reads back the same.
TEST(MonitorWire, EveryKindOfLineRoundTrips) {
  using skt::wire::Line;
  const Line lines[] = {
      {"run-1", 0, 0, 4242, "hello", 0, 7, ""},
      {"run-1+hpl", 3, 2, 4242, "beat", 17, 3, "skt_checkpoint"},
      {"run-1+hpl", 3, 2, 4242, "beat", 17, 3, ""},
      {"slurm-88.w4", 5, 1, 99, "recovered-storage", 1ull << 40, 5, ""},
      {"run-1", 1, 0, 12, "live", 0, 2, ""},
      {"run-1", 1, 0, 12, "exit", 3, 0, ""},
      {"old", 2, 0, 12, "commit", 9, std::nullopt, ""},  // a library that says no more
  };
  for (const Line& line : lines) {
    const std::string text = skt::wire::format_line(line);
    const auto back = skt::wire::parse_line(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(*back, line) << text;
    const auto signed_back =
        skt::wire::parse_line(*skt::wire::verified("k", skt::wire::sign("k", text)));
    EXPECT_EQ(signed_back, line) << "through its signature: " << text;
  }
  EXPECT_FALSE(skt::wire::parse_line("skt2 j 0 0 1 beat 0").has_value());
  EXPECT_FALSE(skt::wire::parse_line("skt1 j -1 0 1 beat 0").has_value());
  EXPECT_FALSE(skt::wire::parse_line("skt1 j 0 0").has_value());
}
