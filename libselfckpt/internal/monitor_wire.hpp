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
#include <sstream>
#include <string>
#include <string_view>

namespace skt::wire {

// How often a rank's monitor sends a beat; skt-run's watchdog counts the beats it misses.
inline constexpr int kBeatMilliseconds = 1000;

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

// What one datagram's line says, as the library writes it and skt-run reads it:
//   skt1 JOB RANK LAUNCH PID KIND EPOCH [EXTRA [CALL]]
// KIND is a context's (hello, beat, recovered, recovered-storage, commit, bye) or its process's
// (live, finalize, exit); EPOCH, for exit, the exit code. EXTRA, for a context, is its process's
// rank in MPI_COMM_WORLD, for a process how many of its contexts are open; CALL, in a beat, the
// collective call the rank waits in.
struct Line {
  std::string job;
  int rank = 0;
  int launch = 0;
  long pid = 0;
  std::string kind;
  std::uint64_t epoch = 0;
  std::optional<int> extra;
  std::string call;  // empty: none (a call's name has no spaces)

  bool operator==(const Line&) const = default;
};

inline std::string format_line(const Line& l) {
  std::string out = "skt1 " + l.job + ' ' + std::to_string(l.rank) + ' ' +
                    std::to_string(l.launch) + ' ' + std::to_string(l.pid) + ' ' + l.kind + ' ' +
                    std::to_string(l.epoch);
  if (l.extra) {
    out += ' ' + std::to_string(*l.extra);
    if (!l.call.empty()) out += ' ' + l.call;
  }
  return out;
}

// Nothing when it is not such a line (another magic, a negative rank, a field missing); a
// negative EXTRA counts as not said, and CALL is read as it came (the reader judges it).
inline std::optional<Line> parse_line(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic;
  Line l;
  if (!(in >> magic >> l.job >> l.rank >> l.launch >> l.pid >> l.kind >> l.epoch)) {
    return std::nullopt;
  }
  if (magic != "skt1" || l.rank < 0) return std::nullopt;
  int extra = 0;
  if (in >> extra && extra >= 0) {
    l.extra = extra;
    in >> l.call;
  }
  return l;
}

}  // namespace skt::wire
