/*
 * selfckpt: diskless in-memory self-checkpointing for MPI programs.
 *
 * A program keeps its large data in workspace regions (skt_alloc / skt_malloc), which live in
 * SysV shared memory and outlive the process. skt_checkpoint commits the workspace together with
 * group checksums kept twice (of the workspace and of the committed copy), so that after any
 * single failure per group, even in the middle of a checkpoint, a relaunched job gets its data
 * back bit for bit from skt_recover.
 *
 * Typical use:
 *
 *   skt_context *ctx;
 *   skt_init(MPI_COMM_WORLD, NULL, &ctx);
 *   skt_alloc(ctx, "grid", bytes, (void **)&grid);     // every region, same order and sizes
 *   skt_protect(ctx, "step", &step, sizeof step);      // small private state
 *   uint64_t epoch;
 *   skt_recover(ctx, &epoch);                          // 0: fresh start; else data restored
 *   if (epoch == 0) initialise(grid), step = 0;
 *   for (; step < steps; ++step) { compute(grid); if (step % k == 0) skt_checkpoint(ctx); }
 *   skt_finalize(ctx, 1);                              // done: remove the job's segments
 *
 * Every call returns 0 or a negative SKT_ERR_* code; skt_strerror names the code and
 * skt_last_error gives the full message of the calling thread's last failure. The library never
 * exits or aborts the process.
 *
 * Every rank of a context makes the same collective calls in the same order (skt_recover,
 * skt_checkpoint, skt_checkpoint_dirty, skt_need_checkpoint, skt_finalize with discard): decide to
 * checkpoint on one rank and broadcast it, or with skt_need_checkpoint, never from each rank's own
 * clock. Each of these calls first compares which call every rank made; ranks in different calls
 * all get SKT_ERR_STATE, naming who called what, and nothing is done.
 */
#ifndef SELFCKPT_SELFCKPT_H
#define SELFCKPT_SELFCKPT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKT_VERSION_MAJOR 0
#define SKT_VERSION_MINOR 1

enum skt_error {
  SKT_OK = 0,
  SKT_ERR_ARG = -1,           /* a bad argument to a call */
  SKT_ERR_CONFIG = -2,        /* the configuration (file or SKT_* variables) is invalid */
  SKT_ERR_SHM = -3,           /* shared memory could not be created or attached */
  SKT_ERR_MPI = -4,           /* an MPI call failed */
  SKT_ERR_UNRECOVERABLE = -5, /* a group lost more members than its scheme tolerates */
  SKT_ERR_MISMATCH = -6,      /* the relaunch differs from the checkpoint (regions, settings) */
  SKT_ERR_STATE = -7,         /* a call out of order (skt_alloc after skt_recover; ranks in
                                 different collective calls) */
  SKT_ERR_NOMEM = -8,         /* out of memory */
  SKT_ERR_STALE = -9,         /* segments of this job left over from an earlier run */
  SKT_ERR_INTERNAL = -10,     /* a bug in selfckpt: please report it */
  SKT_ERR_BUSY = -11          /* the job's segments are still attached by an earlier launch */
};

typedef struct skt_context skt_context;

/* Collective over comm. config_path may be NULL: defaults, then the file named by SKT_CONFIG if
 * set, then SKT_* environment variables. The first context initialised becomes the default one
 * used by skt_malloc. A context whose rank 0 is rank R > 0 of MPI_COMM_WORLD (a member of an
 * ensemble) takes the job tag SKT_JOB+wR; two contexts open at once in one process need a tag
 * each (SKT_ERR_CONFIG). */
int skt_init(MPI_Comm comm, const char* config_path, skt_context** ctx);

/* skt_init for a communicator held as a Fortran handle (MPI_Fint): what the Fortran module calls.
 */
int skt_init_fortran(MPI_Fint comm, const char* config_path, skt_context** ctx);

/* A workspace region of `bytes` bytes in shared memory, page aligned. Must be called before
 * skt_recover. On a relaunch the same name and size give back the same region. */
int skt_alloc(skt_context* ctx, const char* name, size_t bytes, void** ptr);

/* A small private region (a loop counter, a few scalars) that is staged into the workspace at each
 * checkpoint and written back by skt_recover. Must be called before skt_recover; the memory must
 * stay valid until skt_finalize. */
int skt_protect(skt_context* ctx, const char* name, void* ptr, size_t bytes);

/* Collective. Call once, after declaring every region. Sets *epoch to the restored epoch (the
 * number of checkpoints committed), or 0 on a fresh start, in which case regions hold no useful
 * data and protected memory is left as it is. */
int skt_recover(skt_context* ctx, uint64_t* epoch);

/* Collective. Commits the workspace and the protected regions as the next epoch. In the self mode
 * with xor or rs, it finds the blocks that changed since the last commit by comparing the
 * workspace with the committed copy, and encodes, sends and flushes only those (the result is
 * identical to a full checkpoint's); SKT_FIND_CHANGES=0 encodes everything every time. */
int skt_checkpoint(skt_context* ctx);

/* The region starting at ptr (as skt_alloc or skt_malloc returned it) does not change any more,
 * from the next checkpoint on: that checkpoint compares it a last time, later ones skip it (a mesh,
 * coefficients set up once). A promise: writes into it after that are not checkpointed, and after
 * a failure the region comes back as that checkpoint had it. */
int skt_mark_static(skt_context* ctx, const void* ptr);

/* Bytes of a workspace region changed since the last checkpoint. */
typedef struct skt_range {
  const char* region; /* name given to skt_alloc */
  size_t offset;      /* first changed byte */
  size_t length;      /* changed bytes from there */
} skt_range;

/* Collective. An incremental checkpoint: like skt_checkpoint, but the caller promises that only
 * these ranges (each rank its own; count may be 0) changed since the last checkpoint, so only the
 * stripes they touch are encoded, sent and flushed: D = C + code(W - B) over them. Protected
 * regions always count as changed. The committed copy and checksums come out identical to a full
 * checkpoint's. The library checks the promise (SKT_CHECK_DECLARED): the first such call of a run
 * compares the whole workspace with the committed copy outside the ranges, later calls a rotating
 * sixteenth of it (or every call all of it, or none); bytes found changed there are protected all
 * the same, with a warning naming them, and from then on every call compares in full. Bytes changed
 * outside the ranges that no check saw are not protected: after a failure they come back as they
 * were at the last checkpoint that covered them. The first checkpoint after a fresh start, the sum
 * scheme, and the single and double modes always checkpoint in full. */
int skt_checkpoint_dirty(skt_context* ctx, const skt_range* ranges, size_t count);

/* Collective. Sets *need to 1 when the optimum checkpoint interval has passed since the last
 * checkpoint (or recovery), else 0. The interval is Daly's higher-order optimum from the cost of
 * the last checkpoint (the slowest rank's time) and the mean time between failures configured
 * with SKT_MTBF; rank 0's clock decides for all ranks. Before the first checkpoint, *need is 1,
 * so that its cost gets measured. SKT_ERR_CONFIG without an MTBF. */
int skt_need_checkpoint(skt_context* ctx, int* need);

/* Collective. discard = 1 removes this job's segments (the run is complete); 0 keeps them so that a
 * relaunch can recover. Frees ctx in both cases. With discard = 1 every rank records the job as
 * complete before any removes its segments: a run ended in the middle of the removals is, at a
 * relaunch, a job that starts afresh (what is left is removed), never ranks taken for lost. */
int skt_finalize(skt_context* ctx, int discard);

/* The default context: the first one created and not yet finalized (NULL if none). It is the one
 * skt_malloc allocates from; code deep in a program can checkpoint through it without a global. */
skt_context* skt_default_context(void);

/* The drop-in allocator, on the default context: unnamed allocation number k is the region
 * "<scope>.k", the scope being "malloc" unless skt_malloc_scope chose another, so a program that
 * allocates in the same order within each scope on relaunch gets its regions back. C semantics
 * otherwise, with one rule: every allocation happens before skt_recover (the workspace is fixed
 * from then on; a later one fails with SKT_ERR_STATE in skt_last_error). Returns NULL on error (the
 * message is in skt_last_error). Before skt_recover, memory holds zeros on a fresh start and the
 * previous run's data on a relaunch; skt_recover restores it.
 *   skt_calloc        checks count*size for overflow.
 *   skt_realloc       before skt_recover: a new region (the next number), the old contents
 *                     copied, the old region freed; realloc(NULL, n) is skt_malloc(n),
 *                     realloc(p, 0) frees p.
 *   skt_malloc_named  a region with a name of the program's choosing, stable whatever the order.
 * skt_free of a pointer that these did not return is ignored; after skt_recover, freed regions
 * stay allocated until skt_finalize. */
void* skt_malloc(size_t bytes);
void* skt_calloc(size_t count, size_t size);
void* skt_realloc(void* ptr, size_t bytes);
void* skt_malloc_named(const char* name, size_t bytes);
void skt_free(void* ptr);

/* Names the next unnamed allocations "<name>.0", "<name>.1", ... (each scope counts on its own;
 * NULL: back to "malloc"), so that a component's allocations keep their names whatever other
 * components allocate, and errors name them. A name is 1 to 63 of A-Z a-z 0-9 _ -.
 * skt_malloc_scope_name gives the current one (C++: skt::allocation_scope does both). */
int skt_malloc_scope(const char* name);
const char* skt_malloc_scope_name(void);

/* Sizes and state of a context. */
typedef struct skt_stats {
  uint64_t epoch;                 /* epoch committed or restored last */
  int group;                      /* this rank's group */
  int group_size;                 /* members of that group */
  int member;                     /* this rank's index in it */
  size_t workspace_bytes;         /* |W|: regions plus the staged private regions */
  size_t checkpoint_bytes;        /* |B|: the committed copy */
  size_t checksum_bytes;          /* |C| (= |D|): this rank's share of its group's checksum */
  size_t shm_bytes;               /* every shared-memory segment of this rank, headers included */
  double last_checkpoint_seconds; /* the slowest rank's time */
  double last_recover_seconds;
  uint64_t last_sent_bytes;    /* bytes this rank sent to its group in the last checkpoint */
  uint64_t last_flushed_bytes; /* bytes it copied locally: into B, and C's blocks into D */
  double last_verify_seconds;  /* of the last recovery, this rank's time checking its memory
                                  (W, B, C) block by block against the CRCs of the epoch */
  uint64_t last_changed_bytes; /* bytes of its workspace the last checkpoint encoded: what changed
                                  (found or declared), or everything for a full checkpoint */
  double last_scan_seconds;    /* of that checkpoint, this rank's time finding what changed */
} skt_stats;

int skt_get_stats(const skt_context* ctx, skt_stats* stats);

/* Where this rank's last skt_recover spent its time, phase by phase, and the bytes it moved (all
 * zero before one). The phases add up to `seconds`; `agree` is the rest: the job's agreements and
 * the time spent waiting there for slower ranks. The same is logged at the info level (SKT_LOG). */
typedef struct skt_recovery {
  double seconds; /* the whole call on this rank */
  double attach;  /* attaching the segments that survived, or creating and populating new ones */
  double join;    /* planning and joining the group */
  double verify;  /* checking W, B and the checksum against the block digests */
  double fetch;   /* waiting for the group's transfers to arrive or leave */
  double decode;  /* its part of the group's rebuild: combining and sending */
  double restore; /* writing W and B back, the digests of what came, the private objects */
  double agree;   /* agreements, and waiting for the other ranks */
  uint64_t verified_bytes; /* read to verify */
  uint64_t rebuilt_bytes;  /* got back from its group */
  uint64_t restored_bytes; /* written back into W and B */
  int lost;                /* 1: this rank held nothing of the epoch and was rebuilt */
} skt_recovery;

int skt_get_recovery(const skt_context* ctx, skt_recovery* recovery);

/* The last committed epoch of another job, whatever number of ranks wrote it: how a job that ran
 * on N ranks restarts on M. The program, in its new shape and under a tag of its own (SKT_JOB),
 * opens the old job's epoch, reads the old ranks' regions and private objects it needs, and
 * checkpoints; the old job stays as it was (a failed try can be made again) until the operator
 * removes it (skt-shm clean, skt-drain remove). An old rank's copy is read from memory where its
 * checkpoint segment survives on a node of this run, else from the epoch's drained file
 * (SKT_DRAIN_DIR, drained with the default SKT_DRAIN_WRITE=copy); every byte is checked against the
 * epoch's CRCs.
 *
 *   skt_epoch *old;
 *   skt_epoch_open(MPI_COMM_WORLD, "heat-4", &old);          // collective
 *   int n; skt_epoch_ranks(old, &n);                         // the old number of ranks
 *   skt_epoch_piece p[] = {{r, "grid", offset, bytes, buf}};  // any old rank r, any piece
 *   skt_epoch_read(old, p, 1);                               // collective
 *   skt_epoch_close(old);
 */
typedef struct skt_epoch skt_epoch;

/* Collective over comm: opens the last committed epoch of job `job` (its tag, as SKT_JOB gave
 * it), the same on every rank, or fails with the same error on every rank: SKT_ERR_UNRECOVERABLE
 * when neither the memory of this run's nodes nor the drain holds all of one epoch (the message
 * says what is missing where), SKT_ERR_BUSY while a process of the job still runs. One handle per
 * job at a time. */
int skt_epoch_open(MPI_Comm comm, const char* job, skt_epoch** epoch);

/* skt_epoch_open for a communicator held as a Fortran handle: what the Fortran module calls. */
int skt_epoch_open_fortran(MPI_Fint comm, const char* job, skt_epoch** epoch);

/* The epoch's number, the number of ranks that wrote it, and how many of those are read from
 * memory (the others from their drained files). */
int skt_epoch_number(const skt_epoch* epoch, uint64_t* number);
int skt_epoch_ranks(const skt_epoch* epoch, int* nranks);
int skt_epoch_in_memory(const skt_epoch* epoch, int* nranks);

/* The size of old rank `old_rank`'s region or private object `name` (SKT_ERR_ARG: no such rank;
 * SKT_ERR_MISMATCH: it has no such region, the message names those it has). Not collective. */
int skt_epoch_region_bytes(skt_epoch* epoch, int old_rank, const char* name, size_t* bytes);

/* Bytes [offset, offset + bytes) of old rank `old_rank`'s region or private object `name`, to buf.
 */
typedef struct skt_epoch_piece {
  int old_rank;
  const char* name;
  size_t offset;
  size_t bytes;
  void* buf;
} skt_epoch_piece;

/* Collective: copies each rank's pieces (count may differ between ranks, 0 included). A piece
 * beyond its region or of a rank that never existed is SKT_ERR_ARG, a region the old rank does not
 * have SKT_ERR_MISMATCH, a block that does not match its CRC SKT_ERR_UNRECOVERABLE (naming the file
 * and bytes); an error on one rank is the same error on every rank. */
int skt_epoch_read(skt_epoch* epoch, const skt_epoch_piece* pieces, size_t count);

/* skt_epoch_read with nothing to read, failing with SKT_ERR_ARG and the message `why` on every
 * rank: what a language binding calls when it finds its caller's arguments bad (the Fortran
 * module's arrays of different lengths), so that no rank is left waiting in the collective. */
int skt_epoch_read_refusing(skt_epoch* epoch, const char* why);

/* Not collective: detaches, closes and frees the handle (NULL is allowed). */
int skt_epoch_close(skt_epoch* epoch);

/* A short fixed description of an error code. */
const char* skt_strerror(int code);

/* The full message of the calling thread's last failed call ("" if none). */
const char* skt_last_error(void);

/* The code of the calling thread's last call that reports one (SKT_OK after a success); for the
 * allocation calls, which return NULL on failure. */
int skt_last_error_code(void);

/* The process exit code that the restart daemon expects for an error code (DESIGN section 9):
 * 0 for SKT_OK; 2 for usage and configuration errors and for the refusals that a relaunch would
 * meet again (SKT_ERR_SHM, SKT_ERR_NOMEM: a kernel limit or the node's memory), which the daemon
 * does not retry; 3 for SKT_ERR_UNRECOVERABLE; 1 otherwise. */
int skt_exit_code(int code);

#ifdef __cplusplus
}
#endif

#endif /* SELFCKPT_SELFCKPT_H */
