// Group encoding and rebuilding over MPI. The encoders know streams of chunks and parity buffers,
// nothing of where they live.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/crc.hpp"
#include "encoders/geometry.hpp"
#include "encoders/link.hpp"

namespace skt::enc {

// One member's data stream. Chunk i starts at data[i] and holds bytes[i] valid bytes (at most
// chunk_bytes); the rest of a short chunk reads as zero. Pointers should be 32-byte aligned for the
// fast kernels.
struct ChunkList {
  std::vector<std::byte*> data;
  std::vector<std::uint32_t> bytes;

  std::uint64_t size() const noexcept { return data.size(); }
  void add(std::byte* start, std::uint32_t valid) {
    data.push_back(start);
    bytes.push_back(valid);
  }
};

// Scratch memory that group operations reuse from one call to the next, so that a checkpoint does
// not map fresh pages every time. Grows to the largest size asked; not shared between threads.
// Memory it hands out stays mapped until the pool is destroyed, even when a slot grows: an
// aborted operation may leave sends from it that MPI still holds.
class ScratchPool {
 public:
  ScratchPool() = default;
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  // At least `bytes` bytes, 64-byte aligned, in slot `slot` (distinct slots do not overlap).
  std::byte* get(int slot, std::size_t bytes);

 private:
  struct Block {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<Block> blocks_;
  std::vector<std::byte*> retired_;
};

struct PipelineOptions {
  // Chunks in flight per direction; the transfers of one chunk overlap the combining of another.
  int depth = 4;
  // Called after each chunk this member has handled, with (handled, total). Fault injection uses
  // it to stop a member in the middle of an operation.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
  // Reused scratch memory; without it each call allocates its own (which an aborted operation
  // then cannot keep mapped: give one wherever an operation may be aborted).
  ScratchPool* scratch = nullptr;
};

// Per row, the blocks (see StripeGeometry::block_bytes) that some data member changed, and those
// that every data member changed: equal on all members of the group.
struct RowMasks {
  std::vector<std::uint64_t> any;
  std::vector<std::uint64_t> all;
};

// Collective over `group` (a blocking reduction: call it only where every member is sure to
// call it too): the row masks from each member's changed blocks, chunk by chunk of its stream
// (`changed[j]` for chunk j of `mine`). Blocks past the end of a short chunk count as changed by
// its member: they read as zero before and after.
RowMasks agree_row_masks(MPI_Comm group, const StripeGeometry& geometry, const ChunkList& mine,
                         const std::vector<std::uint64_t>& changed);

// What an incremental encoding starts from: the committed stream B and its parity C, and what
// changed since. Blocks no member changed keep their parity, and the parity buffer must already
// hold it there (C's, or the same). Blocks every data member changed are encoded afresh from W,
// without reading B or C; the others get C + code(W - B).
struct Incremental {
  const ChunkList* base = nullptr;                      // B, chunk by chunk like the stream
  const std::byte* committed_parity = nullptr;          // C, like `parity`
  const std::vector<std::uint64_t>* changed = nullptr;  // this member's changed blocks per chunk
  const RowMasks* rows = nullptr;                       // from agree_row_masks
};

// Block checksums (block_crc) that an encoding writes as it goes, block by block of a chunk
// (geometry.blocks_per_chunk() entries per chunk): of every data block it reads from the stream
// (all of them, or the changed ones when incremental) and of every parity block it writes. The
// CRC of a data block is taken just before the block is sent, which then reads it from cache.
// Under xor the parity blocks' CRCs are not read from the parity: they are combined from the
// data blocks' (see combine_parity_crcs), which needs `data` to hold the CRCs of every block of
// the stream (an incremental encoding's caller fills the unchanged ones from the last epoch).
struct Digests {
  std::uint32_t* data = nullptr;    // [chunk * blocks_per_chunk + block], this member's stream
  std::uint32_t* parity = nullptr;  // [parity index * blocks_per_chunk + block]
};

// Collective over the link's group (its ranks are the member indices): every member computes its
// parity chunks of the group's data into `parity` (geometry.parity_bytes() bytes).
// `member_chunks[i]` is the length of member i's stream in chunks. Each data chunk goes straight
// from the stream to the m holders of its row, which combine a row's G-m chunks in one pass; rows
// go a period at a time with several periods in flight. A member sends m times its stream and
// receives as much. With `incremental`, only the changed blocks of a row travel, a run of them at
// a time, and only changed blocks are read. Returns how many bytes this member sent.
std::uint64_t encode_group(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                           std::span<const std::uint64_t> member_chunks, const ChunkList& mine,
                           std::byte* parity, const PipelineOptions& options,
                           const Incremental* incremental = nullptr,
                           const Digests* digests = nullptr);

// What a rebuild lets its caller do with each item as it passes, so that nothing takes a pass of
// its own over memory: a survivor's item of a row just before the survivor reads it (to verify it,
// or put it right, and then it is read from cache), and a lost member's item of a row once it has
// landed (to copy it, or take its digests, while it is in cache). Each may be called more than
// once for a row when several members are lost.
struct RebuildHooks {
  std::function<void(std::uint64_t row)> before_read;
  std::function<void(std::uint64_t row)> landed;
  // A survivor's work while it waits for transfers (for the lost members to get ready, above
  // all), a little at a time: true while there was some (Exchange::set_idle_work).
  std::function<bool()> idle;
  // One member lost, rebuilt as the XOR of the others (rebuilt_as_xor_of_the_others): this
  // member's CRCs of what is rebuilt. A survivor's (read) go to the lost member, which gets its
  // own derived from them (derive_lost_crcs) before its first item lands: it need not digest what
  // lands.
  const Digests* digests = nullptr;
};

// Whether member `target`, lost alone, is rebuilt as the XOR of its rows' other items, whatever
// the row: under xor, and rs with G = 2 (a copy). Then its CRCs can be derived (below).
bool rebuilt_as_xor_of_the_others(const Codec& codec, int target);

// Under xor, the CRCs (block_crc) of member `target`'s items (every block of its data chunks and
// parity chunks, into `out`) from the other members' CRCs rather than from the rebuilt bytes: an
// item is the XOR of its row's other g - 1, XOR is linear and so is a CRC, so its CRC is the XOR
// of theirs (and of a zero block's when g - 1 is even: the seed counts once). data[d] holds
// member d's data CRCs (member_chunks[d] chunks), parity[d] its parity CRCs; the target's are not
// read.
void derive_lost_crcs(const StripeGeometry& geometry, std::span<const std::uint64_t> member_chunks,
                      int target, const std::vector<std::vector<std::uint32_t>>& data,
                      const std::vector<std::vector<std::uint32_t>>& parity, const Digests& out);

// Collective over the link's group: the members in `lost` (sorted) get back their data chunks
// (written through `mine`, whose pointers say where) and their parity chunks (into `parity`) from
// the survivors' data and parity. Each lost member is rebuilt by a pipelined chain through the
// survivors. Rows in `skip_rows` (sorted) are left alone: repair_rows handles them.
void rebuild_group(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                   std::span<const std::uint64_t> member_chunks, std::span<const int> lost,
                   std::span<const std::uint64_t> skip_rows, const ChunkList& mine,
                   std::byte* parity, const PipelineOptions& options,
                   const RebuildHooks* hooks = nullptr);

// One row whose items (data chunks and parity chunks, one per member) some members must rebuild
// from the others: at most the code's tolerance of them.
struct RowRepair {
  std::uint64_t row = 0;
  std::vector<int> erased;  // members, sorted
};

// Collective over the link's group, every member with the same list: each erased item is rebuilt
// by its member from the items of the row's other members (a data chunk lands through `mine`, a
// parity chunk in `parity`). For scattered damage, a few rows at a time: no pipeline.
void repair_rows(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                 std::span<const std::uint64_t> member_chunks, std::span<const RowRepair> rows,
                 const ChunkList& mine, std::byte* parity, const PipelineOptions& options);

// Collective over the link's group, xor only: every member's parity block CRCs from all members'
// data block CRCs (`data`: this member's, every block of its stream), which the members exchange.
void combine_parity_crcs(GroupLink& link, const StripeGeometry& geometry,
                         std::span<const std::uint64_t> counts, const std::uint32_t* data,
                         std::uint32_t* parity);

}  // namespace skt::enc
