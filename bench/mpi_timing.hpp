// Timing a collective step across ranks: every rank starts together, the slowest one counts.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <functional>

namespace skt::bench {

// Best over `repeats` of the time from a common start until every rank has done `step` (after one
// untimed warm-up). Timing the whole job, not one rank, keeps the comparison fair when ranks share
// cores: a rank's own memcpy may run alone while a collective waits for all of them.
inline double slowest(MPI_Comm comm, int repeats, const std::function<void()>& step,
                      const std::function<void()>& before = {}) {
  double best = 1e30;
  for (int i = -1; i < repeats; ++i) {
    if (before) before();
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    step();
    MPI_Barrier(comm);
    double elapsed = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (i >= 0) best = std::min(best, elapsed);
  }
  return best;
}

}  // namespace skt::bench
