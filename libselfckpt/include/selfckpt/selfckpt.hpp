// C++ interface of selfckpt: RAII over the C API, typed regions, exceptions.
//
//   skt::Context ctx(MPI_COMM_WORLD);
//   auto grid = ctx.alloc<double>("grid", n);      // a span-like view into shared memory
//   int step = 0;
//   ctx.protect("step", step);
//   if (ctx.recover() == 0) initialise(grid);
//   for (; step < steps; ++step) { compute(grid); ctx.checkpoint(); }
//   ctx.finalize(true);
#pragma once

#if __cplusplus < 201703L
#error "selfckpt.hpp needs C++17 or later (-std=c++17); C programs include selfckpt/selfckpt.h"
#endif

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "selfckpt/selfckpt.h"

namespace skt {

// An error from selfckpt: code() is one of the SKT_ERR_* values.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }
  // The exit code the restart daemon expects for this error.
  int exit_code() const noexcept { return skt_exit_code(code_); }

 private:
  int code_;
};

namespace detail {
inline void check(int code) {
  if (code != SKT_OK) {
    const char* message = skt_last_error();
    throw Error(code, message != nullptr && *message != '\0' ? message : skt_strerror(code));
  }
}
}  // namespace detail

// A typed view of a workspace region.
template <class T>
class Region {
 public:
  static_assert(std::is_trivially_copyable_v<T>, "workspace regions hold trivially copyable data");
  Region() = default;
  Region(T* data, std::size_t size) : data_(data), size_(size) {}

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() const noexcept { return data_; }
  T* end() const noexcept { return data_ + size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// What a context does, on a handle it may or may not own (Context owns one, ContextRef not). Every
// call throws skt::Error on failure (code() is the SKT_ERR_* value, exit_code() what to exit with);
// the collective ones throw the same error on every rank.
class ContextOps {
 public:
  // A workspace region of `count` elements: same name and size on a relaunch give it back.
  template <class T>
  Region<T> alloc(const std::string& name, std::size_t count) {
    void* p = nullptr;
    detail::check(skt_alloc(ctx_, name.c_str(), count * sizeof(T), &p));
    return Region<T>(static_cast<T*>(p), count);
  }

  // A small private object, staged at each checkpoint and written back by recover().
  template <class T>
  void protect(const std::string& name, T& object) {
    static_assert(std::is_trivially_copyable_v<T>, "protected objects must be trivially copyable");
    detail::check(skt_protect(ctx_, name.c_str(), &object, sizeof(T)));
  }

  // Collective: the restored epoch, 0 on a fresh start.
  std::uint64_t recover() {
    std::uint64_t epoch = 0;
    detail::check(skt_recover(ctx_, &epoch));
    return epoch;
  }

  // Collective. Encodes only what changed since the last commit where it can (skt_checkpoint).
  void checkpoint() { detail::check(skt_checkpoint(ctx_)); }

  // The region starting at ptr no longer changes from the next checkpoint on (skt_mark_static).
  void mark_static(const void* ptr) { detail::check(skt_mark_static(ctx_, ptr)); }

  // Collective. An incremental checkpoint: only these ranges changed since the last one.
  void checkpoint_dirty(const skt_range* ranges, std::size_t count) {
    detail::check(skt_checkpoint_dirty(ctx_, ranges, count));
  }
  template <class Ranges>
  void checkpoint_dirty(const Ranges& ranges) {
    checkpoint_dirty(std::data(ranges), std::size(ranges));
  }

  // Collective: whether the optimum checkpoint interval has passed (needs SKT_MTBF).
  bool need_checkpoint() {
    int need = 0;
    detail::check(skt_need_checkpoint(ctx_, &need));
    return need != 0;
  }

  skt_stats stats() const {
    skt_stats s{};
    detail::check(skt_get_stats(ctx_, &s));
    return s;
  }

  skt_recovery recovery() const {
    skt_recovery r{};
    detail::check(skt_get_recovery(ctx_, &r));
    return r;
  }

  skt_context* get() const noexcept { return ctx_; }

 protected:
  explicit ContextOps(skt_context* ctx) noexcept : ctx_(ctx) {}
  skt_context* ctx_ = nullptr;
};

class Context : public ContextOps {
 public:
  // Collective. config_path may be null (defaults, SKT_CONFIG, SKT_* variables).
  explicit Context(MPI_Comm comm, const char* config_path = nullptr) : ContextOps(nullptr) {
    detail::check(skt_init(comm, config_path, &ctx_));
  }
  // A context that was not finalized keeps its segments, so that a relaunch can recover.
  ~Context() {
    if (ctx_ != nullptr) skt_finalize(ctx_, 0);
  }
  Context(Context&& other) noexcept : ContextOps(std::exchange(other.ctx_, nullptr)) {}
  Context& operator=(Context&& other) noexcept {
    if (this != &other) {
      if (ctx_ != nullptr) skt_finalize(ctx_, 0);
      ctx_ = std::exchange(other.ctx_, nullptr);
    }
    return *this;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Collective; discard = true removes the job's segments (the run is complete).
  void finalize(bool discard) {
    skt_context* ctx = std::exchange(ctx_, nullptr);
    detail::check(skt_finalize(ctx, discard ? 1 : 0));
  }
};

// A context this code does not own: it is never finalized through it.
class ContextRef : public ContextOps {
 public:
  explicit ContextRef(skt_context* ctx) noexcept : ContextOps(ctx) {}
};

// The default context (the first one created and not yet finalized), for code deep in a program
// that checkpoints without being handed the Context. Throws skt::Error(SKT_ERR_STATE) if none.
inline ContextRef default_context() {
  skt_context* ctx = skt_default_context();
  if (ctx == nullptr)
    throw Error(SKT_ERR_STATE, "no selfckpt context: create an skt::Context first");
  return ContextRef(ctx);
}

// The last committed epoch of another job, whatever number of ranks wrote it (skt_epoch_open):
// how a program restarts on another number of ranks. Opening and reading are collective.
class Epoch {
 public:
  Epoch(MPI_Comm comm, const std::string& job) {
    detail::check(skt_epoch_open(comm, job.c_str(), &epoch_));
  }
  ~Epoch() { skt_epoch_close(epoch_); }
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  std::uint64_t number() const {
    std::uint64_t n = 0;
    detail::check(skt_epoch_number(epoch_, &n));
    return n;
  }
  int ranks() const {
    int n = 0;
    detail::check(skt_epoch_ranks(epoch_, &n));
    return n;
  }
  int ranks_in_memory() const {
    int n = 0;
    detail::check(skt_epoch_in_memory(epoch_, &n));
    return n;
  }
  std::size_t region_bytes(int old_rank, const std::string& name) {
    std::size_t bytes = 0;
    detail::check(skt_epoch_region_bytes(epoch_, old_rank, name.c_str(), &bytes));
    return bytes;
  }
  // Collective: each rank's pieces ({old_rank, name, offset, bytes, buf}), none included.
  void read(const std::vector<skt_epoch_piece>& pieces) {
    detail::check(skt_epoch_read(epoch_, pieces.data(), pieces.size()));
  }

 private:
  skt_epoch* epoch_ = nullptr;
};

// Names the unnamed allocations made while it lives (skt::allocator without a name, skt_malloc)
// "<name>.0", "<name>.1", ...: a component's regions keep their names whatever others allocate,
// and an error names them. The previous scope comes back when it ends. Throws skt::Error.
class allocation_scope {
 public:
  explicit allocation_scope(const std::string& name) : previous_(skt_malloc_scope_name()) {
    detail::check(skt_malloc_scope(name.c_str()));
  }
  ~allocation_scope() { skt_malloc_scope(previous_.c_str()); }
  allocation_scope(const allocation_scope&) = delete;
  allocation_scope& operator=(const allocation_scope&) = delete;

 private:
  std::string previous_;
};

// A standard allocator over the workspace, for containers whose data should survive a failure:
//   std::vector<double, skt::allocator<double>> x(n);                      // region malloc.<k>
//   std::vector<double, skt::allocator<double>> y(n, skt::allocator<double>("y"));  // by name
//   { skt::allocation_scope s("mesh"); std::vector<int, skt::allocator<int>> c(m); }  // mesh.<k>
// The rule of skt_malloc holds: allocate (construct, resize, reserve) before Context::recover, and
// do not grow afterwards (the workspace is fixed; growing throws skt::Error with SKT_ERR_STATE).
// Elements are default-initialised, not zero-filled: `x(n)` leaves what a relaunch finds in the
// region for recover() to check and restore. Do not write into regions before recover() (no
// `x(n, 0.0)`, no initialisation code): fill them when it returns 0. The library detects such
// writes and restores the checkpoint over them, or refuses to recover when it cannot, but a
// program that follows the rule never makes it choose. A named allocator makes exactly one
// allocation under its name. Needs a Context (the first one created is the default). allocate()
// throws skt::Error (e.g. SKT_ERR_STATE when growing after recover()): catch it at the top of the
// program and exit with exit_code(), so that a restart daemon knows what happened.
template <class T>
class allocator {
 public:
  using value_type = T;
  using is_always_equal = std::true_type;  // any of them frees any workspace pointer

  allocator() noexcept = default;
  explicit allocator(std::string name) : name_(std::move(name)) {}
  template <class U>
  allocator(const allocator<U>& other) noexcept : name_(other.name()) {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    void* p =
        name_.empty() ? skt_malloc(n * sizeof(T)) : skt_malloc_named(name_.c_str(), n * sizeof(T));
    if (p == nullptr) detail::check(skt_last_error_code());
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { skt_free(p); }
  // Default-initialisation: a container sized before recover() writes nothing into the region.
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  const std::string& name() const noexcept { return name_; }
  template <class U>
  bool operator==(const allocator<U>&) const noexcept {
    return true;
  }

 private:
  std::string name_;
};

}  // namespace skt
