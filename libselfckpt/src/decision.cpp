#include "libselfckpt/src/decision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace skt {

namespace {

using Usable = std::function<bool(int rank)>;

// Groups that lose more members than tolerated when `usable` says who can serve as a source.
std::vector<int> overloaded_groups(const GroupPlan& plan, int tolerance, const Usable& usable) {
  std::vector<int> out;
  for (int g = 0; g < plan.groups(); ++g) {
    const auto& members = plan.members[static_cast<std::size_t>(g)];
    const auto lost =
        std::count_if(members.begin(), members.end(), [&](int r) { return !usable(r); });
    if (lost > tolerance) out.push_back(g);
  }
  return out;
}

std::vector<int> unusable_ranks(int nranks, const Usable& usable) {
  std::vector<int> out;
  for (int r = 0; r < nranks; ++r) {
    if (!usable(r)) out.push_back(r);
  }
  return out;
}

std::string describe_losses(const GroupPlan& plan, int tolerance, const Usable& usable,
                            const std::vector<int>& groups, const std::vector<std::string>& nodes,
                            std::int64_t epoch) {
  std::string text;
  for (const int g : groups) {
    const auto& members = plan.members[static_cast<std::size_t>(g)];
    std::string lost;
    int count = 0;
    for (const int r : members) {
      if (usable(r)) continue;
      lost += fmt::format("{}rank {} on node {}", count == 0 ? "" : ", ", r,
                          nodes[static_cast<std::size_t>(r)]);
      ++count;
    }
    text += fmt::format("{}group {} lost {} of its {} members ({})", text.empty() ? "" : "; ", g,
                        count, members.size(), lost);
  }
  return fmt::format(
      "{} while restoring epoch {}; the scheme tolerates {} lost member{} per "
      "group, so the checkpoint cannot be rebuilt",
      text, epoch, tolerance, tolerance == 1 ? "" : "s");
}

std::string lost_group_report(const GroupPlan& plan, int tolerance, const Usable& usable,
                              const std::vector<std::string>& nodes, std::int64_t epoch) {
  return describe_losses(plan, tolerance, usable, overloaded_groups(plan, tolerance, usable), nodes,
                         epoch);
}

}  // namespace

RecoveryDecision decide_recovery_copies(const std::vector<RankFinding>& findings,
                                        const GroupPlan& plan, int tolerance,
                                        const std::vector<std::string>& nodes, int copies) {
  const int n = static_cast<int>(findings.size());
  RecoveryDecision d;
  std::int64_t target = -1;
  for (const auto& f : findings) {
    if (f.valid) target = std::max(target, f.state.committed);
  }
  if (target <= 0) return d;  // nothing committed: start afresh
  d.epoch = target;
  auto finding = [&](int r) -> const RankFinding& { return findings[static_cast<std::size_t>(r)]; };
  // A rank holds the copy of `target` if it recorded it, or began writing it when some rank had
  // already seen everyone finish it.
  const Usable complete = [&](int r) {
    const auto& s = finding(r).state;
    return finding(r).valid &&
           (s.committed == target || (s.committed == target - 1 && s.encoded == target));
  };
  bool updating = false;  // someone was overwriting a copy that nobody had finished
  bool all_valid = true;
  for (int r = 0; r < n; ++r) {
    updating = updating || (finding(r).valid && finding(r).state.encoded > target);
    all_valid = all_valid && finding(r).valid;
  }
  if (copies == 1 && updating) {
    if (all_valid) {
      // Every workspace still holds the state the update was copying (all ranks were inside the
      // checkpoint call), so finishing the update loses nothing.
      d.source = RecoverySource::redo;
      d.epoch = target + 1;
      return d;
    }
    d.source = RecoverySource::unrecoverable;
    d.reason = fmt::format(
        "a node was lost while checkpoint {} was being written over the only "
        "copy (single mode), whose checksums no longer match any epoch; self "
        "and double modes survive this",
        target + 1);
    return d;
  }
  if (!overloaded_groups(plan, tolerance, complete).empty()) {
    d.source = RecoverySource::unrecoverable;
    d.reason = lost_group_report(plan, tolerance, complete, nodes, target);
    return d;
  }
  d.source = RecoverySource::committed;
  d.rebuild = unusable_ranks(n, complete);
  return d;
}

RecoveryDecision decide_recovery(const std::vector<RankFinding>& findings, const GroupPlan& plan,
                                 int tolerance, const std::vector<std::string>& nodes) {
  const int n = static_cast<int>(findings.size());
  RecoveryDecision d;
  std::int64_t target = -1;
  for (const auto& f : findings) {
    if (f.valid) target = std::max({target, f.state.agreed, f.state.committed});
  }
  if (target <= 0) return d;  // nothing was ever committed anywhere
  d.epoch = target;

  auto finding = [&](int r) -> const RankFinding& { return findings[static_cast<std::size_t>(r)]; };
  // A rank that is two epochs behind holds a leftover from an earlier incarnation: never a source.
  auto current = [&](int r) {
    const auto& s = finding(r).state;
    return finding(r).valid && std::max({s.committed, s.agreed, s.encoded}) >= target - 1;
  };
  const Usable from_copy = [&](int r) {
    return current(r) && finding(r).state.committed == target;
  };
  // W still equals what D encodes only if the rank did not return to the application since.
  const Usable from_workspace = [&](int r) {
    const auto& s = finding(r).state;
    return current(r) && s.encoded == target && s.resumed < target;
  };
  bool every_survivor_committed = true;
  for (int r = 0; r < n; ++r) {
    if (current(r) && !from_copy(r)) every_survivor_committed = false;
  }

  auto choose = [&](RecoverySource source, const Usable& usable) {
    d.source = source;
    d.rebuild = unusable_ranks(n, usable);
    return d;
  };
  if (every_survivor_committed && overloaded_groups(plan, tolerance, from_copy).empty()) {
    return choose(RecoverySource::committed, from_copy);
  }
  if (overloaded_groups(plan, tolerance, from_workspace).empty()) {
    return choose(RecoverySource::workspace, from_workspace);
  }
  if (overloaded_groups(plan, tolerance, from_copy).empty()) {
    return choose(RecoverySource::committed, from_copy);
  }
  const Usable& report = every_survivor_committed ? from_copy : from_workspace;
  d.source = RecoverySource::unrecoverable;
  d.reason = describe_losses(plan, tolerance, report, overloaded_groups(plan, tolerance, report),
                             nodes, target);
  return d;
}

}  // namespace skt
