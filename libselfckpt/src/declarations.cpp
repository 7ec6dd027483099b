#include "libselfckpt/src/declarations.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "libselfckpt/internal/format.hpp"

namespace skt {

Arena& Declarations::arena() {
  if (!arena_) {
    const Config& config = job_.config();
    const auto make = [&](bool find_existing) {
      return std::make_unique<Arena>(Arena::Options{job_.identity(SegmentKind::workspace),
                                                    job_.nranks(), config.huge_pages, find_existing,
                                                    config.attach_wait_seconds});
    };
    try {
      arena_ = make(!job_.ephemeral());
      if (arena_->found()) job_.refuse_stale(SegmentKind::workspace);
    } catch (const Error&) {
      // What this rank found refuses the launch (another number of ranks, a first launch over old
      // segments, segments still attached), but other ranks may have found nothing and go on to
      // create theirs. The refusal is said at skt_recover, by every rank together, so that each
      // removes what it created; until then the program's regions live in a new arena, and what
      // was found is left as it was.
      refusal_ = std::current_exception();
      arena_.reset();
      arena_ = make(false);
    }
  }
  return *arena_;
}

void Declarations::seal() {
  arena();  // a program with no region still has a workspace: its staged private objects
  if (refusal_) std::rethrow_exception(refusal_);
  std::sort(privates_.begin(), privates_.end(),
            [](const PrivateObject& a, const PrivateObject& b) { return a.name < b.name; });
  arena_->seal(staged_bytes());
}

void Declarations::check_declaration(const char* call, const std::string& name) const {
  if (fixed_) {
    throw Error(SKT_ERR_STATE,
                fmt::format("{}('{}') after skt_recover: declare every region and protected object "
                            "before recovering; the set is fixed from then on",
                            call, name));
  }
  if (!valid_name(name)) {
    throw Error(SKT_ERR_ARG, fmt::format("{}: name '{}' is not 1 to 63 of A-Z a-z 0-9 . _ - "
                                         "starting with a letter or digit",
                                         call, name));
  }
}

void* Declarations::alloc(const std::string& name, std::size_t bytes) {
  check_declaration("skt_alloc", name);
  if (bytes == 0) throw Error(SKT_ERR_ARG, fmt::format("region '{}' has zero bytes", name));
  if (job_.config().scheme == enc::Scheme::sum && bytes % sizeof(double) != 0) {
    throw Error(SKT_ERR_ARG,
                fmt::format("region '{}' has {} bytes, not a multiple of 8: the sum scheme "
                            "protects doubles only; use SKT_SCHEME=xor or rs for other data",
                            name, bytes));
  }
  Arena& a = arena();
  // Half the address space or more is a count gone negative or n * sizeof(double) wrapped: a
  // mistake, whose every offset would wrap too. Below that, beyond the addresses the workspace
  // has, it is memory this node does not have (an HPL sweep's largest N skips on it).
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) {
    throw Error(SKT_ERR_ARG,
                fmt::format("region '{}' of {} bytes: a size computed from a negative count, or "
                            "one that wrapped around?",
                            name, bytes));
  }
  if (bytes > a.reserved_bytes()) {
    throw Error(SKT_ERR_NOMEM,
                fmt::format("region '{}' of {} bytes is larger than the {} bytes of addresses a "
                            "workspace has on this node (twice its memory and 64 GiB)",
                            name, bytes, a.reserved_bytes()));
  }
  const auto live = a.entries();
  if (std::any_of(live.begin(), live.end(), [&](const RegionEntry& e) { return e.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("region '{}' is already allocated", name));
  }
  std::byte* p = a.allocate(name, bytes);
  const bool found = a.recorded(name);
  if (found) found_names_.insert(name);
  job_.log().debug("region '{}' of {} bytes{}", name, bytes,
                   found ? ", from the workspace of an earlier launch" : "");
  return p;
}

void Declarations::protect(const std::string& name, void* ptr, std::size_t bytes) {
  check_declaration("skt_protect", name);
  if (ptr == nullptr || bytes == 0) {
    throw Error(SKT_ERR_ARG, fmt::format("private object '{}' needs a pointer and a size", name));
  }
  // Staged into the workspace at every checkpoint (as doubles under sum): as for a region.
  if (bytes > arena().reserved_bytes() / sizeof(double)) {
    throw Error(SKT_ERR_ARG,
                fmt::format("private object '{}' of {} bytes is larger than a workspace can stage "
                            "on this node: a size computed from a negative count, or one that "
                            "wrapped around?",
                            name, bytes));
  }
  if (std::any_of(privates_.begin(), privates_.end(),
                  [&](const PrivateObject& r) { return r.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("private object '{}' is already registered", name));
  }
  privates_.push_back({name, static_cast<std::byte*>(ptr), bytes});
}

std::string Declarations::next_unnamed() const {
  const auto it = unnamed_counts_.find(scope_);
  return fmt::format("{}.{}", scope_, it == unnamed_counts_.end() ? 0 : it->second);
}

void* Declarations::allocate_next(std::size_t bytes) {
  const std::string name = next_unnamed();
  void* p = alloc(name, bytes);
  ++unnamed_counts_[scope_];
  return p;
}

void Declarations::mark_static(const void* ptr) {
  const RegionEntry* region = arena().region_at(static_cast<const std::byte*>(ptr));
  if (region == nullptr) {
    throw Error(SKT_ERR_ARG,
                "skt_mark_static: the pointer is not the start of a region of this context (give "
                "what skt_alloc or skt_malloc returned)");
  }
  if (static_settled_.count(region->name) == 0) static_marked_.insert(region->name);
}

void Declarations::settle_marked() {
  static_settled_.insert(static_marked_.begin(), static_marked_.end());
  static_marked_.clear();
}

void Declarations::set_scope(const std::string& scope) {
  if (!valid_name(scope) || scope.find('.') != std::string::npos) {
    throw Error(SKT_ERR_ARG, fmt::format("skt_malloc_scope: '{}' is not 1 to 63 of A-Z a-z 0-9 _ - "
                                         "starting with a letter or digit",
                                         scope));
  }
  scope_ = scope;
}

void* Declarations::reallocate(void* ptr, std::size_t bytes) {
  const RegionEntry* old = arena_ ? arena_->region_at(static_cast<std::byte*>(ptr)) : nullptr;
  if (old == nullptr || released_.count(ptr) != 0) {
    throw Error(SKT_ERR_ARG, "skt_realloc: the pointer is not a region of this context");
  }
  const std::size_t old_bytes = old->bytes;
  const std::string fresh_name = next_unnamed();
  void* fresh = allocate_next(bytes);
  // On a relaunch the new region comes back from the workspace, holding data skt_recover needs:
  // it is left alone.
  if (found_names_.count(fresh_name) == 0) std::memcpy(fresh, ptr, std::min(old_bytes, bytes));
  release(ptr);
  return fresh;
}

bool Declarations::release(void* ptr) {
  if (!arena_ || arena_->region_at(static_cast<std::byte*>(ptr)) == nullptr) return false;
  if (fixed_) {
    released_.insert(ptr);  // still part of the workspace until finalize
    return true;
  }
  return arena_->release(static_cast<std::byte*>(ptr));
}

std::size_t Declarations::stage_entry_bytes(std::size_t bytes) const {
  // Under sum, each byte is staged as a double holding its value, so that rebuilding the sum of
  // such rows is exact.
  const std::size_t staged =
      job_.config().scheme == enc::Scheme::sum ? bytes * sizeof(double) : bytes;
  return (staged + 63) / 64 * 64;
}

std::size_t Declarations::staged_bytes() const {
  std::size_t bytes = 0;
  for (const auto& p : privates_)
    bytes += stage_entry_bytes(p.bytes);
  return bytes;
}

std::vector<RegionEntry> Declarations::entries() const {
  std::vector<RegionEntry> out;
  std::uint64_t at = 0;
  for (const auto& p : privates_) {
    out.push_back({p.name, true, at, p.bytes});
    at += stage_entry_bytes(p.bytes);
  }
  for (auto e : arena_->entries())
    out.push_back(std::move(e));
  return out;
}

void Declarations::stage_private_objects(std::byte* at, const Progress& progress) const {
  std::uint64_t done = 0;
  for (const auto& p : privates_) {
    if (job_.config().scheme == enc::Scheme::sum) {
      auto* out = reinterpret_cast<double*>(at);
      for (std::size_t i = 0; i < p.bytes; ++i)
        out[i] = static_cast<unsigned char>(p.ptr[i]);
    } else {
      std::memcpy(at, p.ptr, p.bytes);
    }
    at += stage_entry_bytes(p.bytes);
    if (progress) progress(++done, privates_.size() + 1);
  }
}

void Declarations::restore_private_objects(const std::byte* at) const {
  for (const auto& p : privates_) {
    if (job_.config().scheme == enc::Scheme::sum) {
      const auto* in = reinterpret_cast<const double*>(at);
      for (std::size_t i = 0; i < p.bytes; ++i) {
        p.ptr[i] = static_cast<std::byte>(static_cast<unsigned char>(std::lround(in[i])));
      }
    } else {
      std::memcpy(p.ptr, at, p.bytes);
    }
    at += stage_entry_bytes(p.bytes);
  }
}

PrivateObjects Declarations::private_objects() const {
  return PrivateObjects{[this](std::byte* at, const Progress& p) { stage_private_objects(at, p); },
                        [this](const std::byte* at) { restore_private_objects(at); }};
}

}  // namespace skt
