#include "hpl/blas.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

extern "C" char* openblas_get_corename(void);

namespace skt::hpl {

std::optional<std::string> slow_kernels_warning(std::string_view core, Processor processor) {
  // OpenBLAS's x86-64 kernels without AVX2 and FMA (its names, as openblas_get_corename says them).
  static constexpr std::array<std::string_view, 15> kWithoutAvx2{
      "Prescott", "Core2",     "Penryn",     "Dunnington",   "Nehalem",
      "Atom",     "Nano",      "Opteron",    "Opteron_SSE3", "Barcelona",
      "Bobcat",   "Bulldozer", "Piledriver", "Sandybridge",  "Steamroller"};
  if (!processor.avx2_fma ||
      std::find(kWithoutAvx2.begin(), kWithoutAvx2.end(), core) == kWithoutAvx2.end()) {
    return std::nullopt;
  }
  // Measured on a virtual machine with AVX-512, two ranks: DGEMM at 19 Gflops with Prescott's
  // kernels, 66-81 with Haswell's, 111-138 with SkylakeX's.
  return fmt::format(
      "OpenBLAS runs its {} kernels on a processor with {} (it does not know this model, as in "
      "many virtual machines): DGEMM at a fraction of its speed, netlib HPL's as well. "
      "OPENBLAS_CORETYPE={} in every rank's environment selects kernels that use it",
      core, processor.avx512 ? "AVX-512" : "AVX2 and FMA",
      processor.avx512 ? "SkylakeX" : "Haswell");
}

Processor this_processor() {
  __builtin_cpu_init();
  return {__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
          static_cast<bool>(__builtin_cpu_supports("avx512f"))};
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

}  // namespace skt::hpl
