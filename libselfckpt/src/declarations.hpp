// What a program declares before skt_recover: its regions (in the workspace arena) and the private
// objects staged beside them, with the names a relaunch finds them by. Fixed once recovery starts;
// after that, a region released stays in the workspace until finalize, and regions marked static
// are compared by one more checkpoint and then skipped.
#pragma once

#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "libselfckpt/internal/layout.hpp"
#include "libselfckpt/src/arena.hpp"
#include "libselfckpt/src/job.hpp"
#include "libselfckpt/src/protocol.hpp"

namespace skt {

class Declarations {
 public:
  explicit Declarations(const Job& job) : job_(job) {}

  void* alloc(const std::string& name, std::size_t bytes);
  void protect(const std::string& name, void* ptr, std::size_t bytes);
  // The drop-in allocator's regions, named <scope>.<k> by allocation order in each scope: a
  // relaunch gets each back if it allocates in the same order within its scope.
  void* allocate_next(std::size_t bytes);
  void set_scope(const std::string& scope);
  const std::string& scope() const noexcept { return scope_; }
  // A region grown or shrunk into the next one; throws if ptr is not one of the regions.
  void* reallocate(void* ptr, std::size_t bytes);
  bool release(void* ptr);
  void mark_static(const void* ptr);

  // The workspace, made when first needed (by the first declaration, or by sealing).
  Arena& arena();
  // Null until a region or sealing made it.
  const Arena* arena_if_made() const noexcept { return arena_.get(); }
  // Recovery starts: the private objects ordered by name, the workspace sealed with room for their
  // staged bytes. Throws what refused the workspace this rank found (said here, on every rank
  // together, rather than at the declaration that met it).
  void seal();
  // Recovery is done: the set is fixed, and a region released stays until finalize.
  void fix() noexcept { fixed_ = true; }

  std::size_t staged_bytes() const;
  // The staged objects and the regions, as the stream places them.
  std::vector<RegionEntry> entries() const;
  void stage_private_objects(std::byte* at, const Progress& progress) const;
  void restore_private_objects(const std::byte* at) const;
  PrivateObjects private_objects() const;

  // Regions that a checkpoint no longer compares (skt_mark_static, then one checkpoint).
  const std::set<std::string>& settled_static() const noexcept { return static_settled_; }
  // A checkpoint compared the regions marked since the last: from now on they are settled.
  void settle_marked();

 private:
  struct PrivateObject {
    std::string name;
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
  };
  std::size_t stage_entry_bytes(std::size_t bytes) const;
  std::string next_unnamed() const;
  void check_declaration(const char* call, const std::string& name) const;

  const Job& job_;
  std::unique_ptr<Arena> arena_;
  std::exception_ptr refusal_;  // what refused the arena this rank found, said at seal
  bool fixed_ = false;
  std::vector<PrivateObject> privates_;
  std::set<std::string> found_names_;  // regions a relaunch got back from the arena it found
  std::string scope_ = "malloc";
  std::map<std::string, int> unnamed_counts_;
  std::set<const void*> released_;  // freed after recovery: still in the workspace until finalize
  // Regions skt_mark_static named: compared by the next checkpoint, then settled (not compared).
  std::set<std::string> static_marked_;
  std::set<std::string> static_settled_;
};

}  // namespace skt
