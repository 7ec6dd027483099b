// The monitor datagram's authentication, shared by the library (which sends) and skt-run (which
// listens; it does not link the library): a line, then a space and the first 128 bits of its
// HMAC-SHA256 under the launch's key, in hex, then a newline. skt-run makes a key per launch and
// gives it to the ranks in SKT_MONITOR_KEY (the environment, which only the user's own processes
// read); a datagram whose tag does not verify is not the ranks'. Another local user can read a
// job's tag from /proc and the listening port from /proc/net/udp, and send lines; not this.
#pragma once

#include <nettle/hmac.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace skt::wire {

inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kTagBytes = 16;

inline std::string to_hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// The key from its hex form; nothing unless it is kKeyBytes of them.
inline std::optional<std::string> key_from_hex(std::string_view hex) {
  if (hex.size() != 2 * kKeyBytes) return std::nullopt;
  std::string key;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    for (const char c : hex.substr(i, 2)) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    key += static_cast<char>(value);
  }
  return key;
}

// Nettle's HMAC: plain computation, no library state, so that a process's last report, sent
// from inside exit() after other libraries' clean-up, can still be signed.
inline std::string tag_of(std::string_view key, std::string_view line) {
  hmac_sha256_ctx context;
  hmac_sha256_set_key(&context, key.size(), reinterpret_cast<const std::uint8_t*>(key.data()));
  hmac_sha256_update(&context, line.size(), reinterpret_cast<const std::uint8_t*>(line.data()));
  std::uint8_t mac[kTagBytes];
  hmac_sha256_digest(&context, kTagBytes, mac);
  return to_hex(mac, kTagBytes);
}

// `line` (without its newline) signed, with the newline.
inline std::string sign(std::string_view key, std::string_view line) {
  return std::string(line) + ' ' + tag_of(key, line) + '\n';
}

// The line a datagram carries, if its tag verifies under `key`; nothing otherwise.
inline std::optional<std::string> verified(std::string_view key, std::string_view datagram) {
  while (!datagram.empty() && (datagram.back() == '\n' || datagram.back() == '\r'))
    datagram.remove_suffix(1);
  const auto space = datagram.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view line = datagram.substr(0, space);
  const std::string expected = tag_of(key, line);
  const std::string_view given = datagram.substr(space + 1);
  if (given.size() != expected.size()) return std::nullopt;
  unsigned char differ = 0;  // in constant time: the tag is guessed byte by byte otherwise
  for (std::size_t i = 0; i < given.size(); ++i)
    differ |= static_cast<unsigned char>(given[i] ^ expected[i]);
  if (differ != 0) return std::nullopt;
  return std::string(line);
}

}  // namespace skt::wire
