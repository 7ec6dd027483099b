// libFuzzer target: skt-run's side of the monitor datagram. Whatever arrives, the signature check
// and the parser never crash; a line signed with the key comes back exactly, and the same
// datagram with any one byte changed does not verify.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/watch.hpp"
#include "libselfckpt/internal/monitor_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string key(skt::wire::kKeyBytes, 'k');
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (const auto line = skt::wire::verified(key, input)) skt::run::parse_heard(*line);
  skt::run::parse_heard(input);
  const std::string line(input.substr(0, input.find('\n')));
  std::string datagram = skt::wire::sign(key, line);
  const auto back = skt::wire::verified(key, datagram);
  if (!back || *back != line) std::abort();
  if (size > 0) {
    const std::size_t at = data[0] % (datagram.size() - 1);  // not the final newline
    datagram[at] = static_cast<char>(datagram[at] ^ 0x20);
    if (skt::wire::verified(key, datagram)) std::abort();
  }
  return 0;
}
