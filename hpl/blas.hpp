// Whether the BLAS runs kernels below what the processor can do. OpenBLAS picks its kernels by the
// processor's model, and a model it does not know (a virtual machine's "Intel(R) Xeon(R)
// Processor", a processor newer than the library) gets its oldest x86-64 kernels, Prescott's
// (SSE3): every DGEMM, netlib HPL's as well as SKT-HPL's, then runs at a fraction of its speed.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// The ranks of one host and their BLAS threads. OpenBLAS starts a thread for every core a process
// may run on, so ranks not bound to cores of their own (mpirun --bind-to none, a launcher that does
// not bind) each take every core: two such ranks on two cores, N = 8192, ran at 85-87 Gflops
// against 94-102 with one thread each.
struct HostThreads {
  int ranks = 0;
  int threads = 0;           // of all its ranks
  int most_in_one_rank = 0;  // the largest of its ranks' thread counts
  int cores = 0;             // that its ranks may run on, together
};

// The warning when a host's BLAS threads outnumber its cores where its ranks alone do not (ranks
// beyond the cores are the user's choice, as in tests on a small machine); nothing otherwise.
std::optional<std::string> oversubscribed_threads_warning(const HostThreads& host);

// This process's OpenBLAS threads, and the cores it may run on (as a set of CPU numbers).
int openblas_threads();
std::vector<int> allowed_cpus();

}  // namespace skt::hpl
