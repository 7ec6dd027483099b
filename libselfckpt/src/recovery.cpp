// Session's recovery (skt_recover): what each rank finds of its checkpoint, what the ranks decide
// together (decision.hpp), the group each joins and the store it sets up, the protocol's restore,
// and the storage level where memory cannot serve; then what the recovery cost, phase by phase.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "libselfckpt/src/session.hpp"

namespace skt {

namespace {

// A recovery's phases on one rank, for its log line.
std::string describe_phases(const skt_recovery& r) {
  constexpr double kMiB = 1 << 20;
  return fmt::format(
      "attach or create {:.3f} s, join {:.3f} s, verify {:.3f} s ({:.1f} MiB), fetch {:.3f} s, "
      "decode {:.3f} s ({:.1f} MiB rebuilt), restore {:.3f} s ({:.1f} MiB), agree {:.3f} s",
      r.attach, r.join, r.verify, static_cast<double>(r.verified_bytes) / kMiB, r.fetch, r.decode,
      static_cast<double>(r.rebuilt_bytes) / kMiB, r.restore,
      static_cast<double>(r.restored_bytes) / kMiB, r.agree);
}

}  // namespace

std::optional<CheckpointInfo> Session::read_checkpoint_info(const StreamLayout& declared) const {
  const Config& config = job_.config();
  const SegmentHeader& header = checkpoint_.segment.header();
  if (header.nranks != job_.nranks()) {
    throw Error(
        SKT_ERR_MISMATCH,
        fmt::format("the checkpoint of job '{}' was written by {} ranks, this run has {}; "
                    "relaunch with the same number of ranks, go on with this one under a tag "
                    "of its own that reads the job's epoch (skt_epoch_open), or remove "
                    "the job's segments (skt-shm clean --job {})",
                    config.job, header.nranks, job_.nranks(), config.job));
  }
  CheckpointInfo info;
  if (!decode_checkpoint_info(checkpoint_.segment.base(), &info)) {
    job_.log().warn(
        "this rank's checkpoint description is unreadable (a CRC mismatch: corrupted, or never "
        "written by a launch stopped while it created the segment): treated as lost");
    return std::nullopt;
  }
  const bool same_settings =
      info.mode == static_cast<std::uint32_t>(config.mode) &&
      info.scheme == static_cast<std::uint32_t>(config.scheme) &&
      info.requested_group_size == static_cast<std::uint32_t>(config.group_size) &&
      (info.group_size == 1 || info.parity == static_cast<std::uint32_t>(config.parity)) &&
      info.chunk_bytes == config.chunk_bytes;
  if (!same_settings) {
    throw Error(
        SKT_ERR_MISMATCH,
        fmt::format("the checkpoint of job '{}' was written with mode {}, group size {}, "
                    "scheme {}, parity {}, chunk size {}; the configuration now says mode "
                    "{}, group size {}, scheme {}, parity {}, chunk size {}. Relaunch with "
                    "the same settings, or remove the job's segments (skt-shm clean --job "
                    "{}) to start afresh",
                    config.job, mode_name(static_cast<Mode>(info.mode)), info.requested_group_size,
                    enc::scheme_name(static_cast<enc::Scheme>(info.scheme)), info.parity,
                    info.chunk_bytes, mode_name(config.mode), config.group_size,
                    enc::scheme_name(config.scheme), config.parity, config.chunk_bytes,
                    config.job));
  }
  if (info.layout_hash != declared.hash) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the regions declared now ({} bytes in {} regions and private "
                            "objects) differ from those of the checkpoint ({} bytes); a relaunch "
                            "must declare the same regions, with the same names and sizes, and "
                            "protect the same private objects",
                            declared.workspace_bytes(), declared.entries.size(),
                            info.stage_bytes + info.regions_bytes));
  }
  return info;
}

Finding Session::inspect_checkpoint() {
  Finding f;
  const Arena& arena = declarations_.arena();
  const std::size_t stage_bytes = declarations_.staged_bytes();
  const StreamLayout declared = StreamLayout::plan(
      declarations_.entries(), stage_bytes, arena.regions_bytes(), job_.config().chunk_bytes);
  f.layout_hash = declared.hash;
  f.stage_bytes = stage_bytes;
  f.regions_bytes = arena.regions_bytes();
  if (job_.ephemeral()) return f;
  FindResult result =
      find_segment(job_.identity(SegmentKind::checkpoint), job_.config().attach_wait_seconds);
  for (const auto& why : result.skipped)
    job_.log().debug("left a segment alone: {}", why);
  if (!result.segment) return f;
  job_.refuse_stale(SegmentKind::checkpoint);
  checkpoint_.segment = std::move(*result.segment);
  const std::optional<CheckpointInfo> info = read_checkpoint_info(declared);
  if (!info) return f;
  // Judged once every rank's finding is in (restore): whether the segments hold a checkpoint.
  f.other_command = job_.another_command(info->command) ? 1 : 0;
  const auto state = read_control(checkpoint_.segment.base());
  if (!state) {
    job_.log().warn("this rank's control block is unreadable: treated as lost");
    return f;
  }
  if (!arena.found()) {
    job_.log().warn(
        "the checkpoint segment survived but the workspace did not: this rank is treated as lost");
    return f;
  }
  f.valid = 1;
  f.state = *state;
  f.groups = static_cast<std::int32_t>(info->groups);
  f.group = static_cast<std::int32_t>(info->group);
  f.member = static_cast<std::int32_t>(info->member);
  f.group_size = static_cast<std::int32_t>(info->group_size);
  f.lineage = info->lineage;
  for (std::uint32_t i = 0; i < info->group_size; ++i) {
    f.members[i] = info->members[i];
    f.recorded_layouts[i] = info->member_layouts[i];
  }
  checkpoint_.info = *info;
  return f;
}

std::vector<Finding> Session::judge_findings(Finding& mine,
                                             std::optional<std::int64_t>& completed) {
  const Config& config = job_.config();
  const bool first = job_.rank() == 0;
  std::vector<Finding> findings = job_.effects().gather_values(mine);
  for (const int r : stale_ranks(findings)) {
    if (first) {
      job_.log().warn(
          "rank {} on node {} holds segments of job '{}' from an earlier start of it than the "
          "other ranks' (the node was out of reach while the job was removed and started again "
          "under its tag): they are no checkpoint of this run, and the rank is rebuilt from its "
          "group as if lost",
          r, job_.node_of(r), config.job);
    }
    findings[static_cast<std::size_t>(r)].valid = 0;
  }
  mine = findings[static_cast<std::size_t>(job_.rank())];
  if (std::any_of(findings.begin(), findings.end(),
                  [](const Finding& f) { return f.other_command; })) {
    // Restored into this computation, that one's checkpoint gives a wrong result. What a run of
    // it left before its first checkpoint is nobody's: taken as nothing, as this command's is.
    const bool held = holds_epoch(findings);
    job_.effects().agree([&] {
      if (held && mine.other_command)
        throw job_.another_command_error("skt-shm clean --job " + config.job);
    });
    if (first) {
      job_.log().warn(
          "job '{}' has segments of another command, or from another directory, than this one, "
          "which hold no checkpoint (its run stopped before its first): they are taken as nothing",
          config.job);
    }
  }
  // An earlier run completed the job and was ended while removing its segments: what is left of
  // them is no checkpoint, and the job starts again as after removals that finished.
  completed = completed_epoch(findings);
  if (completed) {
    if (first) {
      job_.log().warn(
          "job '{}' completed after epoch {} in an earlier run, which was ended while removing "
          "its segments: what is left of them is removed, and the job starts afresh",
          config.job, *completed);
    }
    for (auto& f : findings)
      f.valid = 0;
    storage_.remove_drained_epochs();
  }
  return findings;
}

std::optional<MemoryShortfall> Session::admit_misplaced(const std::vector<Finding>& findings) {
  const Config& config = job_.config();
  const std::vector<Misplaced> misplaced = gather_misplaced(job_);
  if (config.restart == 0 && !misplaced.empty()) {
    job_.effects().agree([&] {
      const Misplaced& m = misplaced.front();
      throw Error(SKT_ERR_STALE,
                  fmt::format("node {} holds segments of job '{}' rank {} from an earlier run, but "
                              "SKT_RESTART=0 says this is a first launch; remove the old segments "
                              "with 'skt-shm clean --job {}' or use a new job tag",
                              job_.node_of(m.holder), config.job, m.rank, config.job));
    });
  }
  // What is left on the wrong nodes is no checkpoint this launch or a later one could use (an
  // older start's, or of ranks that found their own in place): establish removes it, as the memory
  // it holds may be what the new segments need.
  misplaced_ = misplaced;
  // A rank that found nothing of its own where this launch placed it, while its checkpoint lies on
  // another node of this launch: the ranks were placed otherwise than in the run that wrote it
  // (swapped between nodes). Refused before anything is rebuilt or removed, with every segment
  // kept: the groups might rebuild those ranks, but on the wrong nodes and from less than there
  // is, and beyond their tolerance the checkpoint would be lost for good; a relaunch that places
  // them right restores it whole.
  // With drains, storage serves instead where it holds an epoch as new as theirs (a requeued job
  // that lost the first node of its list shifts every rank), and nothing is lost.
  const std::vector<Misplaced> needed = needed_elsewhere(findings, misplaced);
  if (needed.empty()) return std::nullopt;
  const std::string refusal = misplacement_refusal(needed, job_.nodes(), config.job);
  if (config.drain_dir.empty()) {
    throw AgreedError(SKT_ERR_MISMATCH, fmt::format("{}. Nothing was changed or removed", refusal));
  }
  MemoryShortfall shortfall{refusal, 0};
  for (const auto& m : needed)
    shortfall.misplaced_epoch = std::max(shortfall.misplaced_epoch, m.committed);
  return shortfall;
}

std::optional<MemoryShortfall> Session::restore_from_memory(const Finding& mine,
                                                            const std::vector<Finding>& findings,
                                                            RestorePlan& setup) {
  try {
    job_.effects().agree([&] { setup = plan_restore(findings, job_.nodes(), job_.config()); });
    const bool survivor = !setup.fresh() && mine.valid != 0;
    const int group =
        establish(setup, survivor ? std::optional<ControlState>(mine.state) : std::nullopt);
    std::function<void()> prepare;
    if (!survivor && !setup.fresh()) prepare = [&] { prepare_checkpoint(setup); };
    const RestoreInputs inputs{setup.candidates, survivor,          setup.shapes,      group,
                               job_.nodes(),     job_.config().job, std::move(prepare)};
    epoch_ = protocol_->restore(inputs);
    return std::nullopt;
  } catch (const AgreedError& e) {
    // More losses than a group tolerates: storage may serve instead.
    if (e.code() != SKT_ERR_UNRECOVERABLE || job_.config().drain_dir.empty()) throw;
    return MemoryShortfall{e.what(), 0};
  }
}

bool Session::restore_from_storage(const std::vector<Finding>& findings,
                                   const MemoryShortfall& shortfall) {
  const std::optional<std::uint64_t> epoch = storage_.restore(findings, shortfall, *this);
  if (!epoch) return false;
  declarations_.restore_private_objects(store_.stage);
  // The memory level anew: W, B and the checksums of the epoch, as a checkpoint writes them.
  protocol_->checkpoint(*epoch, nullptr);
  epoch_ = *epoch;
  return true;
}

int Session::join_afresh(const RestorePlan& setup) {
  const int group = establish(setup, std::nullopt);
  protocol_->restore(RestoreInputs{
      setup.candidates, false, setup.shapes, group, job_.nodes(), job_.config().job, {}});
  return group;
}

void Session::load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) {
  const StreamLayout& layout = store_.layout;
  Arena& arena = declarations_.arena();
  const std::uint64_t regions_at = layout.copy_regions_offset();
  const std::uint64_t end = offset + n;
  // B is the stage, a gap to the next 64 bytes, then the regions' area.
  const std::uint64_t stage_end = std::min<std::uint64_t>(end, layout.stage_bytes);
  if (offset < stage_end) std::memcpy(arena.stage() + offset, bytes, stage_end - offset);
  const std::uint64_t from = std::max(offset, regions_at);
  const std::uint64_t to = std::min<std::uint64_t>(end, regions_at + layout.regions_bytes);
  if (from < to)
    std::memcpy(arena.regions() + (from - regions_at), bytes + (from - offset), to - from);
}

std::uint64_t Session::restore() {
  const double start = now_seconds();
  clocks_.segments = 0;
  Finding mine;
  job_.effects().agree([&] {
    declarations_.seal();
    mine = inspect_checkpoint();
    clocks_.segments += now_seconds() - start;
  });
  checkpoint_.declared_layout_hash = mine.layout_hash;
  std::optional<std::int64_t> completed;
  const std::vector<Finding> findings = judge_findings(mine, completed);
  std::optional<MemoryShortfall> shortfall = admit_misplaced(findings);
  // The memory level first; when it cannot serve (more losses than a group tolerates, or nothing
  // left in memory at all), the newest epoch that storage holds completely.
  RestorePlan setup;
  if (!shortfall) shortfall = restore_from_memory(mine, findings, setup);
  const bool fresh = !shortfall && setup.fresh();
  bool from_storage = false;
  if (shortfall || (fresh && !completed && !job_.config().drain_dir.empty())) {
    from_storage = restore_from_storage(findings, shortfall.value_or(MemoryShortfall{}));
  }
  job_.log().set_epoch(epoch_);
  if ((from_storage || !fresh) && !declarations_.arena().at_fixed_addresses()) {
    job_.log().warn(
        "this rank's workspace could not be placed at the addresses every launch gives it (from "
        "32 TiB: taken, or beyond this machine's address space): pointers that its regions held "
        "into its regions before the relaunch do not point there now");
  }
  recovered_ = true;
  declarations_.fix();
  clocks_.last_recover = now_seconds() - start;
  clocks_.last_verify = protocol_->stats().verify_seconds;
  account_recovery(mine.valid == 0 && !fresh);
  // What a checkpoint cost before the failure, as the survivors recorded it (the slowest's): the
  // checkpoint interval's cost until this launch has measured its own.
  const double recorded = static_cast<double>(protocol_->state().checkpoint_nanoseconds) * 1e-9;
  clocks_.recorded_checkpoint = job_.effects().all_max(recorded);
  if (job_.monitor() != nullptr) job_.monitor()->recovered(epoch_, from_storage);
  clocks_.last_commit = now_seconds();
  report_recovery(mine, setup,
                  from_storage ? Source::storage
                  : fresh      ? Source::none
                               : Source::memory,
                  completed.has_value());
  return epoch_;
}

void Session::report_recovery(const Finding& mine, const RestorePlan& setup, Source source,
                              bool completed) {
  const Config& config = job_.config();
  Logger& log = job_.log();
  if (source == Source::storage) {
    log.job("recovered epoch {} from storage ({}) in {:.3f} s; the memory level is rebuilt", epoch_,
            config.drain_dir, clocks_.last_recover);
    return;
  }
  if (source == Source::none) {
    const CheckpointInfo& info = checkpoint_.info;
    if (job_.rank() == 0) warn_of_other_group_sizes(job_, setup.groups);
    if (config.restart.value_or(0) > 0 && !completed && job_.rank() == 0) {
      log.warn("SKT_RESTART={} but job '{}' has no committed checkpoint: starting afresh",
               *config.restart, config.job);
    }
    log.job("fresh start: {} groups, this rank is member {} of group {} ({} members)",
            setup.groups.groups(), info.member, info.group, info.group_size);
    return;
  }
  const ProtocolStats& s = protocol_->stats();
  if (!s.passed_over.empty() && job_.rank() == 0) {
    log.warn(
        "recovered epoch {}, older than the job's newest: {}; the program goes on from epoch {}",
        epoch_, s.passed_over, epoch_);
  }
  if (s.workspace_blocks_overwritten > 0) {
    log.warn(
        "{} blocks of this rank's workspace differed from epoch {}, which it held when the job "
        "stopped, and were restored from its committed copy: the program wrote into its regions "
        "before skt_recover, which it must not do",
        s.workspace_blocks_overwritten, epoch_);
  }
  log.info(
      "recovered epoch {} in {:.3f} s: {}; {} blocks of the workspace rolled back, {} blocks of "
      "the committed copy written from the workspace, {} items rebuilt from the group; {}",
      epoch_, clocks_.last_recover,
      mine.valid != 0 ? "this rank's memory survived"
      : warm_spare()
          ? "this rank was lost, and took over memory reserved for it on this node (a warm spare)"
          : "this rank was lost",
      s.workspace_blocks_rolled_back, s.copy_blocks_mended, s.chunks_rebuilt,
      describe_phases(clocks_.recovery));
  log_job_recovery();
}

bool Session::warm_spare() {
  return declarations_.arena().from_reserve() || checkpoint_.segment.from_reserve();
}

void Session::log_job_recovery() {
  // Every rank's part, for one line of rank 0's: which ranks were rebuilt, where, and how much
  // came back, where rank 0 alone spoke of its own.
  struct Part {
    double seconds;
    std::uint64_t rebuilt_bytes;
    std::uint64_t rolled_back_blocks;
    std::int32_t lost;
    std::int32_t warm;
  };
  const skt_recovery& recovery = clocks_.recovery;
  const Part mine{recovery.seconds, recovery.rebuilt_bytes,
                  protocol_->stats().workspace_blocks_rolled_back, recovery.lost,
                  warm_spare() ? 1 : 0};
  const std::vector<Part> all = job_.effects().gather_values(mine);
  if (job_.rank() != 0) return;
  std::vector<std::string> rebuilt;
  std::uint64_t bytes = 0, rolled_back = 0;
  int slowest = 0, warm = 0;
  double longest = -1;
  for (int r = 0; r < job_.nranks(); ++r) {
    const Part& p = all[static_cast<std::size_t>(r)];
    if (p.lost != 0) {
      rebuilt.push_back(fmt::format("{} (node {})", r, job_.node_of(r)));
      bytes += p.rebuilt_bytes;
      warm += p.warm;
    }
    rolled_back += p.rolled_back_blocks;
    if (p.seconds > longest) {
      longest = p.seconds;
      slowest = r;
    }
  }
  constexpr double kMiB = 1 << 20;
  job_.log().job(
      "job '{}' recovered epoch {} in {:.3f} s (rank {} the slowest): {}; {} of {} ranks' memory "
      "survived ({} blocks rolled back in all)",
      job_.config().job, epoch_, longest, slowest,
      rebuilt.empty()
          ? std::string("no rank was rebuilt")
          : fmt::format(
                "rank{} {} rebuilt from {} group{}, {:.1f} MiB in all{}",
                rebuilt.size() == 1 ? "" : "s", fmt::join(rebuilt, ", "),
                rebuilt.size() == 1 ? "its" : "their", rebuilt.size() == 1 ? "" : "s",
                static_cast<double>(bytes) / kMiB,
                warm > 0 ? fmt::format(", {} onto memory reserved ahead", warm) : std::string()),
      job_.nranks() - static_cast<int>(rebuilt.size()), job_.nranks(), rolled_back);
}

void Session::account_recovery(bool lost) {
  const ProtocolStats& s = protocol_->stats();
  skt_recovery& r = clocks_.recovery;
  r = skt_recovery{};
  r.seconds = clocks_.last_recover;
  r.attach = clocks_.segments;
  r.join = clocks_.join;
  r.verify = s.verify_seconds;
  r.fetch = s.fetch_seconds;
  r.decode = s.decode_seconds;
  r.restore = s.restore_seconds;
  r.agree =
      std::max(0.0, r.seconds - r.attach - r.join - r.verify - r.fetch - r.decode - r.restore);
  r.verified_bytes = s.verified_bytes;
  r.rebuilt_bytes = s.rebuilt_bytes;
  r.restored_bytes = s.restored_bytes;
  r.lost = lost ? 1 : 0;
}

}  // namespace skt
