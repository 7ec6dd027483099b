// skt-run's planning: node lists, ranklists, replacement of dead nodes by spares, host lists, and
// the reading of Slurm node states.
#include <gtest/gtest.h>

#include "daemon/probe.hpp"
#include "daemon/ranklist.hpp"

namespace {

using namespace skt::run;
using Names = std::vector<std::string>;

TEST(NodeList, CommaSeparatedAndHostfile) {
  EXPECT_EQ(parse_node_list("n1,n2,n3", "--nodes"), (Names{"n1", "n2", "n3"}));
  EXPECT_EQ(parse_node_list("# cluster\nnode-a slots=2\n\nnode-b  # spare\n", "hosts"),
            (Names{"node-a", "node-b"}));
}

TEST(NodeList, EmptyDuplicateAndBadNamesAreRefused) {
  EXPECT_THROW(parse_node_list("", "--nodes"), std::invalid_argument);
  EXPECT_THROW(parse_node_list(" , ,", "--nodes"), std::invalid_argument);
  try {
    parse_node_list("n1,n2,n1", "--nodes");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'n1' is listed twice"), std::string::npos);
  }
  EXPECT_THROW(parse_node_list("n1,n$(reboot)", "--nodes"), std::invalid_argument);
  EXPECT_THROW(parse_node_list("-n1", "--nodes"), std::invalid_argument);
  EXPECT_FALSE(valid_node_name(std::string(64, 'a')));
  EXPECT_TRUE(valid_node_name("c1-node.42_b"));
}

TEST(Ranklist, RanksFillNodesInOrder) {
  EXPECT_EQ(initial_ranklist({"a", "b"}, 3), (Names{"a", "a", "a", "b", "b", "b"}));
  EXPECT_THROW(initial_ranklist({"a"}, 0), std::invalid_argument);
  EXPECT_EQ(nodes_of({"b", "b", "a", "c", "a"}), (Names{"b", "a", "c"}));
}

TEST(Replace, OnlyDeadNodesMoveAndOrderIsKept) {
  const Names ranks{"n1", "n1", "n2", "n2", "n3", "n3"};
  const auto r = replace_dead_nodes(ranks, {"n2"}, {"s1", "s2"});
  EXPECT_EQ(r.ranklist, (Names{"n1", "n1", "s1", "s1", "n3", "n3"}));
  ASSERT_EQ(r.replaced.size(), 1u);
  EXPECT_EQ(r.replaced[0], (std::pair<std::string, std::string>{"n2", "s1"}));
  EXPECT_EQ(r.spares_left, (Names{"s2"}));
}

TEST(Replace, SeveralDeadNodesTakeSparesInRankOrder) {
  const auto r = replace_dead_nodes({"n1", "n2", "n3", "n4"}, {"n4", "n2"}, {"s1", "s2", "s3"});
  EXPECT_EQ(r.ranklist, (Names{"n1", "s1", "n3", "s2"}));
  EXPECT_EQ(r.spares_left, (Names{"s3"}));
}

TEST(Replace, DeadSparesAreSkippedAndDropped) {
  const auto r = replace_dead_nodes({"n1", "n2"}, {"n1", "s1"}, {"s1", "s2"});
  EXPECT_EQ(r.ranklist, (Names{"s2", "n2"}));
  EXPECT_TRUE(r.spares_left.empty());
}

TEST(Replace, NothingDeadChangesNothing) {
  const auto r = replace_dead_nodes({"n1", "n2"}, {}, {"s1"});
  EXPECT_EQ(r.ranklist, (Names{"n1", "n2"}));
  EXPECT_TRUE(r.replaced.empty());
  EXPECT_EQ(r.spares_left, (Names{"s1"}));
}

TEST(Replace, OutOfSparesSaysHowMany) {
  try {
    replace_dead_nodes({"n1", "n2", "n3"}, {"n1", "n3"}, {"s1"});
    FAIL();
  } catch (const OutOfSpares& e) {
    EXPECT_STREQ(e.what(), "2 nodes dead (n1, n3) but 1 live spare left");
  }
}

using Moves = std::vector<std::pair<int, std::string>>;

TEST(ContinueOnSurvivors, SparesFirstThenTheLiveNodes) {
  // n1 and n3 dead, one spare: s1 takes n1's ranks, n3's go on the live nodes, the least loaded
  // and first in the layout.
  const auto r = continue_on_survivors({"n1", "n2", "n3", "n4", "n4"}, {"n1", "n3"}, {"s1"}, {});
  EXPECT_EQ(r.ranklist, (Names{"s1", "n2", "s1", "n4", "n4"}));
  ASSERT_EQ(r.replaced.size(), 1u);
  EXPECT_EQ(r.replaced[0], (std::pair<std::string, std::string>{"n1", "s1"}));
  EXPECT_EQ(r.doubled_up, (Moves{{2, "s1"}}));
  EXPECT_TRUE(r.spares_left.empty());
  EXPECT_FALSE(r.groups_known);
}

TEST(ContinueOnSurvivors, EnoughSparesIsAPlainReplacement) {
  const auto r = continue_on_survivors({"n1", "n2"}, {"n2"}, {"s1", "s2"}, {0, 0});
  EXPECT_EQ(r.ranklist, (Names{"n1", "s1"}));
  EXPECT_TRUE(r.doubled_up.empty());
  EXPECT_EQ(r.spares_left, (Names{"s2"}));
}

TEST(ContinueOnSurvivors, AGroupsMembersStayApartWhileTheNodesAllowIt) {
  // Eight ranks, one per node, groups of four dealt round-robin: {0,2,4,6} and {1,3,5,7}.
  Names ranklist{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"};
  const std::vector<int> groups{0, 1, 0, 1, 0, 1, 0, 1};
  // n1 dies: rank 1 goes to the least loaded node without a member of group 1, n0.
  auto r = continue_on_survivors(ranklist, {"n1"}, {}, groups);
  EXPECT_EQ(r.ranklist, (Names{"n0", "n0", "n2", "n3", "n4", "n5", "n6", "n7"}));
  EXPECT_TRUE(r.groups_sharing_a_node.empty());
  // Then n0 dies, with ranks 0 and 1: rank 0 (group 0) to n3, the first node of group 1 with one
  // rank; rank 1 (group 1) to n2, the first of group 0 with one rank.
  r = continue_on_survivors(r.ranklist, {"n0"}, {}, groups);
  EXPECT_EQ(r.ranklist, (Names{"n3", "n2", "n2", "n3", "n4", "n5", "n6", "n7"}));
  EXPECT_EQ(r.doubled_up, (Moves{{0, "n3"}, {1, "n2"}}));
  EXPECT_TRUE(r.groups_sharing_a_node.empty());
  // Then n4: rank 4 (group 0) to n5, the one node with a single rank, of group 1.
  r = continue_on_survivors(r.ranklist, {"n4"}, {}, groups);
  EXPECT_EQ(r.ranklist, (Names{"n3", "n2", "n2", "n3", "n5", "n5", "n6", "n7"}));
  EXPECT_TRUE(r.groups_sharing_a_node.empty());
}

TEST(ContinueOnSurvivors, WhereEveryNodeHoldsAGroupMateTheLeastLoadedOneIsShared) {
  // Two nodes left for a group of three: two of its members must share one.
  const auto r = continue_on_survivors({"n0", "n1", "n2"}, {"n2"}, {}, {0, 0, 0});
  EXPECT_EQ(r.ranklist, (Names{"n0", "n1", "n0"}));
  EXPECT_EQ(r.groups_sharing_a_node, (std::vector<int>{0}));
  EXPECT_TRUE(r.groups_known);
}

TEST(ContinueOnSurvivors, EveryNodeDeadIsOutOfSpares) {
  EXPECT_THROW(continue_on_survivors({"n0", "n1"}, {"n0", "n1"}, {}, {}), OutOfSpares);
  // A dead spare is no spare.
  EXPECT_THROW(continue_on_survivors({"n0", "n1"}, {"n0", "n1", "s1"}, {"s1"}, {}), OutOfSpares);
}

TEST(ContinueOnSurvivors, ARankGoesOnlyWhereItsSegmentsFit) {
  // n3 dies with ranks 4 and 5 of 100 MiB each. By load rank 4 would go to n0, which has room for
  // none: it goes to n2, the least loaded of those with room, and rank 5 to n1, the one left.
  constexpr std::uint64_t kMiB = 1 << 20;
  const NodeRoom room{{{"n0", 50 * kMiB}, {"n1", 150 * kMiB}, {"n2", 100 * kMiB}}, 100 * kMiB};
  const auto r = continue_on_survivors({"n0", "n1", "n1", "n2", "n3", "n3"}, {"n3"}, {}, {}, room);
  EXPECT_EQ(r.doubled_up, (Moves{{4, "n2"}, {5, "n1"}}));
  EXPECT_EQ(r.room_left, (std::map<std::string, std::uint64_t>{
                             {"n0", 50 * kMiB}, {"n1", 50 * kMiB}, {"n2", 0}}));
  // Without the check the same loss puts rank 4 on the least loaded node, n0.
  EXPECT_EQ(continue_on_survivors({"n0", "n1", "n1", "n2", "n3", "n3"}, {"n3"}, {}, {}).doubled_up,
            (Moves{{4, "n0"}, {5, "n2"}}));
}

TEST(ContinueOnSurvivors, NoNodeWithTheRoomIsOutOfSparesSayingWhatEachCouldGive) {
  constexpr std::uint64_t kMiB = 1 << 20;
  // n1 did not answer skt-shm room: it takes nothing.
  const NodeRoom room{{{"n0", 150 * kMiB}}, 100 * kMiB};
  try {
    continue_on_survivors({"n0", "n1", "n2", "n2"}, {"n2"}, {}, {}, room);
    FAIL() << "two ranks of 100 MiB placed where 150 MiB is free";
  } catch (const OutOfSpares& e) {
    EXPECT_STREQ(e.what(),
                 "no spare left, and no live node has the memory for rank 3's segments (100.0 "
                 "MiB): what they can still give is n0 50.0 MiB, n1 did not say");
  }
  // A live spare takes a dead node's ranks without a question of room.
  EXPECT_EQ(continue_on_survivors({"n0", "n1", "n2", "n2"}, {"n2"}, {"s1"}, {}, room).ranklist,
            (Names{"n0", "n1", "s1", "s1"}));
}

TEST(ContinueOnSurvivors, VirtualNodesGetAContextPerRunOfRanks) {
  // Rank 4 doubled up onto n1: n1 gets a context for each run of its ranks, so that mpirun, which
  // numbers the contexts' ranks in order, starts rank r as ranklist[r].
  EXPECT_EQ(runs_of_ranks({"n1", "n1", "n4", "n4", "n1"}),
            (std::vector<std::pair<std::string, int>>{{"n1", 2}, {"n4", 2}, {"n1", 1}}));
  EXPECT_TRUE(runs_of_ranks({}).empty());
  EXPECT_EQ(most_ranks_on_a_node({"n1", "n1", "n4", "n4", "n1"}), 3);
  EXPECT_EQ(most_ranks_on_a_node({}), 0);
}

TEST(Resume, TheSameNodesChangeNothing) {
  const auto r = resume_on_nodes({"n1", "n1", "n2", "n2"}, {"n1", "n2", "n3"});
  EXPECT_EQ(r.ranklist, (Names{"n1", "n1", "n2", "n2"}));
  EXPECT_TRUE(r.replaced.empty());
  EXPECT_EQ(r.spares_left, (Names{"n3"}));
}

TEST(Resume, RanksOfANodeNoLongerGivenMoveTogetherToAnUnusedOne) {
  // A requeued job's new allocation n2..n5: n1 left it, n2 and n3 stayed (and hold their
  // segments), n4 and n5 are new. The given order decides which new node takes n1's ranks.
  const auto r = resume_on_nodes({"n1", "n1", "n2", "n2", "n3", "n3"}, {"n5", "n2", "n3", "n4"});
  EXPECT_EQ(r.ranklist, (Names{"n5", "n5", "n2", "n2", "n3", "n3"}));
  ASSERT_EQ(r.replaced.size(), 1u);
  EXPECT_EQ(r.replaced[0], (std::pair<std::string, std::string>{"n1", "n5"}));
  EXPECT_EQ(r.spares_left, (Names{"n4"}));
}

TEST(Resume, EveryNodeNewMovesEveryRankInRankOrder) {
  const auto r = resume_on_nodes({"a", "b", "a"}, {"c", "d"});
  EXPECT_EQ(r.ranklist, (Names{"c", "d", "c"}));
  EXPECT_TRUE(r.spares_left.empty());
}

TEST(Resume, TooFewNodesSaysWhich) {
  try {
    resume_on_nodes({"n1", "n2", "n3"}, {"n2", "n4"});
    FAIL();
  } catch (const OutOfSpares& e) {
    EXPECT_STREQ(e.what(),
                 "2 nodes of the last launch (n1, n3) are not given now, and 1 other node is");
  }
}

TEST(SegmentsLayout, RanksSeenKeepTheNodeThatHoldsTheirSegments) {
  // A job laid out on n3..n6, resumed without its state on an allocation given in another order.
  EXPECT_EQ(layout_of_segments({"n5", "n6", "n3", "n4"}, 1),
            (std::vector<std::string>{"n5", "n6", "n3", "n4"}));
}

TEST(SegmentsLayout, AnUnseenRankGoesWithItsBlockOrToANodeOfItsOwn) {
  // Rank 1 lost its memory on n7, which is still given; ranks 4 and 5 were on a node not given.
  EXPECT_EQ(layout_of_segments({"n7", "", "n8", "n8", "", ""}, 2),
            (std::vector<std::string>{"n7", "n7", "n8", "n8", "(the node of rank 4)",
                                      "(the node of rank 4)"}));
  // Resumed on n7, n8 and a new node: the unseen block moves there together.
  const auto moved =
      resume_on_nodes(*layout_of_segments({"n7", "", "n8", "n8", "", ""}, 2), {"n7", "n8", "n9"});
  EXPECT_EQ(moved.ranklist, (std::vector<std::string>{"n7", "n7", "n8", "n8", "n9", "n9"}));
}

TEST(SegmentsLayout, NothingSeenGivesNoLayout) {
  EXPECT_FALSE(layout_of_segments({"", "", ""}, 1).has_value());
  EXPECT_FALSE(layout_of_segments({}, 4).has_value());
}

TEST(SeqHostList, EntryRIsTheNodeOfRankR) {
  // After a replacement a node's ranks need not be contiguous: rank 3 is back on a.
  EXPECT_EQ(seq_host_list({"a", "a", "b", "a"}), "a,a,b,a");
}

TEST(SlurmStates, DeadStatesAreRecognised) {
  const std::string text =
      "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE ThreadsPerCore=1\n"
      "NodeName=n2 Arch=x86_64 State=DOWN* Reason=killed\n"
      "NodeName=n3 State=IDLE+DRAIN Reason=x\n"
      "NodeName=n4 State=ALLOCATED+NOT_RESPONDING\n"
      "NodeName=n5 State=MIXED\n"
      "NodeName=n6 State=IDLE*\n";
  const auto states = parse_slurm_states(text);
  ASSERT_EQ(states.size(), 6u);
  EXPECT_FALSE(slurm_state_is_dead(states.at("n1")));
  EXPECT_TRUE(slurm_state_is_dead(states.at("n2")));
  EXPECT_TRUE(slurm_state_is_dead(states.at("n3")));
  EXPECT_TRUE(slurm_state_is_dead(states.at("n4")));
  EXPECT_FALSE(slurm_state_is_dead(states.at("n5")));
  EXPECT_TRUE(slurm_state_is_dead(states.at("n6")));
}

}  // namespace
