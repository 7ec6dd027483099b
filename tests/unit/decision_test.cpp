#include "libselfckpt/src/decision.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace skt {
namespace {

// 8 ranks on 8 nodes, groups {0,2,4,6} and {1,3,5,7}.
GroupPlan two_groups() {
  std::vector<std::string> d;
  for (int r = 0; r < 8; ++r)
    d.push_back(fmt::format("n{}", r));
  return plan_groups(d, 4, 2);
}

std::vector<std::string> nodes() {
  std::vector<std::string> d;
  for (int r = 0; r < 8; ++r)
    d.push_back(fmt::format("n{}", r));
  return d;
}

// Every rank committed `e` and returned to the application.
std::vector<RankFinding> steady(std::int64_t e) {
  return std::vector<RankFinding>(8, RankFinding{true, ControlState{e, e, e, e}});
}

TEST(Decision, NothingFoundIsAFreshStart) {
  const auto d = decide_recovery(std::vector<RankFinding>(8), two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::fresh);
  EXPECT_EQ(d.epoch, 0);
}

TEST(Decision, NothingCommittedIsAFreshStart) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{0, -1, 0, -1}});
  f[3].valid = false;
  EXPECT_EQ(decide_recovery(f, two_groups(), 1, nodes()).source, RecoverySource::fresh);
}

TEST(Decision, LostNodeMidComputationRebuildsFromTheCommittedCopy) {
  auto f = steady(5);
  f[3] = RankFinding{};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
  EXPECT_EQ(d.rebuild, (std::vector<int>{3}));
}

TEST(Decision, CrashMidFlushFinishesTheFlushFromTheWorkspace) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{6, 6, 6, 5};   // the others committed 6
  f[3].state = ControlState{5, 6, 6, 5};  // rank 3 died flushing
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::workspace);
  EXPECT_EQ(d.epoch, 6);
  EXPECT_TRUE(d.rebuild.empty());
}

TEST(Decision, EncodedButNotAgreedRollsBack) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{5, 6, 5, 5};  // D complete, agreement not seen
  f[2] = RankFinding{};                  // rank 2 lost during the agreement
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
  EXPECT_EQ(d.rebuild, (std::vector<int>{2}));
}

TEST(Decision, LostFlusherWhoseAgreementNobodyRecordedRollsBack) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{5, 6, 5, 5};
  f[4] = RankFinding{};  // the only rank that had seen the agreement, and had begun flushing
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
}

TEST(Decision, AgreementSeenAndNodeLostUsesTheWorkspace) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{5, 6, 5, 5};
  f[0].state = ControlState{6, 6, 6, 5};  // finished its flush
  f[1].state = ControlState{5, 6, 6, 5};  // saw the agreement
  f[6] = RankFinding{};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::workspace);
  EXPECT_EQ(d.epoch, 6);
  EXPECT_EQ(d.rebuild, (std::vector<int>{6}));
}

TEST(Decision, TwoLossesInOneGroupAreUnrecoverableAndSaySo) {
  auto f = steady(5);
  f[1] = RankFinding{};
  f[3] = RankFinding{};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::unrecoverable);
  EXPECT_NE(d.reason.find("group 1 lost 2 of its 4 members"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("rank 1 on node n1"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("rank 3 on node n3"), std::string::npos) << d.reason;
}

TEST(Decision, OneLossInEachGroupIsRecoverable) {
  auto f = steady(5);
  f[1] = RankFinding{};
  f[2] = RankFinding{};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.rebuild, (std::vector<int>{1, 2}));
}

TEST(Decision, LeftoverFromAnEarlierIncarnationIsTreatedAsLost) {
  auto f = steady(5);
  f[7].state = ControlState{2, 2, 2, 2};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
  EXPECT_EQ(d.rebuild, (std::vector<int>{7}));
}

TEST(Decision, ResumedRankCannotServeTheWorkspaceSource) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{5, 6, 6, 5};
  f[0].state = ControlState{6, 6, 6, 6};  // impossible in practice, but must not be trusted
  f[2] = RankFinding{};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::unrecoverable);
}

TEST(Decision, InterruptedRollbackIsRedone) {
  auto f = steady(5);
  for (auto& r : f)
    r.state = ControlState{5, 5, 5, -1};
  f[2].state = ControlState{5, -1, 5, -1};  // killed while copying B back into W
  f[5].state = ControlState{5, -1, 5, 5};
  const auto d = decide_recovery(f, two_groups(), 1, nodes());
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
  EXPECT_TRUE(d.rebuild.empty());
}

// The baselines: epoch e lives in copy e mod copies; `encoded` ahead of `committed` marks an update
// in progress.
TEST(DecisionCopies, DoubleFallsBackToTheUntouchedCopy) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{5, 6, -1, -1}});
  f[3] = RankFinding{};  // lost while copy 0 was being overwritten with epoch 6
  const auto d = decide_recovery_copies(f, two_groups(), 1, nodes(), 2);
  EXPECT_EQ(d.source, RecoverySource::committed);
  EXPECT_EQ(d.epoch, 5);
  EXPECT_EQ(d.rebuild, (std::vector<int>{3}));
}

TEST(DecisionCopies, UpdateSeenFinishedSomewhereIsComplete) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{5, 6, -1, -1}});
  f[0].state = ControlState{6, 6, -1, -1};  // saw every rank finish writing epoch 6
  f[5] = RankFinding{};
  for (const int copies : {1, 2}) {
    const auto d = decide_recovery_copies(f, two_groups(), 1, nodes(), copies);
    EXPECT_EQ(d.source, RecoverySource::committed);
    EXPECT_EQ(d.epoch, 6);
    EXPECT_EQ(d.rebuild, (std::vector<int>{5}));
  }
}

TEST(DecisionCopies, SingleCannotSurviveANodeLostDuringAnUpdate) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{5, 6, -1, -1}});
  f[3] = RankFinding{};
  const auto d = decide_recovery_copies(f, two_groups(), 1, nodes(), 1);
  EXPECT_EQ(d.source, RecoverySource::unrecoverable);
  EXPECT_NE(d.reason.find("single mode"), std::string::npos) << d.reason;
}

TEST(DecisionCopies, SingleFinishesAnUpdateWhenNoMemoryWasLost) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{5, 5, -1, -1}});
  f[2].state = ControlState{5, 6, -1, -1};  // crashed while writing; its memory survived
  const auto d = decide_recovery_copies(f, two_groups(), 1, nodes(), 1);
  EXPECT_EQ(d.source, RecoverySource::redo);
  EXPECT_EQ(d.epoch, 6);
}

TEST(DecisionCopies, SteadyStateRebuildsAndTooManyLossesAreRefused) {
  auto f = std::vector<RankFinding>(8, RankFinding{true, ControlState{4, 4, -1, -1}});
  f[6] = RankFinding{};
  EXPECT_EQ(decide_recovery_copies(f, two_groups(), 1, nodes(), 1).source,
            RecoverySource::committed);
  f[4] = RankFinding{};
  const auto d = decide_recovery_copies(f, two_groups(), 1, nodes(), 2);
  EXPECT_EQ(d.source, RecoverySource::unrecoverable);
  EXPECT_NE(d.reason.find("group 0 lost 2"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace skt
