// What segment.cpp (making and attaching segments) and segment_lookup.cpp (finding and listing
// them) share: mapping a segment's pages, whose segments a user may touch, and the keys of a job's
// reserve slots.
#pragma once

#include <sys/ipc.h>
#include <sys/shm.h>

#include <cstddef>
#include <string>

#include "libselfckpt/internal/segment.hpp"

namespace skt {

// Maps every page now, in one call, rather than fault by fault on first touch; a node without the
// memory says so here rather than failing later. Kernels before 5.14 lack it: then pages come on
// demand as usual.
void populate_pages(void* base, std::size_t bytes);

// Made by this user, for this user alone: the only segments selfckpt reads or removes.
bool owned_by_caller(const shmid_ds& ds);

// The tag a job's reserves go by: its own before any '+'.
std::string reserve_tag(const std::string& job);

// The names a reserve's header carries: which pages it has, which only segments with the same may
// take over (segment_key gives both the same keys).
inline constexpr const char* kReserveName = "reserve";
inline constexpr const char* kHugeReserveName = "reserve, huge pages";

SegmentIdentity reserve_identity(const std::string& job, const std::string& node, int slot);

// Calls `visit(id)` for every segment at a key of the job's reserve slots on `node` (whatever it
// holds now), slot by slot, up to the first slot with none: slots are filled from the first.
template <typename Visit>
void for_each_reserve_key(const std::string& job, const std::string& node, Visit visit) {
  for (int slot = 0; slot < kReserveSlots; ++slot) {
    bool any = false;
    for (int probe = 0; probe < kKeyProbes; ++probe) {
      const int id = shmget(segment_key(reserve_identity(job, node, slot), probe), 0, 0);
      if (id < 0) continue;
      any = true;
      visit(id);
    }
    if (!any) return;
  }
}

}  // namespace skt
