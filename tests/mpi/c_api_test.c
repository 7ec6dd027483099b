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

  int all = failures;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("C API test: %d failure(s)\n", all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
