// libFuzzer target: a drained epoch's manifest. Whatever a file holds, parsing it never crashes,
// and a manifest that parses is the one its own text gives back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "libselfckpt/internal/drain.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto manifest = skt::parse_manifest(text);
  if (manifest && skt::parse_manifest(skt::format_manifest(*manifest)) != manifest) std::abort();
  return 0;
}
