// A program outside the tree: built against the installed selfckpt with pkg-config only.
#include <mpi.h>

#include <cstdio>
#include <selfckpt/selfckpt.hpp>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    skt::Context ctx(MPI_COMM_WORLD);
    std::vector<double, skt::allocator<double>> v(1000, 0.0);
    int step = 0;
    ctx.protect("step", step);
    if (ctx.recover() == 0) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<double>(i + rank);
    }
    for (; step < 3; ++step)
      ctx.checkpoint();
    std::printf("rank %d: epoch %llu, v[999] = %g\n", rank,
                static_cast<unsigned long long>(ctx.stats().epoch), v[999]);
    ctx.finalize(true);
  }
  MPI_Finalize();
  return 0;
}
