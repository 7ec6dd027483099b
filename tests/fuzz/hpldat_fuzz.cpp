// libFuzzer target: the HPL.dat parser never crashes, and refuses with a line-numbered HplDatError
// or returns a file whose lists are non-empty and within HPL's limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hpl/hpldat.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto d = skt::hpl::parse_hpldat(text, "fuzz.dat");
    const bool sane = !d.ns.empty() && d.ns.size() <= 20 && d.nbs.size() <= 20 &&
                      d.ps.size() == d.qs.size() && !d.pfacts.empty() && !d.depths.empty() &&
                      d.align >= 1;
    if (!sane) std::abort();
  } catch (const skt::hpl::HplDatError& e) {
    if (e.line() < 0) std::abort();
  }
  return 0;
}
