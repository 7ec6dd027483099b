#include "libselfckpt/internal/planner.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "selfckpt/selfckpt.hpp"

namespace skt {
namespace {

void expect_valid(const GroupPlan& plan, const std::vector<std::string>& domains) {
  const int n = static_cast<int>(domains.size());
  std::set<int> seen;
  std::size_t smallest = SIZE_MAX, largest = 0;
  for (int g = 0; g < plan.groups(); ++g) {
    const auto& members = plan.members[static_cast<std::size_t>(g)];
    smallest = std::min(smallest, members.size());
    largest = std::max(largest, members.size());
    std::set<std::string> used;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int r = members[i];
      EXPECT_TRUE(seen.insert(r).second) << "rank " << r << " in two groups";
      EXPECT_TRUE(used.insert(domains[static_cast<std::size_t>(r)]).second)
          << "group " << g << " has two members on " << domains[static_cast<std::size_t>(r)];
      EXPECT_EQ(plan.group_of[static_cast<std::size_t>(r)], g);
      EXPECT_EQ(plan.index_of[static_cast<std::size_t>(r)], static_cast<int>(i));
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), n);
  EXPECT_LE(largest - smallest, 1u);
}

// The nodes of `nodes * per_node` ranks, each node's ranks in a row, as mpirun places them by slot.
std::vector<std::string> ranks_on_nodes(int nodes, int per_node) {
  std::vector<std::string> d;
  for (int node = 0; node < nodes; ++node) {
    for (int k = 0; k < per_node; ++k)
      d.push_back(fmt::format("node{}", node));
  }
  return d;
}

TEST(Planner, BalancedOneRankPerNode) {
  std::vector<std::string> d;
  for (int r = 0; r < 8; ++r)
    d.push_back(fmt::format("n{}", r));
  const auto plan = plan_groups(d, 4, 2);
  EXPECT_EQ(plan.groups(), 2);
  expect_valid(plan, d);
}

TEST(Planner, SeveralRanksPerNodeGoToDifferentGroups) {
  const auto d = ranks_on_nodes(4, 4);
  const auto plan = plan_groups(d, 4, 2);
  EXPECT_EQ(plan.groups(), 4);
  for (const auto& members : plan.members)
    EXPECT_EQ(members.size(), 4u);
  expect_valid(plan, d);
}

TEST(Planner, UnbalancedDomainsAndUnevenCounts) {
  const std::vector<std::string> d{"a", "a", "a", "b", "b", "c", "d", "e", "a", "f"};
  const auto plan = plan_groups(d, 3, 2);  // 10 ranks → 4 groups of 3,3,2,2
  EXPECT_EQ(plan.groups(), 4);
  expect_valid(plan, d);
}

TEST(Planner, ImpossibleRequestNamesTheFix) {
  const std::vector<std::string> one_host(4, "host");
  try {
    plan_groups(one_host, 2, 2);
    FAIL() << "a single host cannot hold groups on distinct nodes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_CONFIG);
    const std::string m = e.what();
    EXPECT_NE(m.find("node 'host' holds 4"), std::string::npos) << m;
    EXPECT_NE(m.find("SKT_NODE"), std::string::npos) << m;
    EXPECT_NE(m.find("SKT_GROUP_SIZE=1"), std::string::npos) << m;
  }
  try {
    plan_groups({"vm", "vm"}, 4, 2);  // mpirun -n 2 on one host, the default group size
    FAIL() << "two ranks of one node cannot share a group";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("node 'vm' holds 2 of them, which need a group each, and 2 groups of the 2 "
                     "ranks would have as few as 1 member, where the scheme needs at least 2"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW(plan_groups({"a", "b", "c", "a", "a"}, 3, 2), Error);  // 'a' needs 3 groups of 1
  EXPECT_THROW(plan_groups({"a"}, 4, 2), Error);                      // one rank cannot protect
}

TEST(Planner, ANodeWithMoreRanksThanGroupsTakesSmallerGroups) {
  // mpirun -n 16 on two nodes, the default group size: 4 groups of 4 would put two ranks of a node
  // in each; 8 groups of 2, one rank of each node, tolerate the loss of either node.
  const auto d = ranks_on_nodes(2, 8);
  const auto plan = plan_groups(d, 4, 2);
  EXPECT_EQ(plan.groups(), 8);
  expect_valid(plan, d);
  // Three nodes of 4 ranks with rs parity 2 (groups of at least 3): 4 groups of 3.
  const auto three = ranks_on_nodes(3, 4);
  const auto rs = plan_groups(three, 8, 3);
  EXPECT_EQ(rs.groups(), 4);
  expect_valid(rs, three);
}

TEST(Planner, ARemainderTooSmallToProtectItselfJoinsTheOtherGroups) {
  // 3 ranks in groups of 2 would make 2 and 1: one group of 3.
  const auto three = plan_groups({"a", "b", "c"}, 2, 2);
  EXPECT_EQ(three.groups(), 1);
  EXPECT_EQ(three.size_of(0), 3);
  // 7 in groups of 2: 3, 2 and 2 rather than 2, 2, 2 and 1.
  const std::vector<std::string> seven{"a", "b", "c", "d", "e", "f", "g"};
  const auto plan = plan_groups(seven, 2, 2);
  EXPECT_EQ(plan.groups(), 3);
  expect_valid(plan, seven);
  // 5 in groups of 4 with rs parity 2: 3 and 2 would leave a group below 3; one of 5.
  EXPECT_EQ(plan_groups({"a", "b", "c", "d", "e"}, 4, 3).groups(), 1);
  // 3 ranks on two nodes cannot make a group of 2 or more on distinct nodes beside another.
  EXPECT_THROW(plan_groups({"a", "a", "b"}, 2, 2), Error);
}

TEST(Planner, GroupSizeOneProtectsNothing) {
  const std::vector<std::string> d(3, "host");
  const auto plan = plan_groups(d, 1, 1);
  EXPECT_EQ(plan.groups(), 3);
  expect_valid(plan, d);
}

TEST(Planner, RandomAssignmentsAreValidWheneverPossible) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 40);
    const int nodes = 1 + static_cast<int>(rng() % 12);
    const int g = 2 + static_cast<int>(rng() % 7);
    std::vector<std::string> d;
    std::map<std::string, int> count;
    for (int r = 0; r < n; ++r) {
      d.push_back(fmt::format("n{}", rng() % static_cast<unsigned>(nodes)));
      ++count[d.back()];
    }
    int widest = 0;
    for (const auto& [_, c] : count)
      widest = std::max(widest, c);
    // A plan needs a group for each rank of the widest node, each of at least 2 members.
    if (n < 2 * widest) {
      EXPECT_THROW(plan_groups(d, g, 2), Error) << "n=" << n << " g=" << g;
      continue;
    }
    const auto plan = plan_groups(d, g, 2);
    expect_valid(plan, d);
    // The fewest groups of 2 to g members on distinct nodes, if any number of groups makes them;
    // otherwise larger groups, and only then.
    int fewest_within = 0;
    for (int k = widest; k <= n / 2 && fewest_within == 0; ++k) {
      if ((n + k - 1) / k <= g) fewest_within = k;
    }
    if (fewest_within > 0) {
      EXPECT_EQ(plan.groups(), fewest_within) << "n=" << n << " g=" << g;
    } else {
      for (const auto& members : plan.members)
        EXPECT_GE(members.size(), 2u);
    }
  }
}

TEST(Planner, IsDeterministic) {
  const std::vector<std::string> d{"x", "y", "x", "z", "y", "w", "z", "x"};
  const auto a = plan_groups(d, 3, 2);
  const auto b = plan_groups(d, 3, 2);
  EXPECT_EQ(a.members, b.members);
}

}  // namespace
}  // namespace skt
