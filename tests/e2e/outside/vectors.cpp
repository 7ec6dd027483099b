// A program outside the tree, built against the installed selfckpt with pkg-config or CMake only:
// containers in the workspace (skt::allocator, named, scoped and unnamed), a checkpoint taken deep
// in the program through the default context, and errors caught at the top.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <selfckpt/selfckpt.hpp>
#include <vector>

namespace {

template <class T>
using workspace_vector = std::vector<T, skt::allocator<T>>;

// Code that was not handed the context.
void checkpoint_somewhere_deep() {
  skt::default_context().checkpoint();
}

int run(int rank) {
  skt::Context ctx(MPI_COMM_WORLD);
  workspace_vector<double> v(1000);                             // malloc.0
  workspace_vector<double> w(10, skt::allocator<double>("w"));  // w
  skt::allocation_scope mesh("mesh");
  workspace_vector<int> cells(100);  // mesh.0
  int step = 0;
  ctx.protect("step", step);
  if (ctx.recover() == 0) {
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<double>(i + rank);
    w.assign(w.size(), 1.0);
    cells.assign(cells.size(), rank);
  }
  for (; step < 3; ++step)
    checkpoint_somewhere_deep();
  std::printf("rank %d: epoch %llu, v[999] = %g, cells[99] = %d\n", rank,
              static_cast<unsigned long long>(ctx.stats().epoch), v[999], cells[99]);
  ctx.finalize(true);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    code = run(rank);
  } catch (const skt::Error& e) {
    std::fprintf(stderr, "vectors rank %d: %s\n", rank, e.what());
    std::exit(e.exit_code());
  }
  MPI_Finalize();
  return code;
}
