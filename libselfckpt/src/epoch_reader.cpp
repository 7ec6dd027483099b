#include "libselfckpt/src/epoch_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/mpi.hpp"
#include "libselfckpt/internal/names.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/mpi_effects.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

EpochReader::EpochReader(MPI_Comm comm, const std::string& job) : job_(job) {
  if (!mpi_initialized()) {
    throw Error(SKT_ERR_STATE, "skt_epoch_open: MPI is not initialised; call MPI_Init first");
  }
  const Comm own = Comm::duplicate(comm);
  const int rank = own.rank();
  const std::vector<std::string> nodes;  // messages name ranks only: MpiEffects keeps references
  const std::string node;
  MpiEffects effects(own.get(), nodes, node, nullptr);
  std::string dir;
  effects.agree([&] {
    if (!valid_job_tag(job)) {
      throw Error(SKT_ERR_ARG, fmt::format("skt_epoch_open: '{}' is no job tag (1 to 63 of "
                                           "A-Z a-z 0-9 _ - and an optional +name)",
                                           job));
    }
    Config config = load_config("", skt_environment());
    if (config.drain_dir.empty()) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("skt_epoch_open: SKT_DRAIN_DIR is not set: it names where job '{}' "
                              "drained its epochs, which a run of another shape reads",
                              job));
    }
    dir = expand_node(config.drain_dir, config.node.empty() ? default_node_name() : config.node);
  });
  // Rank 0 chooses the newest complete epoch; every rank must see the same.
  std::uint64_t chosen = 0;
  effects.agree([&] {
    if (rank != 0) return;
    const auto complete = complete_epochs(dir, job);
    if (complete.empty()) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("skt_epoch_open: job '{}' has no complete drained epoch in {} (an "
                              "epoch counts once its manifest is written; skt-drain list --dir {} "
                              "shows what is there)",
                              job, dir, dir));
    }
    chosen = complete.front().manifest.epoch;
  });
  chosen = effects.broadcast_value(chosen);
  effects.agree([&] {
    const auto complete = complete_epochs(dir, job);
    const auto it = std::find_if(complete.begin(), complete.end(),
                                 [&](const DrainedEpoch& e) { return e.manifest.epoch == chosen; });
    if (it == complete.end()) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("skt_epoch_open: this rank cannot see the manifest of epoch {} of "
                              "job '{}' in {}: the drain directory must be the same for every rank",
                              chosen, job, dir));
    }
    epoch_ = *it;
  });
  files_.resize(static_cast<std::size_t>(nranks()));
}

DrainedRankFile& EpochReader::file_of(int old_rank) {
  if (old_rank < 0 || old_rank >= nranks()) {
    throw Error(SKT_ERR_ARG,
                fmt::format("old rank {} never existed: epoch {} of job '{}' was written by {} "
                            "ranks (0 to {})",
                            old_rank, epoch(), job_, nranks(), nranks() - 1));
  }
  auto& file = files_[static_cast<std::size_t>(old_rank)];
  if (!file) {
    try {
      file = std::make_unique<DrainedRankFile>(epoch_, old_rank);
    } catch (const Error&) {
      throw;
    } catch (const std::runtime_error& e) {
      throw Error(SKT_ERR_UNRECOVERABLE, fmt::format("epoch {} of job '{}', old rank {}: {}",
                                                     epoch(), job_, old_rank, e.what()));
    }
  }
  return *file;
}

const RegionEntry& EpochReader::entry(int old_rank, const std::string& region) {
  const auto& entries = file_of(old_rank).header().entries;
  const auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const RegionEntry& e) { return e.name == region; });
  if (it == entries.end()) {
    std::vector<std::string> names;
    for (const auto& e : entries)
      names.push_back(fmt::format("'{}'", e.name));
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("old rank {} of job '{}' (epoch {}) has no region or private object "
                            "'{}'; it has {}",
                            old_rank, job_, epoch(), region,
                            names.empty() ? std::string("none")
                                          : fmt::format("{}", fmt::join(names, ", "))));
  }
  return *it;
}

std::uint64_t EpochReader::bytes_of(int old_rank, const std::string& region) {
  return entry(old_rank, region).bytes;
}

void EpochReader::read(int old_rank, const std::string& region, std::uint64_t offset,
                       std::size_t bytes, std::byte* out) {
  const RegionEntry& e = entry(old_rank, region);
  if (offset > e.bytes || bytes > e.bytes - offset) {
    throw Error(SKT_ERR_ARG,
                fmt::format("bytes {} to {} of '{}' of old rank {} of job '{}': the region has {}",
                            offset, offset + bytes, region, old_rank, job_, e.bytes));
  }
  DrainedRankFile& file = file_of(old_rank);
  const std::uint64_t at = (e.staged ? 0 : file.header().regions_offset) + e.offset + offset;
  try {
    file.read_copy(at, bytes, out);
  } catch (const std::runtime_error& error) {
    throw Error(SKT_ERR_UNRECOVERABLE, fmt::format("epoch {} of job '{}', old rank {}: {}", epoch(),
                                                   job_, old_rank, error.what()));
  }
}

}  // namespace skt
