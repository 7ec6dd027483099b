/* The C interface from C: the calls, their error codes, and the allocator, under mpirun. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "selfckpt/selfckpt.h"

static int failures = 0;
static double counter_before_declaration;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              skt_last_error());                                                               \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

/* A job's region of rank r, byte i. */
static unsigned char pattern(int r, size_t i) {
  return (unsigned char)(i * 31 + (size_t)r * 7 + 1);
}

/* Reads both old ranks' regions and private objects through an open epoch, and checks them. */
static void check_old_ranks(skt_epoch* old) {
  for (int r = 0; r < 2; ++r) {
    size_t size = 0;
    CHECK(skt_epoch_region_bytes(old, r, "grid", &size) == SKT_OK &&
          size == 5000 + 1000 * (size_t)r);
    unsigned char* back = (unsigned char*)malloc(size);
    unsigned char tail[3] = {0};
    long old_step = 0;
    skt_epoch_piece pieces[3] = {{r, "grid", 0, size, back},
                                 {r, "grid", size - 3, 3, tail},
                                 {r, "step", 0, sizeof old_step, &old_step}};
    CHECK(skt_epoch_read(old, pieces, 3) == SKT_OK);
    int same = 1;
    for (size_t i = 0; i < size; ++i)
      same = same && back[i] == pattern(r, i);
    CHECK(same);
    CHECK(tail[2] == pattern(r, size - 1));
    CHECK(old_step == 41 + r);
    free(back);
  }
}

/* The job that ran on these ranks, read through skt_epoch as a program of another shape would:
 * from memory, from its drained files (on other nodes, where its segments are not), and from both,
 * and every bad input. */
static void check_epoch_reading(int rank) {
  skt_epoch* old = NULL;
  CHECK(skt_epoch_open(MPI_COMM_WORLD, NULL, &old) == SKT_ERR_ARG);
  unsetenv("SKT_DRAIN_DIR");
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_ERR_UNRECOVERABLE && old == NULL);
  CHECK(strstr(skt_last_error(),
               "no checkpoint of it is in memory on the nodes of this run, and "
               "SKT_DRAIN_DIR is not set") != NULL);
  char dir[64] = "/tmp/skt-capi-drain-XXXXXX";
  if (rank == 0 && mkdtemp(dir) == NULL) ++failures;
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  setenv("SKT_DRAIN_DIR", dir, 1);
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "../etc", &old) == SKT_ERR_ARG);
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_ERR_UNRECOVERABLE);
  CHECK(strstr(skt_last_error(), "holds no complete drained epoch of it") != NULL);

  setenv("SKT_JOB", "capi-epoch", 1);
  const size_t bytes = 5000 + 1000 * (size_t)rank;
  skt_context* ctx = NULL;
  unsigned char* grid = NULL;
  long step = 0;
  CHECK(skt_init(MPI_COMM_WORLD, NULL, &ctx) == SKT_OK);
  CHECK(skt_alloc(ctx, "grid", bytes, (void**)&grid) == SKT_OK);
  CHECK(skt_protect(ctx, "step", &step, sizeof step) == SKT_OK);
  uint64_t epoch = 0;
  CHECK(skt_recover(ctx, &epoch) == SKT_OK && epoch == 0);
  for (size_t i = 0; i < bytes; ++i)
    grid[i] = pattern(rank, i);
  step = 40 + rank;
  CHECK(skt_checkpoint(ctx) == SKT_OK);
  step = 41 + rank;
  CHECK(skt_checkpoint(ctx) == SKT_OK);
  /* While a process of the job holds its segments (here this one), its epoch is not read. The
   * count it names is the system's count of attachments at that moment: any other process of this
   * user that lists its segments (skt-shm list, another job starting) attaches each for a look. */
  setenv("SKT_ATTACH_WAIT", "0", 1);
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_ERR_BUSY && old == NULL);
  CHECK(strstr(skt_last_error(), "segment of job 'capi-epoch' rank 0 is still attached by ") !=
        NULL);
  CHECK(strstr(skt_last_error(), " live process") != NULL);
  unsetenv("SKT_ATTACH_WAIT");
  CHECK(skt_finalize(ctx, 0) == SKT_OK); /* kept, and the drain of epoch 2 finished */

  /* In memory: both segments are on the nodes of this run. */
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_OK && old != NULL);
  uint64_t number = 0;
  int nranks = 0, in_memory = 0;
  CHECK(skt_epoch_number(old, &number) == SKT_OK && number == 2);
  CHECK(skt_epoch_ranks(old, &nranks) == SKT_OK && nranks == 2);
  CHECK(skt_epoch_in_memory(old, &in_memory) == SKT_OK && in_memory == 2);
  check_old_ranks(old);
  /* Bad pieces: an error on one rank is the error of every rank. */
  unsigned char one = 0;
  skt_epoch_piece beyond_ranks = {rank == 1 ? 2 : 0, "grid", 0, 1, &one};
  CHECK(skt_epoch_read(old, &beyond_ranks, 1) == SKT_ERR_ARG);
  CHECK(strstr(skt_last_error(), "old rank 2 never existed") != NULL);
  skt_epoch_piece no_region = {1, "mesh", 0, 1, &one};
  CHECK(skt_epoch_read(old, &no_region, rank == 0 ? 1 : 0) == SKT_ERR_MISMATCH);
  CHECK(strstr(skt_last_error(),
               "has no region or private object 'mesh'; it has 'step', "
               "'grid'") != NULL);
  skt_epoch_piece past_end = {0, "grid", 4999, 2, &one};
  CHECK(skt_epoch_read(old, &past_end, 1) == SKT_ERR_ARG);
  skt_epoch_piece no_buffer = {0, "grid", 0, 1, NULL};
  CHECK(skt_epoch_read(old, &no_buffer, 1) == SKT_ERR_ARG);
  CHECK(skt_epoch_read(old, NULL, 0) == SKT_OK);
  /* A binding's refusal on rank 1, while rank 0 reads: the same error on both. */
  skt_epoch_piece fine = {0, "grid", 0, 1, &one};
  CHECK((rank == 1 ? skt_epoch_read_refusing(old, "lengths differ")
                   : skt_epoch_read(old, &fine, 1)) == SKT_ERR_ARG);
  CHECK(strstr(skt_last_error(), "lengths differ") != NULL);
  CHECK(skt_epoch_read_refusing(NULL, "x") == SKT_ERR_ARG);
  size_t size = 0;
  CHECK(skt_epoch_region_bytes(old, -1, "grid", &size) == SKT_ERR_ARG);
  CHECK(skt_epoch_close(old) == SKT_OK);
  CHECK(skt_epoch_close(NULL) == SKT_OK);

  /* From the drained files: on other nodes, where none of its segments is. */
  char node[32];
  snprintf(node, sizeof node, "d%d", rank);
  setenv("SKT_NODE", node, 1);
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_OK);
  CHECK(skt_epoch_in_memory(old, &in_memory) == SKT_OK && in_memory == 0);
  CHECK(skt_epoch_number(old, &number) == SKT_OK && number == 2);
  check_old_ranks(old);
  CHECK(skt_epoch_close(old) == SKT_OK);
  /* Both: old rank 0's segment on rank 0's node, old rank 1's file. */
  snprintf(node, sizeof node, rank == 0 ? "c0" : "d1");
  setenv("SKT_NODE", node, 1);
  CHECK(skt_epoch_open(MPI_COMM_WORLD, "capi-epoch", &old) == SKT_OK);
  CHECK(skt_epoch_in_memory(old, &in_memory) == SKT_OK && in_memory == 1);
  check_old_ranks(old);
  CHECK(skt_epoch_close(old) == SKT_OK);

  /* The job, done with: resumed and removed, drains and all. */
  snprintf(node, sizeof node, "c%d", rank);
  setenv("SKT_NODE", node, 1);
  CHECK(skt_init(MPI_COMM_WORLD, NULL, &ctx) == SKT_OK);
  CHECK(skt_alloc(ctx, "grid", bytes, (void**)&grid) == SKT_OK);
  CHECK(skt_protect(ctx, "step", &step, sizeof step) == SKT_OK);
  CHECK(skt_recover(ctx, &epoch) == SKT_OK && epoch == 2);
  CHECK(skt_finalize(ctx, 1) == SKT_OK);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    if (system(command) != 0) ++failures;
  }
  unsetenv("SKT_JOB");
  unsetenv("SKT_DRAIN_DIR");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char node[32];
  snprintf(node, sizeof node, "c%d", rank);
  setenv("SKT_NODE", node, 1);
  setenv("SKT_GROUP_SIZE", "2", 1);

  CHECK(skt_init(MPI_COMM_WORLD, NULL, NULL) == SKT_ERR_ARG);
  skt_context* ctx = NULL;
  CHECK(skt_init(MPI_COMM_WORLD, NULL, &ctx) == SKT_OK);
  CHECK(skt_malloc(0) == NULL);
  double* a = (double*)skt_malloc(1000 * sizeof(double));
  CHECK(a != NULL);
  int* scratch = (int*)skt_malloc(64);
  CHECK(scratch != NULL);
  skt_free(scratch); /* before recovery: gone for good */
  CHECK(skt_calloc((size_t)-1, 16) == NULL);
  CHECK(skt_last_error_code() == SKT_ERR_ARG);
  CHECK(strstr(skt_last_error(), "overflows") != NULL);
  unsigned char* zeros = (unsigned char*)skt_calloc(100, 3);
  CHECK(zeros != NULL);
  int all_zero = 1;
  for (int i = 0; i < 300; ++i)
    all_zero = all_zero && zeros[i] == 0;
  CHECK(all_zero);
  for (int i = 0; i < 300; ++i)
    zeros[i] = (unsigned char)(i * 7 + rank);
  unsigned char* grown = (unsigned char*)skt_realloc(zeros, 500); /* contents kept */
  CHECK(grown != NULL && grown != zeros);
  int kept = 1;
  for (int i = 0; i < 300; ++i)
    kept = kept && grown[i] == (unsigned char)(i * 7 + rank);
  CHECK(kept);
  CHECK(skt_realloc(grown, 0) == NULL); /* frees */
  CHECK(skt_realloc(NULL, 40) != NULL); /* mallocs: 40 bytes stay in the workspace */
  CHECK(skt_realloc(&counter_before_declaration, 8) == NULL);
  CHECK(skt_last_error_code() == SKT_ERR_ARG);
  long* named = (long*)skt_malloc_named("named", 8 * sizeof(long));
  CHECK(named != NULL);
  CHECK(skt_malloc_named("named", 8) == NULL);
  CHECK(skt_last_error_code() == SKT_ERR_ARG);
  void* grid = NULL;
  CHECK(skt_alloc(ctx, "grid", 4096 + 17 * (size_t)rank, &grid) == SKT_OK);
  CHECK(skt_alloc(ctx, "grid", 100, &grid) == SKT_ERR_ARG);
  CHECK(strstr(skt_last_error(), "already allocated") != NULL);
  CHECK(skt_alloc(ctx, "bad name!", 100, &grid) == SKT_ERR_ARG);
  CHECK(skt_alloc(ctx, "empty", 0, &grid) == SKT_ERR_ARG);
  /* Sizes that wrapped (n * sizeof(double) with n = -1; anything near SIZE_MAX) are refused, and
     the next region still gets its own memory. */
  long minus_one = -1;
  CHECK(skt_alloc(ctx, "wrapped", (size_t)minus_one * sizeof(double), &grid) == SKT_ERR_ARG);
  CHECK(strstr(skt_last_error(), "wrapped around") != NULL);
  CHECK(skt_alloc(ctx, "huge", SIZE_MAX - 4095, &grid) == SKT_ERR_ARG);
  CHECK(skt_malloc(SIZE_MAX - 100) == NULL && skt_last_error_code() == SKT_ERR_ARG);
  CHECK(skt_protect(ctx, "huge", &minus_one, (size_t)-1) == SKT_ERR_ARG);
  int counter = 7;
  CHECK(skt_protect(ctx, "counter", &counter, sizeof counter) == SKT_OK);
  CHECK(skt_checkpoint(ctx) == SKT_ERR_STATE);

  uint64_t epoch = 99;
  CHECK(skt_recover(ctx, &epoch) == SKT_OK);
  CHECK(epoch == 0);
  CHECK(skt_recover(ctx, &epoch) == SKT_ERR_STATE);
  void* late = NULL;
  CHECK(skt_alloc(ctx, "late", 100, &late) == SKT_ERR_STATE);
  CHECK(strstr(skt_last_error(), "before recovering") != NULL);
  CHECK(skt_malloc(100) == NULL);
  CHECK(skt_last_error_code() == SKT_ERR_STATE);
  CHECK(skt_realloc(named, 100) == NULL);
  CHECK(skt_last_error_code() == SKT_ERR_STATE);
  for (int i = 0; i < 1000; ++i)
    a[i] = i * 0.5 + rank;
  CHECK(skt_checkpoint(ctx) == SKT_OK);
  CHECK(skt_checkpoint(ctx) == SKT_OK);

  skt_stats stats;
  CHECK(skt_get_stats(ctx, &stats) == SKT_OK);
  CHECK(stats.epoch == 2);
  CHECK(stats.group_size == 2);
  /* The regions one after the other in one workspace, each aligned (to a page from a page on),
   * and the staged counter (64 bytes). */
  const size_t declared = 8000 + 4096 + 17 * (size_t)rank + 40 + 8 * sizeof(long) + 64;
  CHECK(stats.workspace_bytes >= declared && stats.workspace_bytes < declared + 3 * 4096);
  CHECK(stats.checksum_bytes > 0);

  CHECK(strcmp(skt_strerror(SKT_ERR_UNRECOVERABLE), skt_strerror(SKT_ERR_MISMATCH)) != 0);
  CHECK(skt_exit_code(SKT_OK) == 0);
  CHECK(skt_exit_code(SKT_ERR_CONFIG) == 2);
  CHECK(skt_exit_code(SKT_ERR_UNRECOVERABLE) == 3);
  CHECK(skt_exit_code(SKT_ERR_SHM) == 2);
  CHECK(skt_exit_code(SKT_ERR_NOMEM) == 2);
  CHECK(skt_exit_code(SKT_ERR_MPI) == 1);
  CHECK(skt_finalize(ctx, 1) == SKT_OK);
  CHECK(skt_malloc(8) == NULL); /* no default context any more */
  check_epoch_reading(rank);

  int all = failures;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("C API test: %d failure(s)\n", all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
