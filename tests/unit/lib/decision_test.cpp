#include "libselfckpt/src/decision.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "selfckpt/selfckpt.hpp"

namespace skt {
namespace {

std::vector<std::string> nodes(int n = 8) {
  std::vector<std::string> d;
  for (int r = 0; r < n; ++r)
    d.push_back(fmt::format("n{}", r));
  return d;
}

// 8 ranks on 8 nodes, groups {0,2,4,6} and {1,3,5,7}.
GroupPlan two_groups() {
  return plan_groups(nodes(), 4, 2);
}

// Every rank of two_groups() committed `e`, with the records a checkpoint keeps.
std::vector<Finding> steady(std::int64_t e) {
  const GroupPlan plan = two_groups();
  std::vector<Finding> out(8);
  for (int r = 0; r < 8; ++r) {
    Finding& f = out[static_cast<std::size_t>(r)];
    f.valid = 1;
    f.state = ControlState{e, e, e, e};
    f.groups = 2;
    f.group = plan.group_of[static_cast<std::size_t>(r)];
    f.member = plan.index_of[static_cast<std::size_t>(r)];
    f.group_size = 4;
    const auto& members = plan.members[static_cast<std::size_t>(f.group)];
    for (int i = 0; i < 4; ++i) {
      f.members[i] = members[static_cast<std::size_t>(i)];
      f.recorded_layouts[i] =
          100 + static_cast<std::uint64_t>(members[static_cast<std::size_t>(i)]);
    }
    f.layout_hash = 100 + static_cast<std::uint64_t>(r);
  }
  return out;
}

TEST(Candidates, NothingValidOrNothingCommittedIsAFreshStart) {
  EXPECT_TRUE(restore_candidates(Mode::self, std::vector<Finding>(8)).epochs.empty());
  auto f = steady(0);
  EXPECT_TRUE(restore_candidates(Mode::self, f).epochs.empty());
  EXPECT_TRUE(restore_candidates(Mode::twin, f).epochs.empty());
  EXPECT_TRUE(restore_candidates(Mode::single, f).epochs.empty());
}

TEST(Candidates, AnEpochEncodedAnywhereIsACheckpointHeld) {
  auto f = steady(0);
  EXPECT_FALSE(holds_epoch(f));  // stopped before its first checkpoint: nobody's data
  f[6].state.encoded = 1;        // in the middle of the first: a rank encoded it
  EXPECT_TRUE(holds_epoch(f));
  f[6].valid = 0;  // a record that did not survive says nothing
  EXPECT_FALSE(holds_epoch(f));
  f[2].state.agreed = 1;
  EXPECT_TRUE(holds_epoch(f));
  EXPECT_TRUE(holds_epoch(steady(3)));
}

TEST(Candidates, AJobCompletedIsSeenFromAnySurvivingRecord) {
  auto f = steady(4);
  EXPECT_FALSE(completed_epoch(f).has_value());
  // The run ended while the ranks removed their segments: ranks 0 to 2 had removed theirs, which
  // would look like the loss of three members of group 0 if the others' records did not tell.
  for (int r = 0; r < 3; ++r)
    f[static_cast<std::size_t>(r)].valid = 0;
  f[5].state.finished = 4;
  EXPECT_EQ(completed_epoch(f), 4);
  f[5].valid = 0;  // a record that did not survive says nothing
  EXPECT_FALSE(completed_epoch(f).has_value());
}

TEST(Candidates, SelfTriesTheNewestAgreedEpochThenTheOneBefore) {
  auto f = steady(5);
  EXPECT_EQ(restore_candidates(Mode::self, f).epochs, (std::vector<std::int64_t>{5, 4}));
  f[3].state = ControlState{5, 6, 6, 5};  // flushing 6: some rank saw every rank encode it
  EXPECT_EQ(restore_candidates(Mode::self, f).epochs, (std::vector<std::int64_t>{6, 5}));
  f[3].valid = 0;  // the one that knew is lost: only what the others recorded counts
  EXPECT_EQ(restore_candidates(Mode::self, f).epochs, (std::vector<std::int64_t>{5, 4}));
  f = steady(1);
  EXPECT_EQ(restore_candidates(Mode::self, f).epochs, (std::vector<std::int64_t>{1}));
}

TEST(Candidates, DoubleTriesTheNewestCommittedEpochThenTheOneBefore) {
  auto f = steady(5);
  f[2].state = ControlState{6, 6, -1, -1};
  const auto c = restore_candidates(Mode::twin, f);
  EXPECT_EQ(c.epochs, (std::vector<std::int64_t>{6, 5}));
  EXPECT_FALSE(c.redo);
}

TEST(Candidates, SingleFinishesAnInterruptedUpdateFirst) {
  auto f = steady(5);
  EXPECT_EQ(restore_candidates(Mode::single, f).epochs, (std::vector<std::int64_t>{5}));
  f[4].state = ControlState{5, 6, -1, -1};  // rank 4 was writing epoch 6 over its only copy
  const auto c = restore_candidates(Mode::single, f);
  EXPECT_EQ(c.epochs, (std::vector<std::int64_t>{6, 5}));
  EXPECT_TRUE(c.redo);
}

TEST(StaleRanks, SegmentsOfAnEarlierStartOfTheJobAreNoCheckpointOfIt) {
  auto f = steady(3);
  for (auto& finding : f)
    finding.lineage = 500;
  f[7] = Finding{};  // lost: nothing to compare
  f[7].layout_hash = 107;
  EXPECT_TRUE(stale_ranks(f).empty());
  // Node 2 kept its segments from a start of the job before this one (lineage 400), at the same
  // epoch number as the others: its data is of the other start's epoch 3.
  f[2].lineage = 400;
  EXPECT_EQ(stale_ranks(f), std::vector<int>{2});
  // At a newer epoch number than the others: still the older start.
  f[5].lineage = 400;
  f[5].state = ControlState{9, 9, 9, 9};
  EXPECT_EQ(stale_ranks(f), (std::vector<int>{2, 5}));
  // Set aside, they leave this start's epoch and lineage to restore.
  for (const int r : stale_ranks(f))
    f[static_cast<std::size_t>(r)].valid = 0;
  Config config;
  const RestorePlan plan = plan_restore(f, nodes(), config);
  EXPECT_EQ(plan.candidates.epochs.front(), 3);
  EXPECT_EQ(plan.lineage, 500u);
}

TEST(NeededElsewhere, ACheckpointOnAnotherNodeOfTheLaunchIsNeededOnlyWhereItsRankHasNone) {
  auto f = steady(3);
  for (auto& finding : f)
    finding.lineage = 500;
  // Ranks 0 and 1 were placed the other way round: each found nothing of its own, and each one's
  // node holds the other's checkpoint.
  f[0] = Finding{};
  f[1] = Finding{};
  const std::vector<Misplaced> swapped{{.rank = 1, .holder = 0, .newest = 3, .lineage = 500},
                                       {.rank = 0, .holder = 1, .newest = 3, .lineage = 500}};
  const auto needed = needed_elsewhere(f, swapped);
  ASSERT_EQ(needed.size(), 2u);
  EXPECT_EQ(needed[0].rank, 0);
  EXPECT_EQ(needed[1].rank, 1);
  const std::string why = misplacement_refusal(needed, nodes(), "job");
  EXPECT_NE(why.find("rank 0's is on node n1, where this launch runs rank 1 (and rank 0 on node "
                     "n0)"),
            std::string::npos)
      << why;
  // A rank that found its own in place leaves a copy elsewhere of no use (a leftover).
  f[1] = steady(3)[1];
  f[1].lineage = 500;
  EXPECT_EQ(needed_elsewhere(f, swapped).size(), 1u);
  // Nothing committed in it, or from an earlier start than the job's: not a checkpoint to need.
  auto older = swapped;
  older[1].lineage = 400;
  EXPECT_TRUE(needed_elsewhere(f, older).empty());
  older[1] = {.rank = 0, .holder = 1, .newest = 0, .lineage = 900};
  EXPECT_TRUE(needed_elsewhere(f, older).empty());
  // Once the job completed, nothing of it is needed.
  f[5].state.finished = 3;
  EXPECT_TRUE(needed_elsewhere(f, swapped).empty());
}

TEST(NeededElsewhere, WhenEveryRankMovedTheNewestMisplacedStartCounts) {
  // The job requeued on a shifted list of nodes: no rank found anything in place.
  const std::vector<Finding> f(4);
  const std::vector<Misplaced> shifted{{.rank = 1, .holder = 0, .newest = 2, .lineage = 700},
                                       {.rank = 2, .holder = 1, .newest = 2, .lineage = 700},
                                       {.rank = 3, .holder = 2, .newest = 2, .lineage = 600}};
  const auto needed = needed_elsewhere(f, shifted);
  ASSERT_EQ(needed.size(), 2u);
  EXPECT_EQ(needed[0].rank, 1);
  EXPECT_EQ(needed[1].rank, 2);
}

TEST(RecordedPlan, TheSurvivorsVouchForTheirGroups) {
  auto f = steady(3);
  f[3] = Finding{};  // lost: its group still knows it
  f[3].layout_hash = 103;
  const GroupPlan plan = recorded_plan(f, nodes(), "job");
  EXPECT_EQ(plan.members, two_groups().members);
}

TEST(RecordedPlan, AGroupThatLostEveryMemberIsUnrecoverable) {
  auto f = steady(3);
  for (const int r : {1, 3, 5, 7}) {
    f[static_cast<std::size_t>(r)] = Finding{};
    f[static_cast<std::size_t>(r)].layout_hash = 100 + static_cast<std::uint64_t>(r);
  }
  try {
    recorded_plan(f, nodes(), "job");
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_UNRECOVERABLE);
    EXPECT_NE(std::string(e.what()).find("group 1 lost all of its members"), std::string::npos)
        << e.what();
  }
}

TEST(RecordedPlan, DisagreeingRecordsOrAReplacementDeclaringOtherRegionsAreRefused) {
  auto f = steady(3);
  f[2].members[1] = 3;  // rank 2 says rank 3 is in its group
  EXPECT_THROW(recorded_plan(f, nodes(), "job"), Error);
  f = steady(3);
  f[5] = Finding{};
  f[5].layout_hash = 999;  // a replacement that declared other regions
  try {
    recorded_plan(f, nodes(), "job");
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_MISMATCH);
    EXPECT_NE(std::string(e.what()).find("rank 5 declared regions"), std::string::npos);
  }
}

// Groups of two_groups(), every member with 10 chunks of 4 KiB, parity m.
std::vector<GroupShape> shapes(int parity = 1) {
  const std::vector<std::uint64_t> chunks(8, 10);
  return group_shapes(two_groups(), chunks, parity, 4096, parity);
}

std::vector<Holdings> everyone_whole() {
  std::vector<Holdings> h(8);
  for (auto& x : h)
    x.whole = true;
  return h;
}

TEST(Assess, EverythingHeldNeedsNoRebuild) {
  const auto v = assess(shapes(), everyone_whole(), false, 5, nodes());
  EXPECT_TRUE(v.feasible);
  EXPECT_TRUE(v.lost[0].empty());
  EXPECT_TRUE(v.repairs[0].empty());
}

TEST(Assess, OneLostMemberPerGroupIsRebuiltWhole) {
  auto h = everyone_whole();
  h[4].whole = false;  // member 2 of group 0
  h[7].whole = false;  // member 3 of group 1
  const auto v = assess(shapes(), h, false, 5, nodes());
  ASSERT_TRUE(v.feasible) << v.reason;
  EXPECT_EQ(v.lost[0], (std::vector<int>{2}));
  EXPECT_EQ(v.lost[1], (std::vector<int>{3}));
  EXPECT_TRUE(v.repairs[0].empty());
}

TEST(Assess, TwoLostMembersOfOneGroupAreBeyondXor) {
  auto h = everyone_whole();
  h[0].whole = false;
  h[2].whole = false;
  const auto v = assess(shapes(), h, false, 5, nodes());
  EXPECT_FALSE(v.feasible);
  EXPECT_NE(v.reason.find("group 0 lost 2 of its 4 members"), std::string::npos) << v.reason;
  // Reed-Solomon with two parity chunks rebuilds them.
  EXPECT_TRUE(assess(shapes(2), h, false, 5, nodes()).feasible);
}

TEST(Assess, ScatteredDamageIsRepairedRowByRowWithTheLostMembersThere) {
  const auto s = shapes();
  const auto& g = s[0].geometry;
  auto h = everyone_whole();
  h[2].data_erased = {{4, 5}};    // member 1, chunk 4
  h[6].parity_erased = {{0, 1}};  // member 3, its first parity chunk
  h[0].whole = false;             // member 0 lost
  const std::uint64_t data_row = g.row_of_chunk(1, 4);
  const std::uint64_t parity_row = g.parity_row(3, 0);
  ASSERT_NE(data_row, parity_row);
  const bool lost_in_data_row = !g.chunk_of_row(0, data_row) || *g.chunk_of_row(0, data_row) < 10;
  auto v = assess(s, h, false, 5, nodes());
  if (lost_in_data_row) {
    // Two items of one row gone under xor: refused, naming a row.
    EXPECT_FALSE(v.feasible);
    EXPECT_NE(v.reason.find("cannot rebuild row"), std::string::npos) << v.reason;
  }
  // Without the loss, each damaged row is repaired on its own.
  h[0].whole = true;
  v = assess(s, h, false, 5, nodes());
  ASSERT_TRUE(v.feasible) << v.reason;
  ASSERT_EQ(v.repairs[0].size(), 2u);
  for (const auto& r : v.repairs[0]) {
    EXPECT_EQ(r.erased, (std::vector<int>{r.row == data_row ? 1 : 3}));
  }
}

TEST(Assess, ARowWithALostMemberAndDamageElsewhereIsRepairedWithBoth) {
  const auto s = shapes(2);  // rs, m = 2
  const auto& g = s[0].geometry;
  auto h = everyone_whole();
  h[0].whole = false;  // member 0 lost
  h[2].data_erased = {{0, 10}};
  const auto v = assess(s, h, false, 5, nodes());
  ASSERT_TRUE(v.feasible) << v.reason;
  EXPECT_EQ(v.lost[0], (std::vector<int>{0}));
  ASSERT_EQ(v.repairs[0].size(), 10u);
  for (const auto& r : v.repairs[0]) {
    const bool lost_there = !g.chunk_of_row(0, r.row) || *g.chunk_of_row(0, r.row) < 10;
    EXPECT_EQ(r.erased, lost_there ? (std::vector<int>{0, 1}) : (std::vector<int>{1}));
  }
}

TEST(Assess, TheMessageSaysWhenTheWorkspaceWasWrittenBeforeRecovery) {
  auto h = everyone_whole();
  h[0].whole = false;
  h[2].data_erased = {{0, 10}};
  h[2].first_erased = "region 'x' bytes 0..4095";
  h[2].first_erased_written = true;
  const auto v = assess(shapes(), h, false, 5, nodes());
  ASSERT_FALSE(v.feasible);
  EXPECT_NE(v.reason.find("region 'x' bytes 0..4095"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("do not write into regions before skt_recover"), std::string::npos);
}

TEST(Assess, ARedoNeedsEveryRanksDataAndNoChecksum) {
  auto h = everyone_whole();
  h[5].parity_erased = {{0, 3}};  // the checksum was being rewritten: irrelevant
  EXPECT_TRUE(assess(shapes(), h, true, 6, nodes()).feasible);
  h[5].data_erased = {{2, 3}};
  EXPECT_FALSE(assess(shapes(), h, true, 6, nodes()).feasible);
  h = everyone_whole();
  h[1].whole = false;
  EXPECT_FALSE(assess(shapes(), h, true, 6, nodes()).feasible);
}

TEST(Assess, AGroupOfOneToleratesNothing) {
  const std::vector<std::uint64_t> chunks(2, 3);
  const auto s = group_shapes(plan_groups(nodes(2), 1, 2), chunks, 1, 4096, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].tolerance, 0);
  std::vector<Holdings> h(2);
  h[0].whole = h[1].whole = true;
  EXPECT_TRUE(assess(s, h, false, 2, nodes(2)).feasible);
  h[1].data_erased = {{0, 1}};
  EXPECT_FALSE(assess(s, h, false, 2, nodes(2)).feasible);
}

TEST(Holdings, RoundTrip) {
  Holdings h;
  h.whole = true;
  h.data_erased = {{1, 3}, {7, 8}};
  h.parity_erased = {{0, 1}};
  h.written_blocks = 42;
  h.first_erased = "region 'a' bytes 0..63";
  h.first_erased_written = true;
  const auto back = Holdings::deserialize(h.serialize());
  EXPECT_EQ(back.whole, h.whole);
  EXPECT_EQ(back.data_erased, h.data_erased);
  EXPECT_EQ(back.parity_erased, h.parity_erased);
  EXPECT_EQ(back.written_blocks, 42u);
  EXPECT_EQ(back.first_erased, h.first_erased);
  EXPECT_TRUE(back.first_erased_written);
  const auto bytes = h.serialize();
  EXPECT_THROW(Holdings::deserialize(std::span(bytes).first(bytes.size() - 1)), Error);
}

}  // namespace
}  // namespace skt
