#include "libselfckpt/src/epoch_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "libselfckpt/internal/names.hpp"
#include "libselfckpt/internal/scrub.hpp"
#include "libselfckpt/src/config.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

constexpr std::size_t kNodeChars = 64;
constexpr std::size_t kReasonChars = 256;
// Bytes a rank asks of the others in one round of a read: what a holder packs for it at once.
constexpr std::uint64_t kRoundBytes = std::uint64_t{64} << 20;

// An old rank's checkpoint segment that a rank of this run found on its node.
struct Found {
  std::int32_t old_rank = 0;
  std::int32_t nranks = 0;
  std::int64_t epoch = -1;  // its committed copy's epoch; -1: it cannot serve (`reason` says why)
  std::int32_t holder = 0;
  char reason[kReasonChars] = {};
};

// The segments of `job` on `node` whose copies can serve, attached read-only, and what every one
// found holds; throws Error(SKT_ERR_BUSY) when a process of the job still has one attached after
// `attach_wait_seconds`.
struct Candidate {
  Segment segment;
  CheckpointView view;
};
std::vector<Found> scan(const std::string& job, const std::string& node, int holder,
                        double attach_wait_seconds, std::map<int, Candidate>& usable) {
  std::vector<Found> found;
  for (const auto& listing : list_own_segments()) {
    const SegmentIdentity& id = listing.header.identity;
    if (id.kind != SegmentKind::checkpoint || id.job != job || id.domain != node) continue;
    // A copy is read once the job has stopped: no process of it may still write there.
    wait_until_detached(listing.shmid, id, attach_wait_seconds);
    Found f;
    f.old_rank = id.rank;
    f.nranks = listing.header.nranks;
    f.holder = holder;
    std::string why;
    std::optional<Segment> segment = Segment::attach(listing.shmid, true, &why, false);
    std::optional<CheckpointView> view;
    if (segment) view = read_checkpoint_view(*segment, &why);
    if (view) {
      if (auto obstacle = copy_obstacle({id.rank, view->info, view->state})) {
        why = *obstacle;
      } else if (view->state->committed < 1) {
        why = "it has committed no checkpoint yet";
      } else {
        const auto epoch = static_cast<std::uint64_t>(view->state->committed);
        auto bad = check_digests(*view, segment->data(), epoch, &why);
        if (bad) std::erase_if(*bad, [](const BadItem& item) { return item.parity != 0; });
        if (bad && !bad->empty()) {
          why = fmt::format(
              "its copy of epoch {} does not match the epoch's block digests (stream chunk {}; "
              "skt-shm verify --repair mends what its group can rebuild)",
              epoch, bad->front().index);
        } else if (bad) {
          f.epoch = static_cast<std::int64_t>(epoch);
        }
      }
    }
    if (f.epoch < 0) {
      const std::string text = fmt::format("rank {} on node {}: {}", id.rank, node, why);
      std::memcpy(f.reason, text.data(), std::min(text.size(), kReasonChars - 1));
    } else {
      usable.insert_or_assign(id.rank, Candidate{std::move(*segment), std::move(*view)});
    }
    found.push_back(f);
  }
  return found;
}

// Ranks in a list, for messages: "1, 3 and 4".
std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() < 2) return fmt::format("{}", fmt::join(ranks, ""));
  return fmt::format("{} and {}", fmt::join(ranks.begin(), ranks.end() - 1, ", "), ranks.back());
}

// Where each of the parts of `counts` starts when they are laid one after the other; their sum in
// *total, when asked.
std::vector<int> displacements(const std::vector<int>& counts, int* total) {
  std::vector<int> at(counts.size());
  int sum = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    at[i] = sum;
    sum += counts[i];
  }
  if (total != nullptr) *total = sum;
  return at;
}

// Serialised descriptions of copies held in memory: old rank, where its regions start, its size,
// its region table.
void put_description(std::vector<std::byte>& out, int old_rank, const StreamLayout& layout) {
  const std::uint64_t fields[4] = {static_cast<std::uint64_t>(old_rank),
                                   layout.copy_regions_offset(), layout.copy_bytes(),
                                   region_table_bytes(layout.entries)};
  const std::size_t at = out.size();
  out.resize(at + sizeof fields + fields[3]);
  std::memcpy(out.data() + at, fields, sizeof fields);
  encode_region_table(out.data() + at + sizeof fields, layout.entries);
}

}  // namespace

EpochReader::EpochReader(MPI_Comm comm, const std::string& job) : job_(job) {
  if (!mpi_initialized()) {
    throw Error(SKT_ERR_STATE, "skt_epoch_open: MPI is not initialised; call MPI_Init first");
  }
  comm_ = Comm::duplicate(comm);
  rank_ = comm_.rank();
  size_ = comm_.size();
  effects_ = std::make_unique<MpiEffects>(comm_.get(), no_nodes_, no_node_, nullptr);
  Effects& effects = *effects_;
  std::string dir;
  std::string node;
  double attach_wait_seconds = 0;
  effects.agree([&] {
    if (!valid_job_tag(job)) {
      throw Error(SKT_ERR_ARG, fmt::format("skt_epoch_open: '{}' is no job tag (1 to 63 of "
                                           "A-Z a-z 0-9 _ - and an optional +name)",
                                           job));
    }
    const Config config = load_config("", skt_environment());
    node = config.node.empty() ? default_node_name() : config.node;
    attach_wait_seconds = config.attach_wait_seconds;
    if (!config.drain_dir.empty()) dir = expand_node(config.drain_dir, node);
  });

  // The lowest rank of this run on each node reads the old job's segments there.
  std::array<char, kNodeChars> mine{};
  std::memcpy(mine.data(), node.data(), std::min(node.size(), kNodeChars - 1));
  const auto nodes = effects.gather_lists<std::array<char, kNodeChars>>(std::span(&mine, 1));
  const bool reader =
      std::find(nodes.begin(), nodes.begin() + rank_, mine) == nodes.begin() + rank_;
  std::map<int, Candidate> usable;
  std::vector<Found> found;
  effects.agree([&] {
    if (reader) found = scan(job, node, rank_, attach_wait_seconds, usable);
  });
  const std::vector<Found> all = effects.gather_lists<Found>(found);

  // Memory serves an old rank whose copy holds the newest epoch found; a copy of an older one
  // says that the job stopped while committing.
  int n = 0;
  std::int64_t newest = -1;
  for (const Found& f : all) {
    n = std::max(n, f.nranks);
    newest = std::max(newest, f.epoch);
  }
  std::vector<int> holder_of(static_cast<std::size_t>(n), -1);
  std::vector<std::string> reasons;
  for (const Found& f : all) {
    if (f.nranks != n || f.old_rank < 0 || f.old_rank >= n) {
      reasons.push_back(
          fmt::format("rank {}'s segment on the node of rank {} belongs to a run of "
                      "{} ranks, others to one of {}",
                      f.old_rank, f.holder, f.nranks, n));
    } else if (f.epoch < 0) {
      reasons.emplace_back(f.reason);
    } else if (f.epoch != newest) {
      reasons.push_back(
          fmt::format("rank {} holds epoch {}, others {}: the job stopped while "
                      "committing",
                      f.old_rank, f.epoch, newest));
    } else if (holder_of[static_cast<std::size_t>(f.old_rank)] < 0) {
      holder_of[static_cast<std::size_t>(f.old_rank)] = f.holder;
    }
  }
  std::vector<int> missing;
  for (int r = 0; r < n; ++r) {
    if (holder_of[static_cast<std::size_t>(r)] < 0) missing.push_back(r);
  }

  // Storage serves what memory cannot: the newest complete drained epoch, rank 0's choice.
  bool drained = false;
  std::string why_not_drained = dir.empty() ? "SKT_DRAIN_DIR is not set" : "";
  if (!dir.empty() && (n == 0 || !missing.empty())) {
    std::int64_t chosen = -1;
    effects.agree([&] {
      if (rank_ != 0) return;
      const auto complete = complete_epochs(dir, job);
      if (!complete.empty()) chosen = static_cast<std::int64_t>(complete.front().manifest.epoch);
    });
    chosen = effects.broadcast_value(chosen);
    if (chosen < 0) {
      why_not_drained = fmt::format("{} holds no complete drained epoch of it", dir);
    } else {
      effects.agree([&] {
        const auto complete = complete_epochs(dir, job);
        const auto it = std::find_if(complete.begin(), complete.end(), [&](const DrainedEpoch& e) {
          return e.manifest.epoch == static_cast<std::uint64_t>(chosen);
        });
        if (it == complete.end()) {
          throw Error(SKT_ERR_UNRECOVERABLE,
                      fmt::format("skt_epoch_open: this rank cannot see the manifest of epoch {} "
                                  "of job '{}' in {}: the drain directory must be the same for "
                                  "every rank",
                                  chosen, job, dir));
        }
        drained_ = *it;
      });
      drained = true;
    }
  }

  if (n > 0 && missing.empty()) {
    epoch_ = static_cast<std::uint64_t>(newest);
  } else if (drained && (n == 0 || drained_.manifest.nranks() == n)) {
    // With the same epoch, the copies in memory serve beside the files; else the files alone.
    epoch_ = drained_.manifest.epoch;
    if (static_cast<std::int64_t>(epoch_) != newest) holder_of.assign(holder_of.size(), -1);
    n = drained_.manifest.nranks();
    holder_of.resize(static_cast<std::size_t>(n), -1);
  } else {
    const std::string memory =
        n == 0 ? fmt::format("no checkpoint of it is in memory on the nodes of this run")
               : fmt::format(
                     "in memory on the nodes of this run, ranks {} of its {} are missing "
                     "from epoch {}{}{}",
                     ranks_text(missing), n, newest, reasons.empty() ? "" : " (",
                     reasons.empty() ? "" : fmt::format("{})", fmt::join(reasons, "; ")));
    const std::string storage =
        drained ? fmt::format("its drained epoch {} was written by {} ranks",
                              drained_.manifest.epoch, drained_.manifest.nranks())
                : why_not_drained;
    throw AgreedError(
        SKT_ERR_UNRECOVERABLE,
        fmt::format("skt_epoch_open: job '{}' has no epoch to read: {}, and {}{}", job, memory,
                    storage,
                    n > 0 ? fmt::format(". Relaunch it on {} ranks once (skt-run places them on "
                                        "the nodes left) so that its groups rebuild what is "
                                        "missing, then read it",
                                        n)
                          : ""));
  }

  // The holders describe the copies they serve; the others' descriptions come with their files.
  old_.resize(static_cast<std::size_t>(n));
  std::vector<std::byte> descriptions;
  for (auto& [old_rank, candidate] : usable) {
    if (old_rank >= n || holder_of[static_cast<std::size_t>(old_rank)] != rank_) continue;
    put_description(descriptions, old_rank, candidate.view.layout);
    copies_[old_rank] = candidate.segment.data() + candidate.view.areas.copy_offset(
                                                       candidate.view.areas.copy_of_epoch(epoch_));
    held_.emplace(old_rank, std::move(candidate.segment));
  }
  for (const auto& bytes : effects.gather(descriptions)) {
    for (std::size_t at = 0; at < bytes.size();) {
      std::uint64_t fields[4];
      std::memcpy(fields, bytes.data() + at, sizeof fields);
      OldRank& o = old_[static_cast<std::size_t>(fields[0])];
      o.regions_offset = fields[1];
      o.copy_bytes = fields[2];
      o.entries = *decode_region_table(bytes.data() + at + sizeof fields, fields[3]);
      o.described = true;
      at += sizeof fields + fields[3];
    }
  }
  for (int r = 0; r < n; ++r)
    old_[static_cast<std::size_t>(r)].holder = holder_of[static_cast<std::size_t>(r)];
  files_.resize(static_cast<std::size_t>(n));
}

int EpochReader::in_memory() const noexcept {
  return static_cast<int>(
      std::count_if(old_.begin(), old_.end(), [](const OldRank& o) { return o.holder >= 0; }));
}

Error EpochReader::unreadable(int old_rank, const std::runtime_error& why) const {
  return Error(SKT_ERR_UNRECOVERABLE, fmt::format("epoch {} of job '{}', old rank {}: {}", epoch(),
                                                  job_, old_rank, why.what()));
}

DrainedRankFile& EpochReader::file_of(int old_rank) {
  auto& file = files_[static_cast<std::size_t>(old_rank)];
  if (!file) {
    try {
      file = std::make_unique<DrainedRankFile>(drained_, old_rank);
    } catch (const Error&) {
      throw;
    } catch (const std::runtime_error& e) {
      throw unreadable(old_rank, e);
    }
  }
  return *file;
}

const EpochReader::OldRank& EpochReader::described(int old_rank) {
  if (old_rank < 0 || old_rank >= nranks()) {
    throw Error(SKT_ERR_ARG,
                fmt::format("old rank {} never existed: epoch {} of job '{}' was written by {} "
                            "ranks (0 to {})",
                            old_rank, epoch(), job_, nranks(), nranks() - 1));
  }
  OldRank& o = old_[static_cast<std::size_t>(old_rank)];
  if (!o.described) {
    const DrainFileHeader& h = file_of(old_rank).header();
    o.regions_offset = h.regions_offset;
    o.copy_bytes = h.copy_bytes;
    o.entries = h.entries;
    o.described = true;
  }
  return o;
}

std::uint64_t EpochReader::bytes_of(int old_rank, const std::string& region) {
  const OldRank& o = described(old_rank);
  const auto it = std::find_if(o.entries.begin(), o.entries.end(),
                               [&](const RegionEntry& e) { return e.name == region; });
  if (it == o.entries.end()) {
    std::vector<std::string> names;
    for (const auto& e : o.entries)
      names.push_back(fmt::format("'{}'", e.name));
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("old rank {} of job '{}' (epoch {}) has no region or private object "
                            "'{}'; it has {}",
                            old_rank, job_, epoch(), region,
                            names.empty() ? std::string("none")
                                          : fmt::format("{}", fmt::join(names, ", "))));
  }
  return it->bytes;
}

EpochReader::CopyRange EpochReader::locate(const Piece& piece) {
  const std::uint64_t size = bytes_of(piece.old_rank, piece.region);
  if (piece.offset > size || piece.bytes > size - piece.offset) {
    throw Error(
        SKT_ERR_ARG,
        fmt::format("bytes {} to {} of '{}' of old rank {} of job '{}': it has {}", piece.offset,
                    piece.offset + piece.bytes, piece.region, piece.old_rank, job_, size));
  }
  if (piece.out == nullptr && piece.bytes > 0) {
    throw Error(SKT_ERR_ARG,
                fmt::format("skt_epoch_read: the buffer of a piece of '{}' is NULL", piece.region));
  }
  const OldRank& o = old_[static_cast<std::size_t>(piece.old_rank)];
  const auto e = std::find_if(o.entries.begin(), o.entries.end(),
                              [&](const RegionEntry& x) { return x.name == piece.region; });
  return {piece.old_rank, (e->staged ? 0 : o.regions_offset) + e->offset + piece.offset,
          piece.bytes, piece.out};
}

void EpochReader::read(std::span<const Piece> pieces, const std::string& bad_arguments) {
  Effects& effects = *effects_;
  std::vector<CopyRange> remote;
  effects.agree([&] {
    if (!bad_arguments.empty()) throw Error(SKT_ERR_ARG, bad_arguments);
    for (const Piece& piece : pieces) {
      const CopyRange range = locate(piece);
      const int holder = old_[static_cast<std::size_t>(range.old_rank)].holder;
      if (holder < 0) {
        try {
          file_of(range.old_rank).read_copy(range.offset, range.bytes, range.out);
        } catch (const Error&) {
          throw;
        } catch (const std::runtime_error& error) {
          throw unreadable(range.old_rank, error);
        }
      } else if (holder == rank_) {
        std::memcpy(range.out, copies_.at(range.old_rank) + range.offset, range.bytes);
      } else {
        remote.push_back(range);
      }
    }
  });
  exchange(remote);
}

void EpochReader::exchange(const std::vector<CopyRange>& remote) {
  // Rounds of at most kRoundBytes asked by each rank; a larger range is cut.
  std::vector<std::vector<CopyRange>> rounds(1);
  std::uint64_t in_round = 0;
  for (CopyRange range : remote) {
    while (range.bytes > 0) {
      if (in_round == kRoundBytes) {
        rounds.emplace_back();
        in_round = 0;
      }
      const std::uint64_t take = std::min(range.bytes, kRoundBytes - in_round);
      rounds.back().push_back({range.old_rank, range.offset, take, range.out});
      range.offset += take;
      range.out += take;
      range.bytes -= take;
      in_round += take;
    }
  }
  const auto count = static_cast<std::int64_t>(rounds.size());
  const std::int64_t all_rounds = effects_->all_max(count);
  rounds.resize(static_cast<std::size_t>(all_rounds));
  const auto ranks = static_cast<std::size_t>(size_);
  for (const auto& round : rounds) {
    // What each rank asks each holder: (old rank, offset, bytes), in the order it asks.
    std::vector<std::vector<std::uint64_t>> asks(ranks);
    std::vector<int> answer_bytes(ranks, 0);
    for (const CopyRange& r : round) {
      const auto holder =
          static_cast<std::size_t>(old_[static_cast<std::size_t>(r.old_rank)].holder);
      asks[holder].insert(asks[holder].end(),
                          {static_cast<std::uint64_t>(r.old_rank), r.offset, r.bytes});
      answer_bytes[holder] += static_cast<int>(r.bytes);
    }
    std::vector<int> ask_counts(ranks), asked_counts(ranks);
    std::vector<std::uint64_t> ask_flat;
    for (std::size_t h = 0; h < ranks; ++h) {
      ask_counts[h] = static_cast<int>(asks[h].size());
      ask_flat.insert(ask_flat.end(), asks[h].begin(), asks[h].end());
    }
    SKT_MPI(
        MPI_Alltoall(ask_counts.data(), 1, MPI_INT, asked_counts.data(), 1, MPI_INT, comm_.get()));
    int total_asked = 0;
    const std::vector<int> ask_at = displacements(ask_counts, nullptr);
    const std::vector<int> asked_at = displacements(asked_counts, &total_asked);
    std::vector<std::uint64_t> asked(static_cast<std::size_t>(total_asked));
    SKT_MPI(MPI_Alltoallv(ask_flat.data(), ask_counts.data(), ask_at.data(), MPI_UINT64_T,
                          asked.data(), asked_counts.data(), asked_at.data(), MPI_UINT64_T,
                          comm_.get()));
    // Answer in the order asked: the copies this rank holds were checked when opened.
    std::vector<int> send_counts(ranks, 0), send_at(ranks);
    std::vector<std::byte> answers;
    effects_->agree([&] {
      for (std::size_t p = 0; p < ranks; ++p) {
        send_at[p] = static_cast<int>(answers.size());
        for (int i = asked_at[p]; i < asked_at[p] + asked_counts[p]; i += 3) {
          const auto old_rank = static_cast<int>(asked[static_cast<std::size_t>(i)]);
          const std::uint64_t offset = asked[static_cast<std::size_t>(i) + 1];
          const std::uint64_t bytes = asked[static_cast<std::size_t>(i) + 2];
          const auto copy = copies_.find(old_rank);
          if (copy == copies_.end() ||
              offset + bytes > old_[static_cast<std::size_t>(old_rank)].copy_bytes) {
            throw Error(SKT_ERR_INTERNAL,
                        fmt::format("rank {} asked this rank for bytes {} to {} of old rank {}'s "
                                    "copy, which it does not hold",
                                    p, offset, offset + bytes, old_rank));
          }
          const std::size_t at = answers.size();
          answers.resize(at + bytes);
          std::memcpy(answers.data() + at, copy->second + offset, bytes);
        }
        send_counts[p] = static_cast<int>(answers.size()) - send_at[p];
      }
    });
    int total = 0;
    const std::vector<int> receive_at = displacements(answer_bytes, &total);
    std::vector<std::byte> received(static_cast<std::size_t>(total));
    SKT_MPI(MPI_Alltoallv(answers.data(), send_counts.data(), send_at.data(), MPI_BYTE,
                          received.data(), answer_bytes.data(), receive_at.data(), MPI_BYTE,
                          comm_.get()));
    // Each holder's answers come in the order this rank asked them.
    std::vector<int> next = receive_at;
    for (const CopyRange& r : round) {
      const auto holder =
          static_cast<std::size_t>(old_[static_cast<std::size_t>(r.old_rank)].holder);
      std::memcpy(r.out, received.data() + next[holder], r.bytes);
      next[holder] += static_cast<int>(r.bytes);
    }
  }
}

}  // namespace skt
