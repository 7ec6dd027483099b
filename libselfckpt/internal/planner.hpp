// Groups from failure domains: a pure function, so it is tested without MPI.
#pragma once

#include <string>
#include <vector>

namespace skt {

struct GroupPlan {
  std::vector<int> group_of;              // rank → group
  std::vector<int> index_of;              // rank → member index in its group
  std::vector<std::vector<int>> members;  // group → ranks, by member index (ascending rank)

  int groups() const noexcept { return static_cast<int>(members.size()); }
  int size_of(int group) const {
    return static_cast<int>(members[static_cast<std::size_t>(group)].size());
  }
};

// Splits ranks into groups whose sizes differ by at most one and whose members all sit in
// different domains: ceil(n / group_size) groups, or as many as the widest domain has ranks if
// that is more; where that leaves a group below `min_members` (the smallest usable group, parity +
// 1), n / group_size groups, a little larger than group_size. Ranks are dealt round-robin, biggest
// domains first, so a domain with no more ranks than there are groups never puts two of them in
// one group. Throws skt::Error(SKT_ERR_CONFIG) with the reason and the fix when no plan exists
// (the widest domain holds more than n / min_members ranks).
GroupPlan plan_groups(const std::vector<std::string>& domain_of_rank, int group_size,
                      int min_members);

}  // namespace skt
