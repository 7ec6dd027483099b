#include "hpl/blas.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include <sched.h>

extern "C" char* openblas_get_corename(void);
extern "C" int openblas_get_num_threads(void);

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

std::optional<std::string> oversubscribed_threads_warning(const HostThreads& host) {
  if (host.most_in_one_rank <= 1 || host.threads <= host.cores || host.ranks > host.cores) {
    return std::nullopt;
  }
  return fmt::format(
      "OpenBLAS runs {} threads in the {} ranks on this host, which may run on {} cores: the "
      "threads take turns and DGEMM slows. OPENBLAS_NUM_THREADS={} in every rank's environment, or "
      "each rank bound to cores of its own (mpirun --bind-to core), gives every thread a core",
      host.threads, host.ranks, host.cores, std::max(1, host.cores / host.ranks));
}

int openblas_threads() {
  return openblas_get_num_threads();
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace skt::hpl
