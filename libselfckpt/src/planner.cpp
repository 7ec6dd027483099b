#include "libselfckpt/internal/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "libselfckpt/internal/format.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

GroupPlan plan_groups(const std::vector<std::string>& domain_of_rank, int group_size,
                      int min_members) {
  const int n = static_cast<int>(domain_of_rank.size());
  GroupPlan plan;
  plan.group_of.assign(static_cast<std::size_t>(n), 0);
  plan.index_of.assign(static_cast<std::size_t>(n), 0);
  if (n == 0) return plan;
  if (group_size <= 1) {
    for (int r = 0; r < n; ++r) {
      plan.group_of[static_cast<std::size_t>(r)] = r;
      plan.members.push_back({r});
    }
    return plan;
  }

  // Domains in order of first appearance, with their ranks.
  std::vector<std::vector<int>> domains;
  std::map<std::string, std::size_t> position;
  for (int r = 0; r < n; ++r) {
    const auto [it, inserted] =
        position.emplace(domain_of_rank[static_cast<std::size_t>(r)], domains.size());
    if (inserted) domains.emplace_back();
    domains[it->second].push_back(r);
  }
  std::stable_sort(domains.begin(), domains.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });

  if (n < min_members) {
    throw Error(SKT_ERR_CONFIG,
                fmt::format("a job of {} rank{} cannot protect itself: the scheme needs groups of "
                            "at least {} ranks on distinct nodes; run more ranks, or set "
                            "SKT_GROUP_SIZE=1 to run without protection",
                            n, n == 1 ? "" : "s", min_members));
  }
  // Each group's members on distinct nodes: a node's ranks each need a group of their own.
  const auto widest = static_cast<int>(domains.front().size());
  const std::string& widest_node =
      domain_of_rank[static_cast<std::size_t>(domains.front().front())];
  if (n / widest < min_members) {
    throw Error(
        SKT_ERR_CONFIG,
        fmt::format(
            "cannot place the {} ranks in groups on distinct nodes: node '{}' holds {} of them, "
            "which need a group each, and {} groups of the {} ranks would have as few as {} "
            "member{}, where the scheme needs at least {} per group. Use more nodes; to test on "
            "one host, give each rank its own SKT_NODE; SKT_GROUP_SIZE=1 runs without protection",
            n, widest_node, widest, widest, n, n / widest, n / widest == 1 ? "" : "s",
            min_members));
  }
  // As few groups as keep each within group_size: the fewer the groups, the less memory their
  // checksums take. More where a node holds more ranks than that (two nodes of 8 ranks in groups
  // of 4 make 8 groups of 2), so that every group tolerates the loss of a node.
  const int within_size = (n + group_size - 1) / group_size;
  int groups = std::max(within_size, widest);
  if (n / groups < min_members) {
    // The groups within group_size leave one too small (3 ranks in groups of 2 make 2 and 1):
    // fewer, a little larger, as long as a checkpoint segment can name their members. (Here the
    // widest node is narrower than `within_size`, so `fewer` groups still separate its ranks.)
    const int fewer = n / group_size;
    if ((n + fewer - 1) / fewer > kMaxGroupSize) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("{} ranks in groups of at most {} give groups of {} ranks, but the "
                              "scheme needs at least {} per group, and fewer groups would have "
                              "more than {} members; use fewer parity chunks",
                              n, group_size, n / groups, min_members, kMaxGroupSize));
    }
    groups = fewer;
  }

  plan.members.assign(static_cast<std::size_t>(groups), {});
  int dealt = 0;
  for (const auto& ranks : domains) {
    for (const int r : ranks) {
      plan.members[static_cast<std::size_t>(dealt % groups)].push_back(r);
      ++dealt;
    }
  }
  for (int g = 0; g < groups; ++g) {
    auto& members = plan.members[static_cast<std::size_t>(g)];
    std::sort(members.begin(), members.end());
    for (std::size_t i = 0; i < members.size(); ++i) {
      plan.group_of[static_cast<std::size_t>(members[i])] = g;
      plan.index_of[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
    }
  }
  return plan;
}

}  // namespace skt
