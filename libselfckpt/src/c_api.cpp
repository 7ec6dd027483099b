// The C interface: every call catches, records the message for skt_last_error, and returns a code.
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "common/mpi.hpp"
#include "libselfckpt/src/epoch_reader.hpp"
#include "libselfckpt/src/session.hpp"
#include "selfckpt/selfckpt.h"
#include "selfckpt/selfckpt.hpp"

struct skt_context {
  std::unique_ptr<skt::Session> impl;
};

struct skt_epoch {
  std::unique_ptr<skt::EpochReader> impl;
};

namespace {

thread_local std::string last_error;
thread_local int last_code = SKT_OK;

// Records a failure found here rather than thrown.
void fail(int code, const char* what) {
  last_code = code;
  last_error = what;
}
skt_context* default_context = nullptr;

template <class F>
int guarded_body(F&& body) {
  try {
    body();
    last_error.clear();
    return SKT_OK;
  } catch (const skt::Error& e) {
    last_error = e.what();
    return e.code();
  } catch (const skt::MpiError& e) {
    last_error = e.what();
    return SKT_ERR_MPI;
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return SKT_ERR_NOMEM;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return SKT_ERR_INTERNAL;
  }
}

template <class F>
int guarded(F&& body) {
  last_code = guarded_body(std::forward<F>(body));
  return last_code;
}

int bad_argument(const char* what) {
  fail(SKT_ERR_ARG, what);
  return SKT_ERR_ARG;
}

}  // namespace

extern "C" {

int skt_init(MPI_Comm comm, const char* config_path, skt_context** ctx) {
  if (ctx == nullptr) return bad_argument("skt_init: ctx is NULL");
  *ctx = nullptr;
  return guarded([&] {
    auto owner = std::make_unique<skt_context>();
    owner->impl = std::make_unique<skt::Session>(comm, config_path == nullptr ? "" : config_path);
    *ctx = owner.release();
    if (default_context == nullptr) default_context = *ctx;
  });
}

int skt_init_fortran(MPI_Fint comm, const char* config_path, skt_context** ctx) {
  return skt_init(MPI_Comm_f2c(comm), config_path, ctx);
}

int skt_alloc(skt_context* ctx, const char* name, size_t bytes, void** ptr) {
  if (ctx == nullptr || name == nullptr || ptr == nullptr) {
    return bad_argument("skt_alloc: ctx, name and ptr must not be NULL");
  }
  return guarded([&] { *ptr = ctx->impl->alloc(name, bytes); });
}

int skt_protect(skt_context* ctx, const char* name, void* ptr, size_t bytes) {
  if (ctx == nullptr || name == nullptr)
    return bad_argument("skt_protect: ctx and name must not be NULL");
  return guarded([&] { ctx->impl->protect(name, ptr, bytes); });
}

int skt_recover(skt_context* ctx, uint64_t* epoch) {
  if (ctx == nullptr || epoch == nullptr)
    return bad_argument("skt_recover: ctx and epoch must not be NULL");
  return guarded([&] { *epoch = ctx->impl->recover(); });
}

int skt_checkpoint(skt_context* ctx) {
  if (ctx == nullptr) return bad_argument("skt_checkpoint: ctx is NULL");
  return guarded([&] { ctx->impl->checkpoint(); });
}

int skt_checkpoint_dirty(skt_context* ctx, const skt_range* ranges, size_t count) {
  if (ctx == nullptr) return bad_argument("skt_checkpoint_dirty: ctx is NULL");
  if (ranges == nullptr && count > 0) return bad_argument("skt_checkpoint_dirty: ranges is NULL");
  return guarded([&] {
    std::vector<skt::DirtyRange> dirty;
    dirty.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (ranges[i].region == nullptr) {
        throw skt::Error(SKT_ERR_ARG, "skt_checkpoint_dirty: a range has no region name");
      }
      dirty.push_back({ranges[i].region, ranges[i].offset, ranges[i].length});
    }
    ctx->impl->checkpoint(&dirty);
  });
}

int skt_mark_static(skt_context* ctx, const void* ptr) {
  if (ctx == nullptr || ptr == nullptr) {
    return bad_argument("skt_mark_static: ctx and ptr must not be NULL");
  }
  return guarded([&] { ctx->impl->mark_static(ptr); });
}

int skt_need_checkpoint(skt_context* ctx, int* need) {
  if (ctx == nullptr || need == nullptr) {
    return bad_argument("skt_need_checkpoint: ctx and need must not be NULL");
  }
  return guarded([&] { *need = ctx->impl->need_checkpoint() ? 1 : 0; });
}

int skt_finalize(skt_context* ctx, int discard) {
  if (ctx == nullptr) return bad_argument("skt_finalize: ctx is NULL");
  const int code = guarded([&] { ctx->impl->finalize(discard != 0); });
  if (default_context == ctx) default_context = nullptr;
  delete ctx;
  return code;
}

void* skt_malloc(size_t bytes) {
  if (default_context == nullptr) {
    fail(SKT_ERR_STATE, "skt_malloc: no context; call skt_init first");
    return nullptr;
  }
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  guarded([&] { p = default_context->impl->allocate_next(bytes); });
  return p;
}

void* skt_calloc(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) {
    fail(SKT_ERR_ARG, "skt_calloc: count * size overflows");
    return nullptr;
  }
  // New regions are zero pages; a region found from before holds data skt_recover restores.
  return skt_malloc(count * size);
}

void* skt_realloc(void* ptr, size_t bytes) {
  if (ptr == nullptr) return skt_malloc(bytes);
  if (bytes == 0) {
    skt_free(ptr);
    return nullptr;
  }
  if (default_context == nullptr) {
    fail(SKT_ERR_STATE, "skt_realloc: no context; call skt_init first");
    return nullptr;
  }
  void* out = nullptr;
  guarded([&] { out = default_context->impl->reallocate(ptr, bytes); });
  return out;
}

void* skt_malloc_named(const char* name, size_t bytes) {
  if (default_context == nullptr || name == nullptr) {
    fail(default_context == nullptr ? SKT_ERR_STATE : SKT_ERR_ARG,
         "skt_malloc_named: no context (call skt_init first) or no name");
    return nullptr;
  }
  void* p = nullptr;
  guarded([&] { p = default_context->impl->alloc(name, bytes); });
  return p;
}

skt_context* skt_default_context(void) {
  return default_context;
}

int skt_malloc_scope(const char* name) {
  if (default_context == nullptr) {
    fail(SKT_ERR_STATE, "skt_malloc_scope: no context; call skt_init first");
    return SKT_ERR_STATE;
  }
  return guarded([&] { default_context->impl->set_scope(name == nullptr ? "malloc" : name); });
}

const char* skt_malloc_scope_name(void) {
  return default_context == nullptr ? "malloc" : default_context->impl->scope().c_str();
}

void skt_free(void* ptr) {
  if (ptr == nullptr || default_context == nullptr) return;
  guarded([&] { default_context->impl->release(ptr); });
}

int skt_get_stats(const skt_context* ctx, skt_stats* stats) {
  if (ctx == nullptr || stats == nullptr)
    return bad_argument("skt_get_stats: ctx and stats must not be NULL");
  return guarded([&] { *stats = ctx->impl->stats(); });
}

int skt_get_recovery(const skt_context* ctx, skt_recovery* recovery) {
  if (ctx == nullptr || recovery == nullptr)
    return bad_argument("skt_get_recovery: ctx and recovery must not be NULL");
  return guarded([&] { *recovery = ctx->impl->recovery(); });
}

int skt_epoch_open(MPI_Comm comm, const char* job, skt_epoch** epoch) {
  if (epoch == nullptr || job == nullptr)
    return bad_argument("skt_epoch_open: job or epoch is NULL");
  *epoch = nullptr;
  return guarded([&] {
    auto owner = std::make_unique<skt_epoch>();
    owner->impl = std::make_unique<skt::EpochReader>(comm, job);
    *epoch = owner.release();
  });
}

int skt_epoch_open_fortran(MPI_Fint comm, const char* job, skt_epoch** epoch) {
  return skt_epoch_open(MPI_Comm_f2c(comm), job, epoch);
}

int skt_epoch_number(const skt_epoch* epoch, uint64_t* number) {
  if (epoch == nullptr || number == nullptr) {
    return bad_argument("skt_epoch_number: epoch or number is NULL");
  }
  *number = epoch->impl->epoch();
  return guarded([] {});
}

int skt_epoch_ranks(const skt_epoch* epoch, int* nranks) {
  if (epoch == nullptr || nranks == nullptr) {
    return bad_argument("skt_epoch_ranks: epoch or nranks is NULL");
  }
  *nranks = epoch->impl->nranks();
  return guarded([] {});
}

int skt_epoch_in_memory(const skt_epoch* epoch, int* nranks) {
  if (epoch == nullptr || nranks == nullptr) {
    return bad_argument("skt_epoch_in_memory: epoch or nranks is NULL");
  }
  *nranks = epoch->impl->in_memory();
  return guarded([] {});
}

int skt_epoch_region_bytes(skt_epoch* epoch, int old_rank, const char* name, size_t* bytes) {
  if (epoch == nullptr || name == nullptr || bytes == nullptr) {
    return bad_argument("skt_epoch_region_bytes: epoch, name or bytes is NULL");
  }
  return guarded([&] { *bytes = epoch->impl->bytes_of(old_rank, name); });
}

int skt_epoch_read(skt_epoch* epoch, const skt_epoch_piece* pieces, size_t count) {
  // A NULL argument on one rank is not known to the others: it is found inside the collective.
  if (epoch == nullptr) return bad_argument("skt_epoch_read: epoch is NULL");
  return guarded([&] {
    std::vector<skt::EpochReader::Piece> list;
    std::string bad;
    if (pieces == nullptr && count > 0) bad = "skt_epoch_read: pieces is NULL";
    for (size_t i = 0; bad.empty() && i < count; ++i) {
      const skt_epoch_piece& p = pieces[i];
      if (p.name == nullptr) {
        bad = "skt_epoch_read: a piece's name is NULL";
      } else {
        list.push_back({p.old_rank, p.name, p.offset, p.bytes, static_cast<std::byte*>(p.buf)});
      }
    }
    epoch->impl->read(list, bad);
  });
}

int skt_epoch_read_refusing(skt_epoch* epoch, const char* why) {
  if (epoch == nullptr) return bad_argument("skt_epoch_read_refusing: epoch is NULL");
  return guarded([&] {
    epoch->impl->read({}, why != nullptr && *why != '\0' ? why : "skt_epoch_read: bad arguments");
  });
}

int skt_epoch_close(skt_epoch* epoch) {
  return guarded([&] { delete epoch; });
}

int skt_last_error_code(void) {
  return last_code;
}

const char* skt_strerror(int code) {
  switch (code) {
    case SKT_OK:
      return "success";
    case SKT_ERR_ARG:
      return "bad argument";
    case SKT_ERR_CONFIG:
      return "invalid configuration";
    case SKT_ERR_SHM:
      return "shared memory error";
    case SKT_ERR_MPI:
      return "MPI error";
    case SKT_ERR_UNRECOVERABLE:
      return "unrecoverable: a group lost more members than its scheme tolerates";
    case SKT_ERR_MISMATCH:
      return "the relaunch differs from the checkpoint";
    case SKT_ERR_STATE:
      return "call out of order";
    case SKT_ERR_NOMEM:
      return "out of memory";
    case SKT_ERR_STALE:
      return "segments left over from an earlier run";
    case SKT_ERR_INTERNAL:
      return "internal error";
    case SKT_ERR_BUSY:
      return "the job's segments are still attached by processes of an earlier launch";
    default:
      return "unknown error code";
  }
}

const char* skt_last_error(void) {
  return last_error.c_str();
}

int skt_exit_code(int code) {
  switch (code) {
    case SKT_OK:
      return 0;
    case SKT_ERR_ARG:
    case SKT_ERR_CONFIG:
    case SKT_ERR_MISMATCH:
    case SKT_ERR_STATE:
    case SKT_ERR_STALE:
    case SKT_ERR_BUSY:
    // A resource limit (kernel.shmmax, shmmni, shmall, the node's memory) refuses a relaunch just
    // as it refused this run: the daemon must not retry it, and the message names the setting.
    case SKT_ERR_SHM:
    case SKT_ERR_NOMEM:
      return 2;
    case SKT_ERR_UNRECOVERABLE:
      return 3;
    default:
      return 1;
  }
}

}  // extern "C"
