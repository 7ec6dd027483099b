// The last committed epoch of a job, read by a program of another shape (skt_epoch_open): a job
// that ran on N ranks restarts on M, and each new rank reads the old ranks' regions it needs from
// the epoch's drained files, then checkpoints in its own shape under its own tag.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libselfckpt/internal/drain.hpp"

namespace skt {

class EpochReader {
 public:
  // Collective over comm: finds the newest complete drained epoch of `job` in the drain directory
  // the configuration names (SKT_DRAIN_DIR), the same on every rank. Throws Error (the same on
  // every rank) when the job has none there, or some rank cannot see it.
  EpochReader(MPI_Comm comm, const std::string& job);

  std::uint64_t epoch() const noexcept { return epoch_.manifest.epoch; }
  int nranks() const noexcept { return epoch_.manifest.nranks(); }
  // The size of an old rank's region or private object.
  std::uint64_t bytes_of(int old_rank, const std::string& region);
  // Copies bytes [offset, offset + bytes) of an old rank's region or private object to `out`,
  // each block of the file checked against its CRC.
  void read(int old_rank, const std::string& region, std::uint64_t offset, std::size_t bytes,
            std::byte* out);

 private:
  DrainedRankFile& file_of(int old_rank);
  const RegionEntry& entry(int old_rank, const std::string& region);

  std::string job_;
  DrainedEpoch epoch_;
  std::vector<std::unique_ptr<DrainedRankFile>> files_;  // by old rank, opened when first read
};

}  // namespace skt
