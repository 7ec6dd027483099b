#include "daemon/policy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "daemon/cli.hpp"

namespace skt::run {

bool launcher_saw_a_process_end(const std::deque<std::string>& last_errors) {
  return std::any_of(last_errors.begin(), last_errors.end(), [](const std::string& line) {
    return line.find("noticed that process rank") != std::string::npos ||
           line.find("process returned") != std::string::npos ||
           line.find("exited on signal") != std::string::npos;
  });
}

std::string launcher_reason(const std::deque<std::string>& last_errors) {
  std::vector<std::vector<std::string>> messages(1);
  for (const auto& line : last_errors) {
    const bool rule = line.size() > 10 && line.find_first_not_of('-') == std::string::npos;
    if (rule) {
      if (!messages.back().empty()) messages.emplace_back();
    } else if (line.find_first_not_of(" \t") != std::string::npos) {
      messages.back().push_back(line);
    }
  }
  if (messages.back().empty()) messages.pop_back();
  std::string out;
  if (messages.empty()) return out;
  const auto& last = messages.back();
  for (std::size_t i = 0; i < std::min<std::size_t>(last.size(), 6); ++i)
    out += "\n    " + last[i];
  if (last.size() > 6) out += fmt::format("\n    (and {} more lines, above)", last.size() - 6);
  return out;
}

bool never_ran(const Outcome& out) {
  return !out.started && !out.hung && !out.dead_node &&
         !launcher_saw_a_process_end(out.last_errors);
}

bool launcher_refused(const Outcome& out) {
  return never_ran(out) && out.launcher_signal == 0 && !launcher_reason(out.last_errors).empty();
}

Action next_action(const JobFacts& job, const Outcome& out) {
  const auto ends = [](Step step, int code) { return Action{step, code, {}, 0, {}}; };
  if (job.signal != 0) return ends(Step::stop, 128 + job.signal);
  if (out.code == 0 && !out.hung && !out.dead_node) return ends(Step::succeed, 0);
  // Every context had ended (one that finishes removes its checkpoint), so a relaunch would do
  // the work again; and whether the program succeeded is its exit code, which nobody saw.
  if (out.stuck_after_work) return ends(Step::stuck_after_work, kExitStuckAfterWork);
  if (out.code == 3 && job.fresh_if_unrecoverable && job.attempt < job.max_restarts)
    return ends(Step::start_afresh, 0);
  if (out.code == 2 || out.code == 3 || out.code == 4) return ends(Step::program_refused, out.code);
  // The relaunch restored the checkpoint the run before stalled after, and stalled again before
  // the next: a deadlock of the program, or work longer than the bound, repeats at every
  // relaunch, which would spend the allocation on the same hang until --max-restarts.
  if (out.stalled_at && job.stalled_before == out.stalled_at)
    return ends(Step::stalled_again, kExitStalledAgain);
  if (!out.dead) return ends(Step::probe, 0);
  // A launch failure (the launcher's refusal, a host it cannot reach, a program missing on a
  // node) would fail again: not a crash to retry. A dead node is replaced like any other.
  if (launcher_refused(out) && out.dead->empty())
    return ends(Step::launch_failed, kExitLaunchFailed);
  if (job.attempt >= job.max_restarts) return ends(Step::restart_budget, kExitRestartBudget);
  Replacement unchanged;
  unchanged.ranklist = job.ranklist;
  unchanged.spares_left = job.spares;
  Action relaunch{Step::relaunch, 0, unchanged, 0, {}};
  if (!out.dead->empty()) {
    try {
      relaunch.replacement =
          place_after_losses(job.ranklist, *out.dead, job.spares, job.continue_on_survivors,
                             job.group_of_rank, job.room);
    } catch (const OutOfSpares& e) {
      Action none = ends(Step::out_of_spares, kExitOutOfSpares);
      none.why = e.what();
      return none;
    }
  }
  if (job.backoff > 0)
    relaunch.wait = job.backoff * static_cast<double>(1 << std::min(job.attempt, 20));
  return relaunch;
}

}  // namespace skt::run
