// SysV shared-memory segments: created 0600, keyed by their identity, attached only when the
// kernel's owner record and the header both say they are ours.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libselfckpt/internal/format.hpp"

namespace skt {

inline constexpr int kKeyProbes = 16;

// The SysV key of an identity at a probe position; never IPC_PRIVATE.
key_t segment_key(const SegmentIdentity& identity, int probe) noexcept;

// An attached segment; detached on destruction. remove() marks it for deletion (it disappears
// when the last process detaches).
class Segment {
 public:
  Segment() = default;
  ~Segment() { detach(); }
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // How much of a new segment's memory is made ready when it is created: nothing (the caller
  // remaps it, or writes it as it goes), every page mapped (MADV_POPULATE_WRITE), or every page
  // mapped and then written once, which some virtual machines charge apart (see segment.cpp).
  enum class Population { none, mapped, written };

  // Creates a segment for `header.identity` with room for header.data_bytes after the header page,
  // the header written first, then the pages populated as `population` says, reporting how far
  // they are to `progress`. Throws skt::Error(SKT_ERR_SHM) naming the kernel limit to raise when
  // the kernel refuses.
  using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;
  static Segment create(SegmentHeader header, bool huge_pages,
                        Population population = Population::written, const Progress& progress = {});

  // Attaches an existing segment by id after checking it; nothing is written. Returns nothing if
  // it is not a valid segment of the calling user, and then says why in *why (if given). A
  // read-write attachment maps every page now unless `populate` is false (the caller remaps it).
  static std::optional<Segment> attach(int shmid, bool read_only, std::string* why = nullptr,
                                       bool populate = true);

  // Moves the attachment to address `at`, replacing whatever is mapped there (SHM_REMAP); `at`
  // must be aligned for the segment (a huge page for huge-page segments).
  void remap(std::byte* at);

  // Whether the segment was marked for removal while attached (IPC_RMID from outside: ipcrm, a
  // cleanup script): it goes when its last process detaches, and a relaunch would find it lost.
  bool removed_from_outside() const noexcept;
  // Puts a new segment with the same identity and contents in place of one removed from outside,
  // mapped at the same address, so that pointers into it stay valid; the removed one goes.
  void renew(bool huge_pages);

  std::byte* base() const noexcept { return base_; }
  std::byte* data() const noexcept { return base_ + kHeaderBytes; }
  const SegmentHeader& header() const noexcept { return header_; }
  int id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return base_ != nullptr; }
  // Bytes of the segment's pages that are in memory (all of them when the kernel cannot say).
  std::size_t resident_bytes() const;
  // Whether create() took a reserve over rather than make the segment.
  bool from_reserve() const noexcept { return from_reserve_; }

  void remove();
  void detach() noexcept;

 private:
  int id_ = -1;
  std::byte* base_ = nullptr;
  SegmentHeader header_;
  bool from_reserve_ = false;
};

struct FindResult {
  std::optional<Segment> segment;    // ours, attached read-write
  std::vector<std::string> skipped;  // why other segments at our keys were left alone
};

// Probes our keys for a segment whose owner is the caller and whose header carries exactly this
// identity; others are never attached read-write nor modified. A segment of ours that another
// process still has attached (a rank of an earlier launch that has not ended) is waited for, up
// to `attach_wait_seconds`, then refused with skt::Error(SKT_ERR_BUSY): one launch at a time owns
// a job's segments, even when two look at the same moment. A segment of this identity written by
// another format version is refused with skt::Error(SKT_ERR_MISMATCH).
FindResult find_segment(const SegmentIdentity& identity, double attach_wait_seconds = 0,
                        bool populate = true);

// Waits until no process has segment `shmid` attached, for at most `seconds` (a process of a job
// that is ending, or a reader looking at its header); throws skt::Error(SKT_ERR_BUSY) naming the
// processes left.
void wait_until_detached(int shmid, const SegmentIdentity& identity, double seconds);

// Every segment the calling user owns that carries a valid selfckpt header; with `other_versions`,
// those of other format versions too (header.version says which), which nothing here reads.
struct SegmentListing {
  int shmid;
  key_t key;
  SegmentHeader header;
  std::uint64_t attached;  // processes attached
};
std::vector<SegmentListing> list_own_segments(bool other_versions = false);
// The segments of the calling user that carry one of `identities`: only segments at their keys are
// attached (read-only, for the header), so other jobs' are never touched, not even looked at.
std::vector<SegmentListing> list_segments_of(const std::vector<SegmentIdentity>& identities);
// Removes a listed segment, whatever its version (it goes once no process has it attached).
bool remove_segment(int shmid) noexcept;

// Reserves, the memory of warm spares (SegmentKind::reserve). A job's reserves on a node sit in
// slots 0, 1, ... under its tag before any '+' (a program's sub-jobs, skt-hpl's TAG+t0, take them
// too). Segment::create takes one over, when one on its node can hold the segment and is not much
// larger (a quarter and 4 MiB at most), instead of making a segment: its pages are in memory and
// written already, which a rank rebuilt on a spare would otherwise pay for during its recovery.
// find_segment and list_segments_of find a segment in a reserve's place as in its own.
inline constexpr int kReserveSlots = 64;
// The job's reserves on `node` that no rank has taken over.
std::vector<SegmentListing> list_reserves(const std::string& job, const std::string& node);
// A new reserve for `data_bytes` of a segment's data in the first free slot, every page written
// (with huge pages only for segments with huge pages).
Segment create_reserve(const std::string& job, const std::string& node, std::size_t data_bytes,
                       bool huge_pages);

// Rounded-up size of a segment holding `data_bytes` after its header.
std::size_t segment_size(std::size_t data_bytes, bool huge_pages) noexcept;

// The huge page that segments with huge pages (SHM_HUGETLB) are sized and placed in.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

}  // namespace skt
