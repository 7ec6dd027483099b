// Whether the BLAS runs kernels below what the processor can do. OpenBLAS picks its kernels by the
// processor's model, and a model it does not know (a virtual machine's "Intel(R) Xeon(R)
// Processor", a processor newer than the library) gets its oldest x86-64 kernels, Prescott's
// (SSE3): every DGEMM, netlib HPL's as well as SKT-HPL's, then runs at a fraction of its speed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace skt::hpl {

struct Processor {
  bool avx2_fma = false;
  bool avx512 = false;
};

// The warning for OpenBLAS's kernels named `core` on `processor`, nothing when they are its own.
std::optional<std::string> slow_kernels_warning(std::string_view core, Processor processor);

// This process's processor, and the kernels its OpenBLAS chose.
Processor this_processor();
std::string openblas_core();

}  // namespace skt::hpl
