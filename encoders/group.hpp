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
#include "encoders/geometry.hpp"

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
};

struct PipelineOptions {
  // Chunks in flight per direction; the transfers of one chunk overlap the combining of another.
  int depth = 4;
  // Called after each chunk this member has handled, with (handled, total). Fault injection uses
  // it to stop a member in the middle of an operation.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
  // Reused scratch memory; without it each call allocates its own.
  ScratchPool* scratch = nullptr;
};

// Per row, the blocks (see StripeGeometry::block_bytes) that some data member changed, and those
// that every data member changed: equal on all members of the group.
struct RowMasks {
  std::vector<std::uint64_t> any;
  std::vector<std::uint64_t> all;
};

// Collective over `group`: the row masks from each member's changed blocks, chunk by chunk of its
// stream (`changed[j]` for chunk j of `mine`). Blocks past the end of a short chunk count as
// changed by its member: they read as zero before and after.
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

// Collective over `group` (its ranks are the member indices): every member computes its parity
// chunks of the group's data into `parity` (geometry.parity_bytes() bytes). Each data chunk goes
// straight from the stream to the m holders of its row, which combine a row's G-m chunks in one
// pass; rows go a period at a time with several periods in flight. A member sends m times its
// stream and receives as much. With `incremental`, only the changed blocks of a row travel, a run
// of them at a time, and only changed blocks are read. Returns how many bytes this member sent.
std::uint64_t encode_group(MPI_Comm group, const StripeGeometry& geometry, const Codec& codec,
                           const ChunkList& mine, std::byte* parity, const PipelineOptions& options,
                           const Incremental* incremental = nullptr);

// Collective over `group`: the members in `lost` (sorted) get back their data chunks (written
// through `mine`, whose pointers say where) and their parity chunks (into `parity`) from the
// survivors' data and parity. `member_chunks[i]` is the length of member i's stream in chunks.
// Each lost member is rebuilt by a pipelined chain through the survivors.
void rebuild_group(MPI_Comm group, const StripeGeometry& geometry, const Codec& codec,
                   std::span<const std::uint64_t> member_chunks, std::span<const int> lost,
                   const ChunkList& mine, std::byte* parity, const PipelineOptions& options);

}  // namespace skt::enc
