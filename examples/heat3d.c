/* heat3d: the 3-D heat equation by explicit Jacobi steps on an nx x ny x nz grid, cut into slabs
 * of z-planes, one per rank, with halo planes exchanged between neighbours every step.
 *
 * Built twice: plain (MPI only), and with -DUSE_SELFCKPT, where the two arrays live in the
 * self-checkpointed workspace and a relaunch after a failure resumes at the last checkpoint. The
 * difference between the two builds is every line under USE_SELFCKPT below.
 *
 *   mpirun -n 4 heat3d [nx ny nz steps checkpoint_every]      (defaults 64 64 64 200 20)
 *
 * Prints "RESULT <hex digest of the final grid>": the same, bit for bit, for both builds, any
 * number of ranks, and whatever failures happened on the way.
 *
 * With HEAT3D_FROM=<job tag> (selfckpt build), a fresh start takes the grid and step from the last
 * epoch that job drained (SKT_DRAIN_DIR), whatever number of ranks it ran on: each rank reads its
 * planes from the old ranks that held them (skt_epoch_read), then checkpoints under its own tag. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef USE_SELFCKPT
#include <selfckpt/selfckpt.h>
#define ALLOCATE(bytes) skt_calloc(1, bytes)
#define RELEASE(p) skt_free(p)
#else
#define ALLOCATE(bytes) calloc(1, bytes)
#define RELEASE(p) free(p)
#endif

static double initial(long x, long y, long z) {
  return (double)((x * 7 + y * 13 + z * 29) % 97) / 97.0;
}

static uint64_t digest(const void* data, size_t bytes, uint64_t h) {
  const unsigned char* p = (const unsigned char*)data;
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

#ifdef USE_SELFCKPT
/* The grid and step of job `job`'s last epoch, which may have run on another number of ranks:
 * each of this rank's planes z0 .. z0+planes-1 is read from the old rank that held it, into the
 * array the step makes current. 0, or the exit code after saying why (on every rank alike). */
static int resume_from(const char* job, long nx, long ny, long nz, long z0, long planes, double* a,
                       double* b, long* step) {
  skt_epoch* old;
  int code = skt_epoch_open(MPI_COMM_WORLD, job, &old);
  int n = 0, in_memory = 0;
  if (code == SKT_OK) code = skt_epoch_ranks(old, &n);
  if (code == SKT_OK) code = skt_epoch_in_memory(old, &in_memory);
  skt_epoch_piece first = {0, "step", 0, sizeof *step, step};
  if (code == SKT_OK) code = skt_epoch_read(old, &first, 1);
  if (code != SKT_OK) {
    fprintf(stderr, "heat3d: %s\n", skt_last_error());
    skt_epoch_close(old);
    return skt_exit_code(code);
  }
  const size_t plane = (size_t)(nx * ny);
  const char* current = *step % 2 == 0 ? "malloc.0" : "malloc.1";
  double* into = *step % 2 == 0 ? a : b;
  skt_epoch_piece* pieces = malloc(sizeof(skt_epoch_piece) * (size_t)planes);
  int wrong_grid = 0;
  for (long z = 0; z < planes; ++z) {
    const long gz = z0 + z;
    int q = 0;
    while (nz * (q + 1) / n <= gz)
      ++q;
    const long old_z0 = nz * q / n, old_planes = nz * (q + 1) / n - old_z0;
    size_t bytes = 0;
    if (skt_epoch_region_bytes(old, q, current, &bytes) != SKT_OK ||
        bytes != plane * (size_t)(old_planes + 2) * sizeof(double)) {
      if (!wrong_grid)
        fprintf(stderr,
                "heat3d: job '%s' ran another grid: its rank %d of %d holds %zu bytes, a "
                "%ldx%ldx%ld grid would give it %zu\n",
                job, q, n, bytes, nx, ny, nz, plane * (size_t)(old_planes + 2) * sizeof(double));
      wrong_grid = 1;
    }
    pieces[z] = (skt_epoch_piece){q, current, (size_t)(gz - old_z0 + 1) * plane * sizeof(double),
                                  plane * sizeof(double), into + (size_t)(z + 1) * plane};
  }
  /* The read is collective: every rank takes part, and a wrong grid is refused on all. */
  MPI_Allreduce(MPI_IN_PLACE, &wrong_grid, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  code = wrong_grid ? SKT_OK : skt_epoch_read(old, pieces, (size_t)planes);
  free(pieces);
  if (code != SKT_OK) fprintf(stderr, "heat3d: %s\n", skt_last_error());
  uint64_t number = 0;
  skt_epoch_number(old, &number);
  if (code == SKT_OK && !wrong_grid && z0 == 0)
    printf("resumed from epoch %llu of job '%s' (%d ranks, %d of them in memory) at step %ld\n",
           (unsigned long long)number, job, n, in_memory, *step);
  skt_epoch_close(old);
  return wrong_grid ? 2 : skt_exit_code(code);
}
#endif

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long nx = argc > 1 ? atol(argv[1]) : 64, ny = argc > 2 ? atol(argv[2]) : 64;
  const long nz = argc > 3 ? atol(argv[3]) : 64, steps = argc > 4 ? atol(argv[4]) : 200;
  const long every = argc > 5 ? atol(argv[5]) : 20;
  if (nx < 3 || ny < 3 || nz < size || steps < 1 || every < 1) {
    if (rank == 0) fprintf(stderr, "heat3d: need nx, ny >= 3, nz >= ranks, steps, every >= 1\n");
    MPI_Finalize();
    return 2;
  }
  /* This rank's planes z0 .. z0+planes-1, with a halo plane below and above. */
  const long z0 = nz * rank / size, planes = nz * (rank + 1) / size - z0;
  const size_t plane = (size_t)(nx * ny), cells = plane * (size_t)(planes + 2);
#ifdef USE_SELFCKPT
  skt_context* ctx;
  if (skt_init(MPI_COMM_WORLD, NULL, &ctx) != SKT_OK) {
    fprintf(stderr, "heat3d: %s\n", skt_last_error());
    return skt_exit_code(skt_last_error_code());
  }
#endif
  double* a = ALLOCATE(cells * sizeof(double));
  double* b = ALLOCATE(cells * sizeof(double));
  long step = 0;
#ifdef USE_SELFCKPT
  if (a == NULL || b == NULL) {
    fprintf(stderr, "heat3d: %s\n", skt_last_error());
    return skt_exit_code(skt_last_error_code());
  }
  skt_protect(ctx, "step", &step, sizeof step);
  uint64_t epoch = 0;
  int code = skt_recover(ctx, &epoch);
  if (code != SKT_OK) {
    fprintf(stderr, "heat3d rank %d: %s\n", rank, skt_last_error());
    return skt_exit_code(code);
  }
  if (epoch > 0 && rank == 0)
    printf("restored epoch %llu at step %ld\n", (unsigned long long)epoch, step);
  const char* from = getenv("HEAT3D_FROM");
  int initialise = epoch == 0;
  if (initialise && from != NULL && *from != '\0') {
    code = resume_from(from, nx, ny, nz, z0, planes, a, b, &step);
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (code != 0) { /* this job committed nothing: its segments go, the old job stays */
      skt_finalize(ctx, 1);
      MPI_Finalize();
      return code;
    }
    /* The new shape's own checkpoint at once: from here on the old job is not needed. */
    if (skt_checkpoint(ctx) != SKT_OK) {
      fprintf(stderr, "heat3d rank %d: %s\n", rank, skt_last_error());
      return skt_exit_code(skt_last_error_code());
    }
    initialise = 0;
  }
  if (initialise)
#endif
    for (long z = 0; z < planes; ++z)
      for (long y = 0; y < ny; ++y)
        for (long x = 0; x < nx; ++x)
          a[(size_t)(z + 1) * plane + (size_t)(y * nx + x)] = initial(x, y, z0 + z);

  const int below = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  const int above = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
  const double alpha = 0.1;
  while (step < steps) {
    /* Even steps go from a to b, odd ones from b to a: the step number says which is current. */
    double* u = step % 2 == 0 ? a : b;
    double* v = step % 2 == 0 ? b : a;
    MPI_Sendrecv(u + plane, (int)plane, MPI_DOUBLE, below, 0, u + plane * (size_t)(planes + 1),
                 (int)plane, MPI_DOUBLE, above, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(u + plane * (size_t)planes, (int)plane, MPI_DOUBLE, above, 1, u, (int)plane,
                 MPI_DOUBLE, below, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (long z = 1; z <= planes; ++z) {
      const long gz = z0 + z - 1;
      for (long y = 0; y < ny; ++y)
        for (long x = 0; x < nx; ++x) {
          const size_t i = (size_t)z * plane + (size_t)(y * nx + x);
          if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1 || gz == 0 || gz == nz - 1) {
            v[i] = u[i]; /* fixed boundary */
            continue;
          }
          v[i] = u[i] + alpha * (u[i - 1] + u[i + 1] + u[i - nx] + u[i + nx] + u[i - plane] +
                                 u[i + plane] - 6.0 * u[i]);
        }
    }
    ++step;
#ifdef USE_SELFCKPT
    if (step % every == 0 && step < steps) {
      code = skt_checkpoint(ctx);
      if (code != SKT_OK) {
        fprintf(stderr, "heat3d rank %d: %s\n", rank, skt_last_error());
        return skt_exit_code(code);
      }
    }
#endif
  }

  /* A digest per plane, combined in z order: the same whatever the number of ranks. */
  const double* u = steps % 2 == 0 ? a : b;
  uint64_t* mine = malloc(sizeof(uint64_t) * (size_t)planes);
  for (long z = 0; z < planes; ++z)
    mine[z] = digest(u + (size_t)(z + 1) * plane, plane * sizeof(double), 14695981039346656037ull);
  uint64_t* all = malloc(sizeof(uint64_t) * (size_t)nz);
  int* counts = malloc(sizeof(int) * (size_t)size);
  int* displs = malloc(sizeof(int) * (size_t)size);
  for (int r = 0; r < size; ++r) {
    displs[r] = (int)(nz * r / size);
    counts[r] = (int)(nz * (r + 1) / size) - displs[r];
  }
  MPI_Gatherv(mine, (int)planes, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T, 0,
              MPI_COMM_WORLD);
  if (rank == 0) {
    uint64_t h = 14695981039346656037ull;
    for (long z = 0; z < nz; ++z)
      h = digest(&all[z], sizeof all[z], h);
    printf("RESULT %016llx after %ld steps\n", (unsigned long long)h, steps);
  }
  free(mine);
  free(all);
  free(counts);
  free(displs);
  RELEASE(a);
  RELEASE(b);
#ifdef USE_SELFCKPT
  skt_finalize(ctx, 1);
#endif
  MPI_Finalize();
  return 0;
}
