// libFuzzer target: the configuration (a TOML file, then SKT_* variables) never crashes; bad input
// is an skt::Error with SKT_ERR_CONFIG. The input is the file's text, then after a NUL byte,
// NUL-separated NAME=value variables.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "libselfckpt/src/config.hpp"
#include "selfckpt/selfckpt.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find('\0');
  const std::string file_text = input.substr(0, split);
  skt::Environment env;
  if (split != std::string::npos) {
    std::size_t at = split + 1;
    while (at < input.size()) {
      const auto end = std::min(input.find('\0', at), input.size());
      const std::string entry = input.substr(at, end - at);
      const auto eq = entry.find('=');
      if (eq != std::string::npos) env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
      at = end + 1;
    }
  }
  static const std::string path = "/tmp/skt-config-fuzz-" + std::to_string(::getpid()) + ".toml";
  std::ofstream(path, std::ios::trunc | std::ios::binary) << file_text;
  try {
    const skt::Config c = skt::load_config(path, env);
    if (c.group_size < 1 || c.parity < 1 || c.chunk_bytes == 0) std::abort();
  } catch (const skt::Error& e) {
    if (e.code() != SKT_ERR_CONFIG) std::abort();
  }
  return 0;
}
