// Where every byte of a group's data and parity lives: a pure description, no I/O.
//
// Each member's stream is cut into chunks. Rows hold one chunk from each of G-m data members and
// m parity chunks; parity slot l of row k belongs to member (k + l) mod G, so parity rotates as
// in RAID-5/6. A member's consecutive chunks go to consecutive rows in which it is a data member,
// so any contiguous range of a stream spreads evenly over all the other members' parity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace skt::enc {

// A stretch of a row, in bytes within its chunks, that travels as one transfer per member:
// encoded afresh from the data where every data member changed all of it, else as a change to
// the committed parity.
struct RowSegment {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool fresh = false;

  std::size_t bytes() const noexcept { return end - begin; }
  bool operator==(const RowSegment&) const = default;
};

struct StripeGeometry {
  int group_size = 1;           // G
  int parity = 0;               // m parity chunks per row
  std::size_t chunk_bytes = 0;  // bytes per chunk
  std::uint64_t rows = 0;       // a multiple of G, enough for the longest member stream

  // The geometry for a group whose longest member stream has `max_member_chunks` chunks.
  static StripeGeometry plan(int group_size, int parity, std::size_t chunk_bytes,
                             std::uint64_t max_member_chunks);

  int data_width() const noexcept { return group_size - parity; }
  // Parity chunks each member holds (all members hold the same number).
  std::uint64_t parity_chunks() const noexcept;
  std::size_t parity_bytes() const noexcept { return parity_chunks() * chunk_bytes; }

  // Parity slot that `member` holds in `row`, or -1 when it is a data member there.
  int parity_slot(int member, std::uint64_t row) const noexcept;
  // Position of `member` among the row's data members (0 .. G-m-1), or -1 for a parity holder.
  int data_position(int member, std::uint64_t row) const noexcept;
  // The member that holds parity slot `slot` of `row`.
  int holder(std::uint64_t row, int slot) const noexcept;

  std::uint64_t row_of_chunk(int member, std::uint64_t chunk) const noexcept;
  // Index of the data chunk `member` places in `row`, or nothing for a parity row of it.
  std::optional<std::uint64_t> chunk_of_row(int member, std::uint64_t row) const noexcept;

  // Row of the member's `index`-th parity chunk, and back.
  std::uint64_t parity_row(int member, std::uint64_t index) const noexcept;
  std::optional<std::uint64_t> parity_index(int member, std::uint64_t row) const noexcept;

  // Changes are tracked in blocks of a chunk: at most 64 (one bit each of a mask), each a
  // multiple of 64 bytes but the last, so that a change of a few bytes costs a few bytes.
  std::size_t block_bytes() const noexcept;
  int blocks_per_chunk() const noexcept;
  // The blocks that bytes [begin, end) of a chunk touch.
  std::uint64_t block_mask(std::size_t begin, std::size_t end) const noexcept;
  // A row's segments, in order, from the blocks some member changed (`any`) and those every data
  // member changed (`all`): runs of `any`, cut where membership in `all` changes.
  std::vector<RowSegment> segments(std::uint64_t any, std::uint64_t all) const;
};

// Which of a row's segments travel as one message, as [first, last) ranges of their indices: every
// run of consecutive fresh segments, and each other segment on its own. A member sends all of a
// fresh segment, or less only where its stream ends, so a run's bytes fill the receiver's segments
// in order; of any other segment it sends nothing if it changed none of it, which the receivers
// cannot know beforehand. Fewer, larger messages are what make a fragmented change travel fast:
// between two ranks here, 5 segments of 24 KiB went at 3.6 GB/s as 5 messages, 7.7 as one.
std::vector<std::pair<std::size_t, std::size_t>> message_runs(
    const std::vector<RowSegment>& segments);

}  // namespace skt::enc
