#include "libselfckpt/src/storage_level.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace skt {

bool StorageLevel::due(std::uint64_t epoch) {
  const Config& config = job_.config();
  if (config.drain_dir.empty() || job_.ephemeral()) return false;
  if (config.drain_every_seconds <= 0) {
    return epoch % static_cast<std::uint64_t>(config.drain_every_commits) == 0;
  }
  // Rank 0's clock decides for everyone.
  int due = 0;
  if (job_.rank() == 0) {
    due = last_drain_start_ < 0 || now_seconds() - last_drain_start_ >= config.drain_every_seconds
              ? 1
              : 0;
  }
  return job_.effects().broadcast_value(due) != 0;
}

void StorageLevel::start(std::uint64_t epoch, const CheckpointInfo& info, const RankStore& store,
                         std::uint64_t layout_hash) {
  const Config& config = job_.config();
  DrainFileHeader h;
  h.job = config.job;
  h.run = job_.run_id();
  h.epoch = epoch;
  h.rank = job_.rank();
  h.nranks = job_.nranks();
  h.groups = static_cast<int>(info.groups);
  h.group = static_cast<int>(info.group);
  h.member = static_cast<int>(info.member);
  for (std::uint32_t i = 0; i < info.group_size; ++i) {
    h.members.push_back(info.members[i]);
    h.member_chunks.push_back(info.member_chunks[i]);
  }
  h.scheme = static_cast<std::uint32_t>(config.scheme);
  h.parity = store.geometry.parity;
  h.chunk_bytes = config.chunk_bytes;
  h.layout_hash = layout_hash;
  h.command = info.command;
  h.stage_bytes = store.layout.stage_bytes;
  h.regions_offset = store.layout.copy_regions_offset();
  h.regions_bytes = store.layout.regions_bytes;
  h.copy_bytes = store.layout.copy_bytes();
  h.entries = store.layout.entries;
  h.with_checksum = config.drain_checksum;
  h.checksum_bytes = config.drain_checksum ? store.geometry.parity_bytes() : 0;
  const std::byte* copy =
      store.checkpoint + store.areas.copy_offset(store.areas.copy_of_epoch(epoch));
  // With B alone, rank 0 completes the epoch (its manifest) once every rank's file is there; with
  // C too, no rank may see the others' files, and the groups decide at restart.
  drain_.start(drain_epoch_dir(config.drain_dir, config.job, epoch), h, copy,
               store.checksum_of(epoch), job_.fault().midway(FaultStep::drain, epoch),
               job_.rank() == 0 && !config.drain_checksum);
  draining_ = true;
  last_drain_start_ = now_seconds();
}

void StorageLevel::settle() {
  if (!draining_) return;  // the same on every rank: drains start and settle collectively
  draining_ = false;
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  const double waiting = now_seconds();
  const DrainWriter::Outcome written = drain_.wait_file();
  const int first_failed = effects.all_min(written.digest ? job_.nranks() : rank);
  const int failures = effects.all_sum(written.digest ? 0 : 1);
  const double slowest = effects.all_max(written.seconds);
  const auto epoch_dir = drain_epoch_dir(config.drain_dir, config.job, written.epoch);
  if (failures > 0) {
    drain_.abandon();  // rank 0 waits no longer for files that will not come
    // Reported once per launch, by the first rank that failed: the in-memory level is unaffected.
    if (rank == first_failed && !failure_reported_) {
      job_.log().warn(
          "the drain of epoch {} to {} failed on {} rank(s); on this one: {}. Checkpoints in "
          "memory go on as before; later drain failures are not reported again",
          written.epoch, config.drain_dir, failures, written.error);
    }
    failure_reported_ = true;
    if (rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(epoch_dir, ignored);
    }
    return;
  }
  // Every rank's file is written: rank 0's thread completes the epoch, if it has not yet; with the
  // checksums drained, the epoch is complete now, and each rank removes its older files.
  const DrainWriter::Outcome out = drain_.wait();
  if (config.drain_checksum) remove_rank_files(config.drain_dir, config.job, rank, out.epoch);
  if (rank != 0) return;
  if (!out.manifest_error.empty()) {
    if (!failure_reported_) {
      job_.log().warn("epoch {} was drained but its manifest could not be written: {}", out.epoch,
                      out.manifest_error);
    }
    failure_reported_ = true;
    return;
  }
  job_.log().job(
      "epoch {} drained to {}: {:.1f} MB per rank in {:.3f} s ({:.0f} MB/s); {:.3f} s waited "
      "for at this checkpoint",
      out.epoch, epoch_dir.string(), out.bytes / 1e6, slowest,
      slowest > 0 ? out.bytes / 1e6 / slowest : 0.0, now_seconds() - waiting);
}

void StorageLevel::finish_in_flight() {
  if (!draining_) return;
  // Rank 0 waits a bounded time for the other ranks' files: long enough for ranks that write at
  // its own pace, and the epoch stays incomplete otherwise.
  const DrainWriter::Outcome own = drain_.wait_file();
  drain_.wait_at_most(10 + 4 * own.seconds);
  draining_ = false;
}

void StorageLevel::remove_drained_epochs() const {
  const Config& config = job_.config();
  if (config.drain_checksum) {
    remove_rank_files(config.drain_dir, config.job, job_.rank(), std::nullopt);
  } else if (job_.rank() == 0 && !config.drain_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(drain_job_dir(config.drain_dir, config.job), ignored);
  }
}

std::string StorageLevel::where() const {
  return drain_job_dir(job_.config().drain_dir, job_.config().job).string();
}

void StorageLevel::refuse_older_than_misplaced(const MemoryShortfall& shortfall,
                                               std::int64_t drained) const {
  if (shortfall.misplaced_epoch <= 0 || drained >= shortfall.misplaced_epoch) return;
  throw AgreedError(
      SKT_ERR_MISMATCH,
      fmt::format("{}; storage ({}) holds {}, older than their epoch {}. Nothing was changed or "
                  "removed",
                  shortfall.failure, where(),
                  drained < 0 ? "no completely drained epoch" : fmt::format("epoch {}", drained),
                  shortfall.misplaced_epoch));
}

void StorageLevel::refuse_at_first_launch(const std::string& what) const {
  const Config& config = job_.config();
  if (!config.restart || *config.restart != 0) return;
  throw AgreedError(SKT_ERR_STALE,
                    fmt::format("drained checkpoints of job '{}' ({}) exist in {} from an earlier "
                                "run, but SKT_RESTART=0 says this is a first launch; remove them "
                                "with 'skt-drain remove --dir {} --job {}'{} or use a new job tag",
                                config.job, what, where(), config.drain_dir, config.job,
                                config.drain_checksum ? " on every node," : ""));
}

void StorageLevel::warn_of_restore(const MemoryShortfall& shortfall, std::uint64_t epoch,
                                   const std::string& rebuilt) const {
  // Worth a warning: the job goes back to an older epoch than memory would have given.
  if (job_.rank() != 0) return;
  job_.log().warn("{}: restoring drained epoch {} from storage ({}){}",
                  shortfall.failure.empty()
                      ? "nothing of job '" + job_.config().job + "' is left in memory"
                      : "memory cannot serve (" + shortfall.failure + ")",
                  epoch, where(), rebuilt);
}

std::optional<std::uint64_t> StorageLevel::restore(std::span<const Finding> findings,
                                                   const MemoryShortfall& shortfall,
                                                   MemoryLevel& memory) {
  return job_.config().drain_checksum ? restore_group_files(findings, shortfall, memory)
                                      : restore_whole_files(findings, shortfall, memory);
}

std::optional<DrainedEpoch> StorageLevel::choose_complete_epoch(const MemoryShortfall& shortfall) {
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  // Rank 0's view of the drain directory decides; every rank must see that epoch's manifest too.
  std::vector<DrainedEpoch> complete;
  effects.agree([&] { complete = complete_epochs(config.drain_dir, config.job); });
  const std::int64_t chosen = effects.broadcast_value(
      rank == 0 && !complete.empty() ? static_cast<std::int64_t>(complete.front().manifest.epoch)
                                     : std::int64_t{-1});
  refuse_older_than_misplaced(shortfall, chosen);
  if (chosen < 0) {
    if (shortfall.failure.empty()) return std::nullopt;  // a fresh start: nothing anywhere
    throw AgreedError(SKT_ERR_UNRECOVERABLE,
                      fmt::format("{}; storage cannot serve either: {} holds no completely drained "
                                  "epoch of job '{}'",
                                  shortfall.failure, where(), config.job));
  }
  refuse_at_first_launch(fmt::format("epoch {}", chosen));
  DrainedEpoch epoch;
  effects.agree([&] {
    const auto it = std::find_if(complete.begin(), complete.end(), [&](const DrainedEpoch& d) {
      return d.manifest.epoch == static_cast<std::uint64_t>(chosen);
    });
    if (it == complete.end()) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("rank {} on node {} cannot see the manifest of drained epoch {} in "
                              "{}: the drain directory must be the same for every rank",
                              rank, config.node, chosen, where()));
    }
    epoch = *it;
    if (epoch.manifest.nranks() != job_.nranks()) {
      throw Error(
          SKT_ERR_MISMATCH,
          fmt::format(
              "drained epoch {} of job '{}' was written by {} ranks, this run has "
              "{}; relaunch with {} ranks, or go on with this one under a tag of its own that "
              "reads the job's epoch (skt_epoch_open)",
              chosen, config.job, epoch.manifest.nranks(), job_.nranks(), epoch.manifest.nranks()));
    }
  });
  return epoch;
}

std::optional<std::uint64_t> StorageLevel::restore_whole_files(std::span<const Finding> findings,
                                                               const MemoryShortfall& shortfall,
                                                               MemoryLevel& memory) {
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  const std::optional<DrainedEpoch> found = choose_complete_epoch(shortfall);
  if (!found) return std::nullopt;
  const DrainedEpoch& epoch = *found;
  const std::uint64_t chosen = epoch.manifest.epoch;
  if (rank == 0 && epoch.rebuilt) {
    job_.log().warn(
        "the manifest of drained epoch {} in {} is damaged; every rank's file of it is whole and "
        "they agree, so the epoch is restored from them",
        chosen, where());
  }
  warn_of_restore(shortfall, chosen, "");
  // Every rank's file is checked whole before anything in memory changes: when storage cannot
  // serve either, the segments that survived stay as they were.
  const Finding& declared = findings[static_cast<std::size_t>(rank)];
  const auto check = [&](const DrainFileHeader& h) {
    job_.refuse_another_command(
        h.command, "skt-drain remove --dir " + config.drain_dir + " --job " + config.job);
    if (h.layout_hash != declared.layout_hash || h.stage_bytes != declared.stage_bytes ||
        h.regions_bytes != declared.regions_bytes) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the regions declared now differ from those of drained epoch {} "
                              "({} bytes of private objects and {} of regions); a relaunch must "
                              "declare the same regions and protect the same objects",
                              chosen, h.stage_bytes, h.regions_bytes));
    }
  };
  const auto unreadable = [&](const std::exception& e) {
    return Error(
        SKT_ERR_UNRECOVERABLE,
        fmt::format("drained epoch {} cannot be restored: {}{}", chosen, e.what(),
                    shortfall.failure.empty() ? "" : " (memory: " + shortfall.failure + ")"));
  };
  effects.agree([&] {
    try {
      check(read_drain_file(epoch, rank, {}));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw unreadable(e);
    }
  });
  if (!shortfall.failure.empty() || !memory.joined()) {
    std::vector<Finding> nothing(findings.begin(), findings.end());
    for (auto& f : nothing)
      f.valid = 0;
    RestorePlan fresh;
    effects.agree([&] { fresh = plan_restore(nothing, job_.nodes(), config); });
    memory.join_afresh(fresh);
  }
  effects.agree([&] {
    try {
      read_drain_file(epoch, rank,
                      [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
                        memory.load_copy_bytes(offset, bytes, n);
                      });
    } catch (const std::exception& e) {
      throw unreadable(e);
    }
  });
  return chosen;
}

std::vector<std::vector<DrainFileHeader>> StorageLevel::gather_group_files() {
  const Config& config = job_.config();
  std::vector<DrainFileHeader> own;
  job_.effects().agree([&] {
    own = rank_files(config.drain_dir, config.job, job_.rank());
    std::erase_if(own, [](const DrainFileHeader& h) { return !h.with_checksum; });
  });
  std::vector<std::byte> pages(own.size() * kDrainHeaderBytes);
  for (std::size_t i = 0; i < own.size(); ++i)
    encode_drain_header(pages.data() + i * kDrainHeaderBytes, own[i]);
  const auto gathered = job_.effects().gather(pages);
  std::vector<std::vector<DrainFileHeader>> files(gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    for (std::size_t at = 0; at + kDrainHeaderBytes <= gathered[r].size(); at += kDrainHeaderBytes)
      files[r].push_back(*decode_drain_header(gathered[r].data() + at));
  }
  return files;
}

void StorageLevel::refuse_other_candidate(const DrainedCandidate& c,
                                          const std::vector<std::vector<DrainFileHeader>>& files,
                                          std::span<const Finding> findings) const {
  const Config& config = job_.config();
  const DrainFileHeader& s = c.sample;
  bool parity_differs = false;
  for (std::size_t g = 0; g < c.members.size(); ++g)
    parity_differs = parity_differs || (c.members[g].size() > 1 && c.parity_of[g] != config.parity);
  if (s.scheme != static_cast<std::uint32_t>(config.scheme) || parity_differs ||
      s.chunk_bytes != config.chunk_bytes) {
    throw AgreedError(
        SKT_ERR_MISMATCH,
        fmt::format("drained epoch {} was encoded with scheme {}, parity {} and chunks of {} "
                    "bytes; relaunch with the same SKT_SCHEME, SKT_PARITY and SKT_CHUNK_SIZE",
                    c.epoch, enc::scheme_name(static_cast<enc::Scheme>(s.scheme)),
                    *std::max_element(c.parity_of.begin(), c.parity_of.end()), s.chunk_bytes));
  }
  for (int r = 0; r < job_.nranks(); ++r) {
    const Finding& f = findings[static_cast<std::size_t>(r)];
    const int size = static_cast<int>(c.members[static_cast<std::size_t>(c.group_of[r])].size());
    const std::uint64_t chunks =
        StreamLayout::plan({}, f.stage_bytes, f.regions_bytes, config.chunk_bytes,
                           stage_period(config.scheme, size, config.parity))
            .chunks;
    const auto& held_by_r = files[static_cast<std::size_t>(r)];
    const bool layout_differs = std::any_of(held_by_r.begin(), held_by_r.end(), [&](const auto& h) {
      return h.epoch == c.epoch && h.run == c.run &&
             (h.layout_hash != f.layout_hash || h.stage_bytes != f.stage_bytes ||
              h.regions_bytes != f.regions_bytes);
    });
    if (chunks != c.chunks_of[static_cast<std::size_t>(r)] || layout_differs) {
      throw AgreedError(
          SKT_ERR_MISMATCH,
          fmt::format("rank {} declared regions that differ from those of drained epoch {}; a "
                      "relaunch must declare the same regions and protect the same objects",
                      r, c.epoch));
    }
  }
}

DrainedCandidate StorageLevel::choose_group_epoch(std::vector<std::vector<DrainFileHeader>>& files,
                                                  std::span<const Finding> findings,
                                                  const MemoryShortfall& shortfall) {
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  const auto tolerance = [](std::uint32_t scheme, int parity) {
    return enc::tolerance(static_cast<enc::Scheme>(scheme), parity);
  };
  // The newest epoch the groups can rebuild; every file it takes is read whole before anything in
  // memory changes, and one that is not counts as missing.
  while (true) {
    std::string why_not;
    auto candidates = drained_candidates(files, tolerance, &why_not);
    if (candidates.empty()) {
      throw AgreedError(
          SKT_ERR_UNRECOVERABLE,
          fmt::format("{}storage cannot serve either: no drained epoch in {} can be rebuilt ({})",
                      shortfall.failure.empty() ? "" : shortfall.failure + "; ", where(), why_not));
    }
    DrainedCandidate& c = candidates.front();
    refuse_other_candidate(c, files, findings);
    const auto& mine = files[static_cast<std::size_t>(rank)];
    const auto held_here = std::find_if(mine.begin(), mine.end(), [&](const DrainFileHeader& h) {
      return h.epoch == c.epoch && h.run == c.run;
    });
    int whole = 1;
    effects.agree([&] {
      if (held_here == mine.end()) return;
      try {
        read_rank_file(
            drain_rank_file(drain_epoch_dir(config.drain_dir, config.job, c.epoch), rank),
            {config.job, c.run, c.epoch, rank, job_.nranks(), std::nullopt}, {});
      } catch (const std::exception& e) {
        whole = 0;
        job_.log().warn("{}: this rank's file of epoch {} counts as lost", e.what(), c.epoch);
      }
    });
    if (effects.all_min(whole) != 0) return std::move(c);
    // Each rank drops what it found damaged from everyone's view, and the choice is made again.
    const std::vector<int> bad = effects.gather_values(1 - whole);
    for (int r = 0; r < job_.nranks(); ++r) {
      if (bad[static_cast<std::size_t>(r)] == 0) continue;
      std::erase_if(files[static_cast<std::size_t>(r)],
                    [&](const DrainFileHeader& h) { return h.epoch == c.epoch && h.run == c.run; });
    }
  }
}

RestorePlan StorageLevel::plan_of(const DrainedCandidate& c,
                                  std::span<const Finding> findings) const {
  // The groups of the run that drained, as the memory level would keep them.
  const Config& config = job_.config();
  RestorePlan setup;
  setup.groups.group_of = c.group_of;
  setup.groups.members = c.members;
  setup.groups.index_of.assign(static_cast<std::size_t>(job_.nranks()), 0);
  for (const auto& members : c.members) {
    for (std::size_t i = 0; i < members.size(); ++i)
      setup.groups.index_of[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
  }
  setup.shapes = group_shapes(setup.groups, c.chunks_of, config.parity, config.chunk_bytes,
                              enc::tolerance(config.scheme, config.parity));
  for (auto& shape : setup.shapes) {
    for (const int r : shape.ranks)
      shape.layouts.push_back(findings[static_cast<std::size_t>(r)].layout_hash);
  }
  return setup;
}

void StorageLevel::load_group_files(const DrainedCandidate& c, const RestorePlan& setup,
                                    MemoryLevel& memory) {
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  const int group = memory.join_afresh(setup);
  const RankStore& store = memory.store();
  const auto& lost = c.lost[static_cast<std::size_t>(group)];
  const bool lost_here =
      std::find(lost.begin(), lost.end(), setup.groups.index_of[static_cast<std::size_t>(rank)]) !=
      lost.end();
  std::byte* const checksum = store.checksum_of(c.epoch);
  effects.agree([&] {
    if (lost_here) return;
    try {
      const DrainFileHeader h = read_rank_file(
          drain_rank_file(drain_epoch_dir(config.drain_dir, config.job, c.epoch), rank),
          {config.job, c.run, c.epoch, rank, job_.nranks(), std::nullopt},
          [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
            if (offset < store.layout.copy_bytes()) {
              memory.load_copy_bytes(offset, bytes, n);
            } else if (offset - store.layout.copy_bytes() + n <= store.geometry.parity_bytes()) {
              std::memcpy(checksum + (offset - store.layout.copy_bytes()), bytes, n);
            }
          });
      if (h.checksum_bytes != store.geometry.parity_bytes()) {
        throw Error(SKT_ERR_INTERNAL,
                    fmt::format("drained epoch {}: this rank's file holds {} bytes of checksum, "
                                "its group's stripes take {}",
                                c.epoch, h.checksum_bytes, store.geometry.parity_bytes()));
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("drained epoch {} cannot be restored: {}", c.epoch, e.what()));
    }
  });
  effects.agree([&] {
    if (!lost.empty()) effects.rebuild(lost, {}, {}, store.workspace, checksum, {}, nullptr);
  });
  if (lost_here)
    job_.log().warn("this rank's data of epoch {} was rebuilt from its group's files", c.epoch);
}

std::optional<std::uint64_t> StorageLevel::restore_group_files(std::span<const Finding> findings,
                                                               const MemoryShortfall& shortfall,
                                                               MemoryLevel& memory) {
  const Config& config = job_.config();
  Effects& effects = job_.effects();
  const int rank = job_.rank();
  // No rank may see another's files (node-local disks): each tells the others which it holds.
  std::vector<std::vector<DrainFileHeader>> files = gather_group_files();
  std::size_t held = 0;
  const DrainFileHeader* newest = nullptr;
  for (const auto& theirs : files) {
    held += theirs.size();
    for (const auto& h : theirs) {
      if (newest == nullptr || h.epoch > newest->epoch) newest = &h;
    }
  }
  refuse_older_than_misplaced(shortfall,
                              newest != nullptr ? static_cast<std::int64_t>(newest->epoch) : -1);
  if (newest == nullptr) {
    if (shortfall.failure.empty()) return std::nullopt;  // a fresh start: nothing anywhere
    throw AgreedError(SKT_ERR_UNRECOVERABLE,
                      fmt::format("{}; storage cannot serve either: no rank holds a drained file "
                                  "of job '{}' in {}",
                                  shortfall.failure, config.job, config.drain_dir));
  }
  refuse_at_first_launch(fmt::format("{} files, epoch {} the newest", held, newest->epoch));
  if (newest->nranks != job_.nranks()) {
    throw AgreedError(
        SKT_ERR_MISMATCH,
        fmt::format("drained epoch {} of job '{}' was written by {} ranks, this run "
                    "has {}; relaunch with {} ranks, or go on with this one under a tag of its own "
                    "that reads the job's epoch (skt_epoch_open)",
                    newest->epoch, config.job, newest->nranks, job_.nranks(), newest->nranks));
  }
  const DrainedCandidate c = choose_group_epoch(files, findings, shortfall);
  effects.agree([&] {
    for (const auto& h : files[static_cast<std::size_t>(rank)]) {
      if (h.epoch == c.epoch && h.run == c.run) {
        job_.refuse_another_command(h.command, "skt-drain remove --dir " + config.drain_dir +
                                                   " --job " + config.job + " on every node");
      }
    }
  });
  std::vector<std::string> rebuilt;
  for (std::size_t g = 0; g < c.lost.size(); ++g) {
    for (const int i : c.lost[g])
      rebuilt.push_back(std::to_string(c.members[g][static_cast<std::size_t>(i)]));
  }
  warn_of_restore(shortfall, c.epoch,
                  rebuilt.empty() ? std::string()
                                  : fmt::format("; rebuilt from their groups' files, for want of "
                                                "a whole file of their own: ranks {}",
                                                fmt::join(rebuilt, ", ")));
  load_group_files(c, plan_of(c, findings), memory);
  return c.epoch;
}

}  // namespace skt
