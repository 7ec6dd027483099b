#include "libselfckpt/src/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "libselfckpt/src/policy.hpp"

namespace skt {

Session::Session(MPI_Comm comm, const std::string& config_path)
    : job_(comm, config_path), declarations_(job_), storage_(job_) {}

Session::~Session() = default;

void Session::enter(CollectiveCall call) {
  const auto mine = static_cast<std::int32_t>(call);
  std::vector<std::int32_t> calls;
  Monitor* const monitor = job_.monitor();
  // The supervisor learns from the beats which call this rank waits in, should the run stop
  // getting on: the one thing that tells a deadlock of the program from a slow rank.
  if (monitor != nullptr) monitor->waiting_in(call_name(call));
  try {
    const auto gathered = job_.effects().gather_reporting(
        std::as_bytes(std::span(&mine, 1)), job_.config().wait_warning_seconds, [&](double waited) {
          job_.log().warn(
              "this rank has waited {:.1f} s in {} for the other ranks of the context to call it "
              "too: one may still be computing, or be stopped or stuck; or the program calls it "
              "on some ranks only: {}",
              waited, call_name(call), kDecisionsOfTheirOwn);
        });
    for (const auto& theirs : gathered) {
      std::int32_t called = 0;
      std::memcpy(&called, theirs.data(), sizeof called);
      calls.push_back(called);
    }
  } catch (...) {
    if (monitor != nullptr) monitor->waiting_in(nullptr);
    throw;
  }
  if (monitor != nullptr) monitor->waiting_in(nullptr);
  const auto out_of_step = calls_out_of_step(calls);
  if (!out_of_step) return;
  throw AgreedError(
      SKT_ERR_STATE,
      fmt::format("the ranks made different selfckpt calls at epoch {}: {}. Every rank of a "
                  "context makes the same collective calls in the same order (skt_recover, "
                  "skt_checkpoint, skt_checkpoint_dirty, skt_need_checkpoint, skt_finalize with "
                  "discard); {}. None of these calls did anything{}",
                  epoch_, *out_of_step, kDecisionsOfTheirOwn,
                  epoch_ > 0 ? fmt::format(": checkpoint {} stands", epoch_) : ""));
}

void Session::require_recovered(const char* call) const {
  if (!recovered_) {
    throw Error(SKT_ERR_STATE,
                fmt::format("{} before skt_recover: declare the regions, then call skt_recover "
                            "once, then checkpoint",
                            call));
  }
}

std::uint64_t Session::recover() {
  enter(CollectiveCall::recover);
  if (recovered_) throw Error(SKT_ERR_STATE, "skt_recover may be called only once per context");
  try {
    return restore();
  } catch (const AgreedError&) {
    // Every rank refuses together. Each removes what it created before any returns: mpirun kills
    // the others as soon as one exits, and a rank killed before its clean-up would leave segments
    // that make the corrected first launch of the job refuse to start.
    remove_created_segments();
    try {
      job_.effects().barrier();
    } catch (const MpiError&) {
      // A communicator failing here must not hide the refusal every rank agreed on.
    }
    throw;
  }
}

void Session::remove_created_segments() {
  const Arena* arena = declarations_.arena_if_made();
  if (arena != nullptr && arena->sealed() && !arena->found()) declarations_.arena().remove();
  if (checkpoint_.segment && checkpoint_.created) checkpoint_.segment.remove();
}

void Session::checkpoint(const std::vector<DirtyRange>* dirty) {
  const CollectiveCall call =
      dirty != nullptr ? CollectiveCall::checkpoint_dirty : CollectiveCall::checkpoint;
  enter(call);
  require_recovered(call_name(call));
  // Each rank declares ranges of its own: one rank's mistake must stop them all, or the others
  // would wait in the checkpoint for it.
  job_.effects().agree([&] {
    if (dirty == nullptr) return;
    for (const auto& d : *dirty) {
      const RegionEntry* region = store_.layout.region(d.region);
      if (region == nullptr) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: no region named '{}'", d.region));
      }
      if (d.offset > region->bytes || d.length > region->bytes - d.offset) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: bytes {} to {} are outside region '{}' of "
                                "{} bytes",
                                d.offset, d.offset + d.length, d.region, region->bytes));
      }
    }
  });
  const double start = now_seconds();
  // The flush is about to overwrite the copy a drain may still be reading.
  storage_.settle();
  renew_removed_segments();
  const std::uint64_t next = epoch_ + 1;
  // Without declared ranges, the blocks that changed are found by comparing W with B, where the
  // protocol can encode only those (self mode, an exact scheme, not the first checkpoint after a
  // start, a recovery or a failure): the same on every rank, so all take the same path.
  const bool incremental = protocol_->encodes_incrementally();
  std::vector<std::uint64_t> changed;
  clocks_.last_scan = 0;
  if (dirty != nullptr) {
    changed = store_.layout.changed_blocks(store_.geometry, *dirty);
    if (incremental) check_declared(changed, next);
  } else if (incremental && job_.config().find_changes) {
    changed = store_.layout.differing_blocks(store_.geometry, store_.workspace,
                                             store_.copy_of(next), declarations_.settled_static());
    clocks_.last_scan = now_seconds() - start;
  }
  const bool partial = incremental && (dirty != nullptr || job_.config().find_changes);
  protocol_->checkpoint(next, partial ? &changed : nullptr);
  clocks_.last_changed_bytes =
      partial ? StreamLayout::changed_bytes(store_.geometry, store_.workspace, changed)
              : store_.layout.workspace_bytes();
  declarations_.settle_marked();
  // Every rank learns the slowest rank's time, which is what the checkpoint cost.
  const double elapsed = job_.effects().all_max(now_seconds() - start);
  epoch_ = next;
  job_.log().set_epoch(epoch_);
  if (job_.monitor() != nullptr) job_.monitor()->committed(epoch_);
  clocks_.last_checkpoint = elapsed;
  clocks_.last_commit = now_seconds();
  if (storage_.due(epoch_)) {
    storage_.start(epoch_, checkpoint_.info, store_, checkpoint_.declared_layout_hash);
  }
  job_.log().debug("checkpoint {}: encoding {:.4f} s, flushing {:.4f} s of {:.4f} s on this rank",
                   epoch_, protocol_->stats().encode_seconds, protocol_->stats().flush_seconds,
                   now_seconds() - start);
  job_.log().job("checkpoint {} committed in {:.3f} s ({})", epoch_, clocks_.last_checkpoint,
                 partial ? fmt::format("{} of {} bytes of this rank's stream changed{}",
                                       clocks_.last_changed_bytes, store_.layout.workspace_bytes(),
                                       dirty != nullptr ? ", as declared" : "")
                         : std::string("in full"));
}

void Session::check_declared(std::vector<std::uint64_t>& declared, std::uint64_t next) {
  // The ranges are a promise that nothing else changed. A length in elements where bytes were
  // meant, or a write the program forgot, breaks it without a sign: those bytes would come back
  // old after a failure, a wrong answer. So W is compared with B outside them, and what differs is
  // protected all the same. A change missed once is likely to be missed again: from then on every
  // call compares in full, as skt_checkpoint does.
  constexpr std::uint64_t kSamplePeriod = 16;
  const CheckDeclared mode = job_.config().check_declared;
  if (mode == CheckDeclared::off) return;
  DeclaredRanges& ranges = declared_ranges_;
  const bool whole = ranges.untrusted || mode == CheckDeclared::all || ranges.checks == 0;
  const std::uint64_t period = whole ? 1 : kSamplePeriod;
  const std::uint64_t phase = whole ? 0 : ranges.checks % kSamplePeriod;
  ++ranges.checks;
  const double start = now_seconds();
  const auto actual =
      store_.layout.differing_blocks(store_.geometry, store_.workspace, store_.copy_of(next),
                                     declarations_.settled_static(), period, phase);
  clocks_.last_scan = now_seconds() - start;
  const auto missed = store_.layout.undeclared(store_.geometry, store_.workspace, actual, declared);
  if (!missed) return;
  for (std::size_t j = 0; j < declared.size(); ++j)
    declared[j] |= actual[j];
  if (!ranges.untrusted) {
    job_.log().warn(
        "skt_checkpoint_dirty: this rank changed bytes outside the ranges it declared ({} first; "
        "{} bytes in all, counted in whole blocks): they are protected all the same, and from "
        "now on every skt_checkpoint_dirty of this rank compares its whole "
        "workspace, as skt_checkpoint does. Declare every byte changed since the last "
        "checkpoint (an skt_range's offset and length are in bytes), or call skt_checkpoint",
        missed->first, missed->bytes);
  }
  ranges.untrusted = true;
}

void Session::renew_removed_segments() {
  // An ephemeral job's segments are marked for removal from the start (the same on every rank,
  // which the settings check made sure of): no relaunch looks for them.
  if (job_.ephemeral()) return;
  std::vector<std::string> renewed;
  job_.effects().agree([&] {
    if (declarations_.arena().renew_if_removed()) renewed.emplace_back("workspace");
    if (checkpoint_.segment.removed_from_outside()) {
      checkpoint_.segment.renew(job_.config().huge_pages);
      renewed.emplace_back("checkpoint");
    }
  });
  if (renewed.empty()) return;
  job_.log().warn(
      "this rank's {} segment{} of job '{}' on node {} had been removed from outside while the "
      "job ran (ipcrm, skt-shm clean --force, a cleanup script) and would have gone with this "
      "process, and with {} the checkpoint: renewed, with the same contents",
      fmt::join(renewed, " and "), renewed.size() == 1 ? "" : "s", job_.config().job,
      job_.config().node, renewed.size() == 1 ? "it" : "them");
}

bool Session::need_checkpoint() {
  enter(CollectiveCall::need_checkpoint);
  require_recovered("skt_need_checkpoint");
  const double mtbf = job_.config().mtbf_seconds;
  if (mtbf <= 0) {
    throw Error(SKT_ERR_CONFIG,
                "skt_need_checkpoint needs the mean time between failures: set "
                "SKT_MTBF (e.g. 6h) or mtbf in the configuration file");
  }
  // Rank 0's clock decides for everyone; before this launch's first checkpoint, the cost the
  // survivors recorded before a relaunch stands in for it (a recovery's cost is no measure of a
  // checkpoint's), and with neither, checkpointing now measures it.
  int need = 0;
  if (job_.rank() == 0) {
    const double cost =
        clocks_.last_checkpoint > 0 ? clocks_.last_checkpoint : clocks_.recorded_checkpoint;
    need = cost <= 0 || now_seconds() - clocks_.last_commit >= daly_interval(cost, mtbf) ? 1 : 0;
  }
  return job_.effects().broadcast_value(need) != 0;
}

void Session::finalize(bool discard) {
  // Segments of an ephemeral job can never be found again, so they go in any case; only a
  // requested discard waits for every rank, since a rank that has not finished may still need them.
  if (discard) {
    enter(CollectiveCall::finalize);
    storage_.abandon();  // the job is complete: its drained epochs are of no more use
    finish_job(job_.effects(), checkpoint_.segment ? protocol_.get() : nullptr, epoch_);
  } else {
    // A program that stops to resume elsewhere (the end of an allocation) finds its last epoch
    // in storage.
    storage_.finish_in_flight();
  }
  if (discard || job_.ephemeral()) {
    if (declarations_.arena_if_made() != nullptr) declarations_.arena().remove();
    if (checkpoint_.segment) checkpoint_.segment.remove();
    storage_.remove_drained_epochs();
    job_.log().job("removed the segments of job '{}'", job_.config().job);
  } else if (!recovered_) {
    // A launch that never got through recovery (refused settings, a mismatch) committed nothing:
    // what it created holds nothing, and left behind it would make the next first launch of the
    // job refuse to start. What it found stays as it was.
    remove_created_segments();
  }
}

skt_stats Session::stats() const {
  skt_stats s{};
  s.epoch = epoch_;
  const CheckpointInfo& info = checkpoint_.info;
  s.group = static_cast<int>(info.group);
  s.group_size = static_cast<int>(info.group_size);
  s.member = static_cast<int>(info.member);
  s.workspace_bytes = store_.layout.workspace_bytes();
  s.checkpoint_bytes = static_cast<std::size_t>(copies()) * store_.layout.copy_bytes();
  s.checksum_bytes = store_.geometry.parity_bytes();
  if (const Arena* arena = declarations_.arena_if_made()) s.shm_bytes += arena->segment_bytes();
  if (checkpoint_.segment) s.shm_bytes += checkpoint_.segment.header().segment_bytes;
  s.last_checkpoint_seconds = clocks_.last_checkpoint;
  s.last_recover_seconds = clocks_.last_recover;
  if (protocol_) {
    s.last_sent_bytes = protocol_->stats().sent_bytes;
    s.last_flushed_bytes = protocol_->stats().flushed_bytes;
    s.last_verify_seconds = clocks_.last_verify;
  }
  s.last_changed_bytes = clocks_.last_changed_bytes;
  s.last_scan_seconds = clocks_.last_scan;
  return s;
}

}  // namespace skt
