// A rank's workspace W: one shared-memory segment that holds every region the program allocates
// (sub-allocated, one after the other) and the staged copies of its private objects, so that a
// rank has the same two segments whatever the number of its regions.
//
// Regions are handed out before the segment can be sized: skt_alloc comes one region at a time,
// and the program may write into a region before it declares the next. So the arena first
// reserves a range of addresses, and a region's pointer is its place in that range. When a
// relaunch finds the segment of an earlier launch, the segment is mapped over the range at once
// and regions come back at their recorded places. Otherwise regions get ordinary memory in the
// range until seal(), which creates the segment, copies into it what the program wrote, and maps
// it over the range: the pointers the program holds stay valid. The range is the same in every
// launch of the program (at_fixed_addresses), so pointers that regions hold into regions are still
// right after a relaunch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/layout.hpp"
#include "libselfckpt/internal/segment.hpp"

namespace skt {

class Arena {
 public:
  struct Options {
    SegmentIdentity identity;
    int nranks = 1;
    bool huge_pages = false;
    bool find_existing = true;  // false for a job that no relaunch can find (ephemeral)
    double attach_wait_seconds = 0;
  };

  explicit Arena(Options options);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A region of `bytes` bytes, aligned to a page (to 64 bytes when smaller than a page). From the
  // segment of an earlier launch when it records the name with that size; else ordinary memory
  // until seal(), which refuses a launch whose regions differ from those recorded. Before seal()
  // only.
  std::byte* allocate(const std::string& name, std::size_t bytes);
  // Gives a region back (its addresses are not reused). False if `ptr` starts no region.
  bool release(const std::byte* ptr);
  // The live region starting at `ptr`, if any.
  const RegionEntry* region_at(const std::byte* ptr) const;

  // Whether a segment of an earlier launch is mapped (before seal) or was kept (after), and
  // whether it records a region of this name.
  bool found() const noexcept { return found_; }
  bool recorded(const std::string& name) const;
  bool sealed() const noexcept { return sealed_; }
  // Makes the segment hold exactly the live regions and a stage of `stage_bytes`: keeps the found
  // one if it records exactly that, else creates one (a found segment that records other regions
  // is refused with SKT_ERR_MISMATCH and left as it is).
  void seal(std::size_t stage_bytes);

  // After seal().
  std::byte* regions() const noexcept { return base_ + kHeaderBytes; }
  std::byte* stage() const noexcept { return regions() + record_.stage_offset; }
  std::size_t regions_bytes() const noexcept { return record_.regions_bytes; }
  std::size_t stage_bytes() const noexcept { return record_.stage_bytes; }
  // The live regions, in address order.
  std::vector<RegionEntry> entries() const;
  std::size_t segment_bytes() const noexcept;
  // Bytes of the workspace segment not in memory yet: pages the program has still to write.
  std::size_t unwritten_bytes() const;
  // Whether the workspace segment is a reserve this launch took over (a warm spare's).
  bool from_reserve() const noexcept { return segment_.from_reserve(); }
  // The workspace segment's SysV id, -1 before there is one.
  int segment_id() const noexcept { return segment_.id(); }

  // Marks the segment for removal (it goes when the last process detaches).
  void remove();
  // Renews the segment if it was removed from outside (Segment::renew); whether it was.
  bool renew_if_removed();

  // The addresses the workspace may span: twice the node's memory and 64 GiB more, or, under a
  // limit on the process's address space (ulimit -v), a quarter of what is left under it.
  std::size_t reserved_bytes() const noexcept { return reserved_; }
  // Whether the workspace lies at the addresses every launch of the program gives it, so that
  // pointers its regions hold into its regions stay right across relaunches.
  bool at_fixed_addresses() const noexcept { return at_fixed_addresses_; }

 private:
  void attach_found(Segment found);
  void map_fresh(std::size_t end);

  Options options_;
  std::byte* reservation_ = nullptr;  // the whole reserved range
  std::size_t reserved_ = 0;          // of it, the addresses the segment may use
  std::size_t alignment_ = 0;         // of base_; the rest of the range
  std::byte* base_ = nullptr;         // where the segment's first byte goes
  Segment segment_;
  bool at_fixed_addresses_ = false;
  bool found_ = false;
  bool sealed_ = false;
  ArenaRecord record_;
  std::vector<RegionEntry> recorded_;  // the found segment's table
  std::vector<RegionEntry> live_;      // regions allocated by this launch and not released
  std::size_t next_ = 0;               // next free offset in the regions' area
  std::size_t mapped_ = 0;             // bytes of the regions' area backed by ordinary memory
};

}  // namespace skt
