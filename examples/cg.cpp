// cg: conjugate gradients on a distributed sparse matrix, the 7-point Laplacian of an n x n x n
// grid plus a shift (symmetric positive definite), rows cut into slabs of z-planes.
//
// Built twice: plain (MPI only), and with -DUSE_SELFCKPT, where the matrix (CSR arrays) lives in
// the self-checkpointed workspace through skt_malloc, the vectors are std::vector with
// skt::allocator, and the solver checkpoints when skt_need_checkpoint says so (Daly's interval from
// SKT_MTBF, which this program sets to 1h when it is not given). The difference between the two
// builds is every line under USE_SELFCKPT below.
//
//   mpirun -n 4 cg [n iterations]        (defaults 48 and 200)
//
// Prints "RESULT <hex digest of x>": the same, bit for bit, for both builds and whatever failures
// happened on the way.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef USE_SELFCKPT
#include <selfckpt/selfckpt.hpp>
template <class T>
using Allocator = skt::allocator<T>;
#define ALLOCATE(bytes) skt_malloc(bytes)
#define RELEASE(p) skt_free(p)
#else
template <class T>
using Allocator = std::allocator<T>;
#define ALLOCATE(bytes) std::malloc(bytes)
#define RELEASE(p) std::free(p)
#endif

using Vector = std::vector<double, Allocator<double>>;

namespace {

double dot(const Vector& a, const Vector& b, std::size_t n) {
  double local = 0;
  for (std::size_t i = 0; i < n; ++i)
    local += a[i] * b[i];
  double global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return global;
}

std::uint64_t digest(const void* data, std::size_t bytes, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What the solver carries from one iteration to the next besides its vectors.
struct State {
  long iteration;
  double rr;  // r·r
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long n = argc > 1 ? std::atol(argv[1]) : 48,
             iterations = argc > 2 ? std::atol(argv[2]) : 200;
  if (n < size || iterations < 1) {
    if (rank == 0) std::fprintf(stderr, "cg: need n >= ranks and iterations >= 1\n");
    MPI_Finalize();
    return 2;
  }
  const long z0 = n * rank / size, planes = n * (rank + 1) / size - z0;
  const std::size_t plane = static_cast<std::size_t>(n * n),
                    rows = plane * static_cast<std::size_t>(planes);
#ifdef USE_SELFCKPT
  if (std::getenv("SKT_MTBF") == nullptr) setenv("SKT_MTBF", "1h", 1);
  try {
    skt::Context ctx(MPI_COMM_WORLD);
#endif
    // CSR with columns local to the slab and its two halo planes: column c is entry c of the
    // vector [halo below | own rows | halo above].
    auto* row_start = static_cast<std::int64_t*>(ALLOCATE((rows + 1) * sizeof(std::int64_t)));
    auto* column = static_cast<std::int64_t*>(ALLOCATE(rows * 7 * sizeof(std::int64_t)));
    auto* value = static_cast<double*>(ALLOCATE(rows * 7 * sizeof(double)));
    // Sized, not filled: values are written once the program knows it starts afresh (a relaunch
    // gets them back from skt_recover, and must not overwrite them before).
    Vector x(rows), r(rows), p(plane * static_cast<std::size_t>(planes + 2)), ap(rows);
    State state{0, 0.0};
#ifdef USE_SELFCKPT
    ctx.protect("state", state);
    const std::uint64_t epoch = ctx.recover();
    if (epoch > 0 && rank == 0)
      std::printf("restored epoch %llu at iteration %ld\n", static_cast<unsigned long long>(epoch),
                  state.iteration);
    if (epoch == 0) {
#endif
      std::fill(x.begin(), x.end(), 0.0);
      std::fill(p.begin(), p.end(), 0.0);
      std::size_t k = 0;
      for (long z = 0; z < planes; ++z)
        for (long y = 0; y < n; ++y)
          for (long xx = 0; xx < n; ++xx) {
            const std::size_t row =
                static_cast<std::size_t>(z) * plane + static_cast<std::size_t>(y * n + xx);
            const std::int64_t self = static_cast<std::int64_t>(row + plane);
            const long gz = z0 + z;
            row_start[row] = static_cast<std::int64_t>(k);
            auto add = [&](std::int64_t c, double v) {
              column[k] = c;
              value[k] = v;
              ++k;
            };
            add(self, 6.05);
            if (xx > 0) add(self - 1, -1.0);
            if (xx < n - 1) add(self + 1, -1.0);
            if (y > 0) add(self - n, -1.0);
            if (y < n - 1) add(self + n, -1.0);
            if (gz > 0) add(self - static_cast<std::int64_t>(plane), -1.0);
            if (gz < n - 1) add(self + static_cast<std::int64_t>(plane), -1.0);
            // b = 1 everywhere and x = 0: r = p = b.
            r[row] = 1.0;
            p[row + plane] = 1.0;
          }
      row_start[rows] = static_cast<std::int64_t>(k);
      state.rr = dot(r, r, rows);
#ifdef USE_SELFCKPT
    }
#endif
    const int below = rank > 0 ? rank - 1 : MPI_PROC_NULL,
              above = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    const int count = static_cast<int>(plane);
    while (state.iteration < iterations) {
      double* pp = p.data();
      MPI_Sendrecv(pp + plane, count, MPI_DOUBLE, below, 0,
                   pp + plane * static_cast<std::size_t>(planes + 1), count, MPI_DOUBLE, above, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Sendrecv(pp + plane * static_cast<std::size_t>(planes), count, MPI_DOUBLE, above, 1, pp,
                   count, MPI_DOUBLE, below, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (std::size_t i = 0; i < rows; ++i) {
        double s = 0;
        for (std::int64_t e = row_start[i]; e < row_start[i + 1]; ++e)
          s += value[e] * pp[column[e]];
        ap[i] = s;
      }
      double pap_local = 0;
      for (std::size_t i = 0; i < rows; ++i)
        pap_local += pp[i + plane] * ap[i];
      double pap = 0;
      MPI_Allreduce(&pap_local, &pap, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      const double alpha = state.rr / pap;
      for (std::size_t i = 0; i < rows; ++i) {
        x[i] += alpha * pp[i + plane];
        r[i] -= alpha * ap[i];
      }
      const double rr_next = dot(r, r, rows);
      const double beta = rr_next / state.rr;
      for (std::size_t i = 0; i < rows; ++i)
        pp[i + plane] = r[i] + beta * pp[i + plane];
      state.rr = rr_next;
      ++state.iteration;
#ifdef USE_SELFCKPT
      if (state.iteration < iterations && ctx.need_checkpoint()) ctx.checkpoint();
#endif
    }

    std::uint64_t mine = digest(x.data(), rows * sizeof(double), 14695981039346656037ull);
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
    MPI_Gather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("residual norm %.6e after %ld iterations\n", std::sqrt(state.rr), iterations);
      std::printf("RESULT %016llx\n",
                  static_cast<unsigned long long>(digest(
                      all.data(), all.size() * sizeof(std::uint64_t), 14695981039346656037ull)));
    }
    RELEASE(row_start);
    RELEASE(column);
    RELEASE(value);
#ifdef USE_SELFCKPT
    x = Vector();
    r = Vector();
    p = Vector();
    ap = Vector();
    ctx.finalize(true);
  } catch (const skt::Error& e) {
    std::fprintf(stderr, "cg rank %d: %s\n", rank, e.what());
    std::exit(e.exit_code());
  }
#endif
  MPI_Finalize();
  return 0;
}
