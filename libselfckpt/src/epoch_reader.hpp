// The last committed epoch of a job, read by a program of another shape (skt_epoch_open): a job
// that ran on N ranks restarts on M, and each new rank reads the old ranks' regions it needs, then
// checkpoints in its own shape under its own tag.
//
// An old rank's committed copy is read from memory where its checkpoint segment survives on a
// node of this run (attached read-only, checked against the epoch's block digests when opened),
// else from the epoch's drained file. Reads are collective: a rank's pieces held on another node
// travel from the rank of this run on that node.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/mpi.hpp"
#include "libselfckpt/internal/drain.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "libselfckpt/src/mpi_effects.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

class EpochReader {
 public:
  // Collective over comm: finds `job`'s last committed epoch, the same on every rank, or throws
  // the same Error on every rank (SKT_ERR_UNRECOVERABLE when neither memory nor storage holds all
  // of one epoch, SKT_ERR_BUSY while the job still runs).
  EpochReader(MPI_Comm comm, const std::string& job);

  std::uint64_t epoch() const noexcept { return epoch_; }
  int nranks() const noexcept { return static_cast<int>(old_.size()); }
  // How many of the old ranks are read from memory (the rest from their drained files).
  int in_memory() const noexcept;
  // The size of an old rank's region or private object.
  std::uint64_t bytes_of(int old_rank, const std::string& region);

  struct Piece {
    int old_rank = 0;
    std::string region;
    std::uint64_t offset = 0;
    std::size_t bytes = 0;
    std::byte* out = nullptr;
  };
  // Collective: copies each rank's pieces (any number, none included), every one checked against
  // the epoch's CRCs, or throws the same Error on every rank. `bad_arguments`, when a rank has it,
  // is that rank's SKT_ERR_ARG, raised with the others.
  void read(std::span<const Piece> pieces, const std::string& bad_arguments = {});

 private:
  struct OldRank {
    int holder = -1;  // the rank of comm whose node holds its copy in memory; -1: its drained file
    std::uint64_t regions_offset = 0;  // in its copy B
    std::uint64_t copy_bytes = 0;
    std::vector<RegionEntry> entries;
    bool described = false;  // entries known (a drained file's are read when first needed)
  };
  // A piece as bytes of an old rank's copy B.
  struct CopyRange {
    int old_rank;
    std::uint64_t offset;
    std::uint64_t bytes;
    std::byte* out;
  };

  const OldRank& described(int old_rank);
  // A drained file that cannot serve, as the error that says whose.
  Error unreadable(int old_rank, const std::runtime_error& why) const;
  DrainedRankFile& file_of(int old_rank);
  CopyRange locate(const Piece& piece);
  void exchange(const std::vector<CopyRange>& remote);

  Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  const std::vector<std::string> no_nodes_;  // MpiEffects names ranks by number only
  const std::string no_node_;
  std::unique_ptr<MpiEffects> effects_;
  std::string job_;
  std::uint64_t epoch_ = 0;
  std::vector<OldRank> old_;
  std::map<int, Segment> held_;  // old rank → its checkpoint segment, attached on this rank
  std::map<int, const std::byte*> copies_;  // old rank → its copy B in held_
  DrainedEpoch drained_;
  std::vector<std::unique_ptr<DrainedRankFile>> files_;
};

}  // namespace skt
