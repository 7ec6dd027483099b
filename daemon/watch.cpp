#include "daemon/watch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "libselfckpt/internal/call_order.hpp"
#include "libselfckpt/internal/monitor_wire.hpp"
#include "libselfckpt/internal/names.hpp"

namespace skt::run {

std::optional<Heard> parse_heard(std::string_view line) {
  const auto parsed = skt::wire::parse_line(line);
  if (!parsed) return std::nullopt;
  const skt::wire::Line& l = *parsed;
  Heard h;
  h.job = l.job;
  h.rank = l.rank;
  h.launch = l.launch;
  h.pid = l.pid;
  h.kind = l.kind;
  h.epoch = l.epoch;
  // Added later, so optional: the process of a context, or the open contexts of a process.
  const bool of_process = h.kind == "live" || h.kind == "finalize" || h.kind == "exit";
  h.process = l.extra && !of_process ? *l.extra : h.rank;
  if (l.extra && of_process) h.open_contexts = l.extra;
  // A call's name, printed in skt-run's log: anything else a datagram carries there is dropped.
  if (h.kind == "beat" && std::all_of(l.call.begin(), l.call.end(),
                                      [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; })) {
    h.waiting_in = l.call;
  }
  return h;
}

Watchdog::Watchdog(std::string job, int launch, int ranks, WatchLimits limits, double cadence,
                   double started)
    : job_(std::move(job)),
      launch_(launch),
      limits_(limits),
      cadence_(cadence),
      started_at_(started),
      ranks_(ranks),
      last_progress_(started) {}

bool Watchdog::ours(const Heard& h) const {
  return skt::job_covers(job_, h.job) && h.launch == launch_ && h.rank < ranks_;
}

void Watchdog::heard(const Heard& h, double now) {
  if (!ours(h)) return;
  started_.insert(h.rank);
  if (h.open_contexts == 0) forget_contexts_of(h.rank);
  if (h.kind == "exit") {
    // A process that ended is gone, not silent, whatever its contexts said.
    forget_contexts_of(h.rank);
    exits_[h.rank] = static_cast<int>(h.epoch);
    last_exit_ = now;
    processes_.erase(h.rank);
  } else if (h.kind == "finalize") {
    if (finalizing_.insert(h.rank).second) last_finalize_ = now;
    processes_.erase(h.rank);
  } else if (h.kind == "live") {
    // The process's beat may cross its finalize or exit report on the way.
    if (finalizing_.count(h.rank) == 0 && exits_.count(h.rank) == 0) processes_[h.rank] = now;
  } else if (h.kind == "bye") {
    voices_.erase({h.job, h.rank});
    said_bye_.insert({h.job, h.rank});
  } else if (said_bye_.count({h.job, h.rank}) == 0) {
    // Any other word of a context says it is open, its hello lost or not.
    voices_[{h.job, h.rank}] = Voice{now, h.process, h.waiting_in};
  }
  if (h.kind == "recovered" || h.kind == "recovered-storage") {
    if (!restored_ || h.epoch > *restored_) restored_ = h.epoch;
    restored_from_storage_ = h.kind == "recovered-storage";
    if (!restored_at_) restored_at_ = now;
    last_progress_ = std::max(last_progress_, now);
  } else if (h.kind == "commit" && commits_.insert({h.job, h.epoch}).second) {
    // Every rank reports the commit; the first report of an epoch is the commit.
    if (last_commit_ >= 0) cadence_ = std::max(cadence_, now - last_commit_);
    last_commit_ = now;
    last_progress_ = now;
  } else if (h.kind == "hello" || h.kind == "bye") {
    last_progress_ = std::max(last_progress_, now);
  }
}

void Watchdog::forget_contexts_of(int process) {
  std::erase_if(voices_, [&](const auto& voice) { return voice.second.process == process; });
}

bool Watchdog::process_beats(int process, double now) const {
  const auto it = processes_.find(process);
  return it != processes_.end() && now - it->second <= limits_.silence;
}

void Watchdog::pardon(double now) {
  for (auto& voice : voices_)
    voice.second.last = std::max(voice.second.last, now);
  for (auto& process : processes_)
    process.second = std::max(process.second, now);
  last_progress_ = std::max(last_progress_, now);
  started_at_ = std::max(started_at_, now);
  last_finalize_ = std::max(last_finalize_, now);
}

double Watchdog::launcher_bound() const {
  return limits_.progress_fixed.value_or(limits_.progress_floor);
}

std::optional<double> Watchdog::progress_bound() const {
  if (limits_.progress_fixed) return limits_.progress_fixed;
  if (cadence_ <= 0) return std::nullopt;
  return std::max(limits_.progress_floor, limits_.progress_factor * cadence_);
}

bool Watchdog::every_rank_finalizing_or_exited() const {
  for (int rank = 0; rank < ranks_; ++rank) {
    if (finalizing_.count(rank) == 0 && exits_.count(rank) == 0) return false;
  }
  return true;
}

std::optional<std::string> Watchdog::stuck_in_finalize(double now) const {
  int stuck = -1;
  for (int rank = 0; rank < ranks_ && stuck < 0; ++rank) {
    if (exits_.count(rank) == 0 && finalizing_.count(rank) != 0) stuck = rank;
  }
  const double since = std::max(last_finalize_, last_exit_);
  if (!every_rank_finalizing_or_exited() || stuck < 0 || now - since <= launcher_bound())
    return std::nullopt;
  return fmt::format(
      "every rank reached MPI_Finalize {:.1f} s ago, but rank {} has not left it within {:.1f} s "
      "(a frozen MPI daemon or node?): its exit code is unknown",
      now - since, stuck, launcher_bound());
}

std::optional<std::string> Watchdog::stuck_after_work(double now) const {
  if (contexts_open()) return std::nullopt;  // a silent context is a hang: relaunched
  if (auto why = stuck_in_finalize(now)) return why;
  for (const auto& [rank, last] : processes_) {
    if (now - last > limits_.silence) {
      return fmt::format(
          "rank {} has been silent for {:.1f} s since its last selfckpt context ended, before "
          "MPI_Finalize (stopped, or its node frozen): its exit code is unknown",
          rank, now - last);
    }
  }
  return std::nullopt;
}

std::optional<std::string> Watchdog::hung(double now) const {
  if (auto why = silent_or_unstarted(now)) return why;
  return not_getting_on(now);
}

std::optional<std::uint64_t> Watchdog::stalled_at(double now) const {
  if (silent_or_unstarted(now) || !not_getting_on(now)) return std::nullopt;
  // A stall is of ranks that run: one that missed its last beats may be stopping (a bound shorter
  // than --silence finds a stopped rank first), and a stopped rank is no deadlock of the program.
  constexpr double kMissedBeats = 3.0 * skt::wire::kBeatMilliseconds / 1000;
  for (const auto& [key, voice] : voices_) {
    if (now - voice.last > kMissedBeats) return std::nullopt;
  }
  std::uint64_t reached = restored_.value_or(0);
  for (const auto& commit : commits_)
    reached = std::max(reached, commit.second);
  return reached;
}

std::string Watchdog::calls_waited_in() const {
  std::vector<std::string> calls(static_cast<std::size_t>(ranks_), "none");
  bool any = false;
  for (const auto& [key, voice] : voices_) {
    if (voice.waiting_in.empty() || voice.process >= ranks_) continue;
    calls[static_cast<std::size_t>(voice.process)] = voice.waiting_in;
    any = true;
  }
  return any ? ranks_by_label(calls) : std::string();
}

std::optional<std::string> Watchdog::silent_or_unstarted(double now) const {
  if (contexts_open()) {
    if (auto why = stuck_in_finalize(now)) return why;
  }
  for (const auto& [key, voice] : voices_) {
    if (now - voice.last > limits_.silence && !process_beats(voice.process, now)) {
      return fmt::format("rank {} has been silent for {:.1f} s (stopped, or its node frozen)",
                         key.second, now - voice.last);
    }
  }
  // A process whose contexts skt-run never heard of (every word of theirs lost), or whose
  // contexts ended while others' are open: silent, it holds up the job all the same.
  if (contexts_open()) {
    for (const auto& [rank, last] : processes_) {
      if (now - last > limits_.silence) {
        return fmt::format("rank {} has been silent for {:.1f} s (stopped, or its node frozen)",
                           rank, now - last);
      }
    }
  }
  if (now - started_at_ > limits_.startup && static_cast<int>(started_.size()) < ranks_) {
    int first = 0;
    while (started_.count(first) != 0)
      ++first;
    return fmt::format(
        "{} of the {} ranks (rank {} first) did not start within {:.0f} s (a rank starts when it "
        "makes its selfckpt context: a program that takes longer to get there needs a larger "
        "--startup)",
        ranks_ - static_cast<int>(started_.size()), ranks_, first, limits_.startup);
  }
  return std::nullopt;
}

std::optional<std::string> Watchdog::not_getting_on(double now) const {
  const auto bound = progress_bound();
  if (!bound || voices_.empty() || now - last_progress_ <= *bound) return std::nullopt;
  const std::string calls = calls_waited_in();
  return fmt::format(
      "no checkpoint for {:.1f} s, beyond its bound of {:.1f} s ({}): every rank beats, but "
      "none gets on (a deadlock?){}",
      now - last_progress_, *bound,
      limits_.progress_fixed
          ? std::string("--hang-timeout")
          : fmt::format("{:.0f} x the {:.1f} s seen between checkpoints, at least {:.0f} s",
                        limits_.progress_factor, cadence_, limits_.progress_floor),
      calls.empty()
          ? std::string()
          : fmt::format("; the selfckpt calls the ranks wait in for the others: {} (ranks that "
                        "wait in one while others are in the program's own communication are a "
                        "deadlock of the program: every rank makes the same selfckpt calls in "
                        "the same order)",
                        calls));
}

std::optional<std::string> Watchdog::launcher_overdue(double now) const {
  if (!every_rank_exited() || now - last_exit_ <= launcher_bound()) return std::nullopt;
  return fmt::format(
      "every rank exited {:.1f} s ago, but the launcher did not end within {:.1f} s (frozen?)",
      now - last_exit_, launcher_bound());
}

std::optional<int> Watchdog::exit_code() const {
  if (!every_rank_exited()) return std::nullopt;
  return failed_exit().value_or(0);
}

std::optional<int> Watchdog::failed_exit() const {
  for (const auto& [rank, code] : exits_) {
    if (code != 0) return code;
  }
  return std::nullopt;
}

std::size_t Watchdog::contexts_committed() const {
  std::set<std::string> jobs;
  for (const auto& commit : commits_)
    jobs.insert(commit.first);
  return jobs.size();
}

}  // namespace skt::run
