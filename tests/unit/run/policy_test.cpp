// skt-run's relaunch policy, rule by rule: what it does once a launch has ended, from what it knows
// of the job and of how the launch went.
#include <gtest/gtest.h>

#include "daemon/cli.hpp"
#include "daemon/policy.hpp"

namespace {

using namespace skt::run;
using Names = std::vector<std::string>;

// Four ranks on two nodes, one spare, the first relaunch allowed.
JobFacts job() {
  JobFacts facts;
  facts.max_restarts = 2;
  facts.ranklist = {"n0", "n0", "n1", "n1"};
  facts.spares = {"n2"};
  return facts;
}

// A run whose ranks spoke and failed: a crash, which the policy probes for.
Outcome crashed() {
  Outcome out;
  out.code = 137;
  out.started = true;
  return out;
}

Outcome probed(Outcome out, std::set<std::string> dead) {
  out.dead = std::move(dead);
  return out;
}

// What Open MPI's mpirun says when it refuses a launch: a message between rules.
std::deque<std::string> refusal() {
  return {"--------------------------------------------------------------------------",
          "There are not enough slots available in the system to satisfy the 4",
          "slots that were requested by the application:",
          "--------------------------------------------------------------------------"};
}

TEST(RelaunchPolicy, ASignalToSktRunStopsItWhateverTheRunDid) {
  JobFacts facts = job();
  facts.signal = 15;
  for (const Outcome& out : {Outcome{}, crashed(), probed(crashed(), {"n1"})}) {
    const Action action = next_action(facts, out);
    EXPECT_EQ(action.step, Step::stop);
    EXPECT_EQ(action.exit_code, 128 + 15);
  }
}

TEST(RelaunchPolicy, SuccessIsExitZeroNeitherHungNorOnADeadNode) {
  EXPECT_EQ(next_action(job(), Outcome{}).step, Step::succeed);
  EXPECT_EQ(next_action(job(), Outcome{}).exit_code, 0);
  Outcome hung;
  hung.hung = "rank 1 silent for 30 s";
  EXPECT_EQ(next_action(job(), hung).step, Step::probe);
  Outcome on_a_dead_node;
  on_a_dead_node.dead_node = "n1";
  EXPECT_EQ(next_action(job(), on_a_dead_node).step, Step::probe);
}

TEST(RelaunchPolicy, WorkThatEndedWithoutItsRanksLeavingIsNotDoneAgain) {
  Outcome out = crashed();
  out.stuck_after_work = "ranks did not leave MPI_Finalize";
  const Action action = next_action(job(), out);
  EXPECT_EQ(action.step, Step::stuck_after_work);
  EXPECT_EQ(action.exit_code, kExitStuckAfterWork);
}

TEST(RelaunchPolicy, TheProgramsOwnVerdictIsPassedOnNotRetried) {
  for (const int code : {2, 3, 4}) {
    Outcome out = crashed();
    out.code = code;
    const Action action = next_action(job(), probed(out, {"n1"}));
    EXPECT_EQ(action.step, Step::program_refused) << code;
    EXPECT_EQ(action.exit_code, code);
  }
}

TEST(RelaunchPolicy, AnUnrecoverableCheckpointStartsAfreshOnlyWhenAskedAndWithinTheBudget) {
  Outcome out = crashed();
  out.code = 3;
  JobFacts facts = job();
  facts.fresh_if_unrecoverable = true;
  EXPECT_EQ(next_action(facts, out).step, Step::start_afresh);
  facts.attempt = facts.max_restarts;
  EXPECT_EQ(next_action(facts, out).step, Step::program_refused);
  EXPECT_EQ(next_action(facts, out).exit_code, 3);
}

TEST(RelaunchPolicy, AStallAtTheEpochTheRunBeforeStalledAtIsNotRelaunched) {
  Outcome out = crashed();
  out.hung = "no checkpoint for 90 s";
  out.stalled_at = 7;
  JobFacts facts = job();
  facts.stalled_before = 7;
  const Action again = next_action(facts, out);
  EXPECT_EQ(again.step, Step::stalled_again);
  EXPECT_EQ(again.exit_code, kExitStalledAgain);
  facts.stalled_before = 6;  // it got further: relaunched
  EXPECT_EQ(next_action(facts, out).step, Step::probe);
  EXPECT_EQ(next_action(facts, probed(out, {})).step, Step::relaunch);
}

TEST(RelaunchPolicy, AFailureIsProbedBeforeAnythingElseIsDecided) {
  EXPECT_EQ(next_action(job(), crashed()).step, Step::probe);
  const Action action = next_action(job(), probed(crashed(), {}));
  EXPECT_EQ(action.step, Step::relaunch);
  EXPECT_EQ(action.replacement.ranklist, job().ranklist);  // every node alive: where it was
  EXPECT_TRUE(action.replacement.replaced.empty());
  EXPECT_EQ(action.replacement.spares_left, job().spares);
  EXPECT_EQ(action.wait, 0);
}

TEST(RelaunchPolicy, ADeadNodesRanksMoveTogetherToASpare) {
  const Action action = next_action(job(), probed(crashed(), {"n1"}));
  EXPECT_EQ(action.step, Step::relaunch);
  EXPECT_EQ(action.replacement.ranklist, (Names{"n0", "n0", "n2", "n2"}));
  ASSERT_EQ(action.replacement.replaced.size(), 1u);
  EXPECT_EQ(action.replacement.replaced[0], (std::pair<std::string, std::string>{"n1", "n2"}));
  EXPECT_TRUE(action.replacement.spares_left.empty());
}

TEST(RelaunchPolicy, StoppingAtTheLastSpareEndsTheJobSayingWhatIsMissing) {
  JobFacts facts = job();
  facts.continue_on_survivors = false;  // --stop-at-last-spare
  const Action action = next_action(facts, probed(crashed(), {"n0", "n1"}));
  EXPECT_EQ(action.step, Step::out_of_spares);
  EXPECT_EQ(action.exit_code, kExitOutOfSpares);
  EXPECT_FALSE(action.why.empty());
  // A dead spare is no spare.
  EXPECT_EQ(next_action(facts, probed(crashed(), {"n1", "n2"})).step, Step::out_of_spares);
}

TEST(RelaunchPolicy, WithNoSpareLeftTheRanksGoOnTheLiveNodes) {
  // The spare takes the first dead node's ranks, the live nodes the rest.
  const Action both = next_action(job(), probed(crashed(), {"n0", "n1"}));
  EXPECT_EQ(both.step, Step::relaunch);
  EXPECT_EQ(both.replacement.ranklist, (Names{"n2", "n2", "n2", "n2"}));
  // A dead spare is no spare: n1's ranks join n0's.
  const Action spare_dead = next_action(job(), probed(crashed(), {"n1", "n2"}));
  EXPECT_EQ(spare_dead.step, Step::relaunch);
  EXPECT_EQ(spare_dead.replacement.ranklist, (Names{"n0", "n0", "n0", "n0"}));
  EXPECT_EQ(spare_dead.replacement.doubled_up.size(), 2u);
}

TEST(RelaunchPolicy, EveryNodeDeadEndsTheJob) {
  const Action action = next_action(job(), probed(crashed(), {"n0", "n1", "n2"}));
  EXPECT_EQ(action.step, Step::out_of_spares);
  EXPECT_EQ(action.exit_code, kExitOutOfSpares);
  EXPECT_EQ(action.why, "every node of the job is dead (n0, n1) and no live spare is left");
}

TEST(RelaunchPolicy, TheRestartBudgetComesBeforeTheSpares) {
  JobFacts facts = job();
  facts.attempt = facts.max_restarts;
  for (const auto& dead : {std::set<std::string>{}, std::set<std::string>{"n1"}}) {
    const Action action = next_action(facts, probed(crashed(), dead));
    EXPECT_EQ(action.step, Step::restart_budget);
    EXPECT_EQ(action.exit_code, kExitRestartBudget);
  }
}

TEST(RelaunchPolicy, ALaunchTheLauncherRefusedIsNotRetriedWhileEveryNodeLives) {
  Outcome refused;
  refused.code = 1;
  refused.last_errors = refusal();
  EXPECT_TRUE(never_ran(refused));
  EXPECT_TRUE(launcher_refused(refused));
  const Action action = next_action(job(), probed(refused, {}));
  EXPECT_EQ(action.step, Step::launch_failed);
  EXPECT_EQ(action.exit_code, kExitLaunchFailed);
  // A dead node explains the refusal: replaced, and relaunched.
  EXPECT_EQ(next_action(job(), probed(refused, {"n1"})).step, Step::relaunch);
}

TEST(RelaunchPolicy, ALauncherKilledOrSilentBeforeTheRanksStartRefusedNothing) {
  Outcome killed;
  killed.code = 137;
  killed.launcher_signal = 9;  // the OOM killer, someone's kill: a crash
  killed.last_errors = refusal();
  EXPECT_FALSE(launcher_refused(killed));
  EXPECT_EQ(next_action(job(), probed(killed, {})).step, Step::relaunch);
  Outcome silent;
  silent.code = 1;  // mpirun interrupted before its ranks start says nothing
  EXPECT_TRUE(never_ran(silent));
  EXPECT_FALSE(launcher_refused(silent));
  EXPECT_EQ(next_action(job(), probed(silent, {})).step, Step::relaunch);
}

TEST(RelaunchPolicy, AProgramThatRanRefusedNothingEvenIfTheLauncherSaidWhy) {
  Outcome spoke = crashed();
  spoke.last_errors = refusal();
  EXPECT_FALSE(launcher_refused(spoke));
  Outcome seen;
  seen.code = 1;
  seen.last_errors = refusal();
  seen.last_errors.push_back("mpirun noticed that process rank 1 with PID 42 on node n1 exited on");
  EXPECT_FALSE(never_ran(seen));
  EXPECT_EQ(next_action(job(), probed(seen, {})).step, Step::relaunch);
}

TEST(RelaunchPolicy, TheBackoffDoublesWithEachRelaunch) {
  JobFacts facts = job();
  facts.max_restarts = 10;
  facts.backoff = 1.5;
  for (const auto& [attempt, wait] : {std::pair{0, 1.5}, {1, 3.0}, {3, 12.0}}) {
    facts.attempt = attempt;
    EXPECT_EQ(next_action(facts, probed(crashed(), {})).wait, wait) << attempt;
  }
}

TEST(LauncherReason, TheStartOfItsLastFramedMessage) {
  auto lines = refusal();
  lines.push_front("an earlier line of the program");
  EXPECT_EQ(launcher_reason(lines),
            "\n    There are not enough slots available in the system to satisfy the 4"
            "\n    slots that were requested by the application:");
  EXPECT_EQ(launcher_reason({}), "");
  std::deque<std::string> long_message;
  for (int i = 0; i < 9; ++i)
    long_message.push_back("line " + std::to_string(i));
  EXPECT_NE(launcher_reason(long_message).find("(and 3 more lines, above)"), std::string::npos);
}

}  // namespace
