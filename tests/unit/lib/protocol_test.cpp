// The protocol of every mode, crash-tested without MPI or shared memory: a simulated job
// (protocol_sim.hpp) is crashed at every effect of a checkpoint and of a recovery, on every rank,
// with and without memory lost, with the other ranks stopped at once or at their next collective,
// and with a program that writes into its regions before recovering. Every relaunch must restore
// exactly the data of an epoch the protocol may restore (never below a checkpoint that returned to
// the program), or refuse with SKT_ERR_UNRECOVERABLE where refusing is allowed; an error on one
// rank in any collective phase must end as the same error on every rank. Never wrong, never hung.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "tests/unit/lib/protocol_sim.hpp"

namespace skt::sim {
namespace {

enum class Loss { process, node, beyond };
const char* loss_name(Loss l) {
  return l == Loss::process ? "process" : l == Loss::node ? "node" : "beyond";
}

struct Counts {
  int cases = 0, exact = 0, refused = 0, wrong = 0, hung = 0;
  std::vector<std::string> failures;
  void fail(std::string what) {
    ++wrong;
    if (failures.size() < 8) failures.push_back(std::move(what));
  }
};

void report(const Shape& shape, const char* what, const Counts& c) {
  fmt::print("protocol sim [{}] {}: {} cases, {} exact, {} refused, {} wrong, {} hung\n",
             describe(shape), what, c.cases, c.exact, c.refused, c.wrong, c.hung);
  for (const auto& f : c.failures)
    ADD_FAILURE() << f;
  EXPECT_EQ(c.wrong, 0);
  EXPECT_EQ(c.hung, 0);
}

bool any_hung(const std::vector<Outcome>& outs) {
  return std::any_of(outs.begin(), outs.end(), [](const Outcome& o) { return o.hung; });
}

std::string summary(const std::vector<Outcome>& outs) {
  std::string s;
  for (std::size_t r = 0; r < outs.size(); ++r) {
    const auto& o = outs[r];
    s += fmt::format("\n  rank {}: {} restored {} exact {} committed {} error {} {}", r,
                     o.crashed ? "crashed"
                     : o.hung  ? "HUNG"
                               : "ran",
                     o.restored, o.exact, o.last_committed, o.error, o.message.substr(0, 300));
  }
  return s;
}

// Where the other ranks stop once one crashed: at once or at their next collective, taking turns
// first to last or last to first, or after a few more effects each (seeded by the case).
std::vector<Schedule> schedules(std::uint64_t seed) {
  return {Schedule{false, 0, false, 0}, Schedule{true, 1000, false, 0},
          Schedule{false, 6, true, seed}};
}

std::string describe(const Schedule& s) {
  if (s.seeded) return fmt::format("0 to {} more effects each (seed {})", s.budget, s.seed);
  return fmt::format("{}, turns {}", s.budget == 0 ? "stop at once" : "run to a collective",
                     s.reversed ? "last to first" : "first to last");
}

// The ranks a loss takes: the victim's node, and for `beyond` as many more of its group as the
// code tolerates.
std::vector<int> lost_ranks(const Job& job, int victim, Loss loss) {
  if (loss == Loss::process) return {};
  std::vector<int> out{victim};
  if (loss == Loss::beyond) {
    for (const int r : job.group_of(victim)) {
      if (static_cast<int>(out.size()) > job.shape().parity) break;
      if (r != victim) out.push_back(r);
    }
  }
  return out;
}

// The effects a rank goes through during `activity` of a fault-free launch (or one with `first`);
// `finish`: one that ends the job.
int count_effects(const Shape& shape, int rank, int activity, std::int64_t until,
                  bool finish = false) {
  Job job(shape);
  Launch l;
  l.until = until;
  l.finish = finish;
  l.count_effects_of = {rank};
  l.count_activity = activity;
  return job.run(l)[static_cast<std::size_t>(rank)].effects;
}

// Judges a relaunch within the tolerance: every rank restored the same epoch, bit for bit, no
// earlier than `oldest`, and the run went on. A program that wrote into its regions before
// recovering may instead be refused, with the rule in the message; a single-mode job that lost
// memory during an update may be refused.
void judge(Counts& counts, const std::string& where, const std::vector<Outcome>& outs,
           std::int64_t oldest, std::int64_t until, bool may_refuse) {
  ++counts.cases;
  if (any_hung(outs)) {
    ++counts.hung;
    counts.failures.push_back(where + ": hung" + summary(outs));
    return;
  }
  const bool all_refused = std::all_of(outs.begin(), outs.end(), [](const Outcome& o) {
    return !o.crashed && o.error == SKT_ERR_UNRECOVERABLE;
  });
  if (all_refused && may_refuse) {
    ++counts.refused;
    return;
  }
  for (const auto& o : outs) {
    if (o.crashed || o.error != SKT_OK || o.restored != outs[0].restored || !o.exact ||
        o.restored < oldest || o.last_committed != until) {
      counts.fail(where + summary(outs));
      return;
    }
  }
  ++counts.exact;
}

// A checkpoint records what it cost this rank, and a survivor keeps that through a recovery: a
// relaunch knows what a checkpoint costs before it has taken one (skt_need_checkpoint).
TEST(Protocol, CheckpointCostIsRecordedAndKeptByARecovery) {
  Shape shape;
  Job job(shape);
  Launch first;
  first.until = 3;
  job.run(first);
  const auto cost = [&](int rank) {
    const auto state = read_control(job.memory(rank).control.data());
    return state ? state->checkpoint_nanoseconds : -1;
  };
  for (int r = 0; r < shape.ranks; ++r)
    EXPECT_GT(cost(r), 0) << "rank " << r;
  const std::int64_t before = cost(0);
  job.lose(1);
  Launch again;
  again.until = 3;  // recovers epoch 3 and takes no checkpoint
  job.run(again);
  EXPECT_EQ(cost(0), before) << "a survivor keeps its cost";
  EXPECT_EQ(cost(1), 0) << "the rebuilt rank has measured none";
}

// The typed collectives the library's facade uses beside the protocol (Effects::all_min and the
// rest), on three simulated ranks: every rank gets the same answer, the right one.
TEST(Effects, TypedCollectivesGiveEveryRankTheSameAnswer) {
  constexpr int kRanks = 3;
  std::mutex lock;
  std::vector<std::string> answers(kRanks);
  run_ranks(kRanks, [&](skt::Effects& fx, int rank) {
    const int min = fx.all_min(10 - rank);
    const auto max = fx.all_max(static_cast<std::int64_t>(rank) << 40);
    const double sum = fx.all_sum(0.5 * rank);
    const auto from_one = fx.broadcast_value<std::uint64_t>(rank == 1 ? 42 : 7, 1);
    const std::string text = fx.broadcast_string(rank == 0 ? "rank 0's settings" : "mine");
    const auto all = fx.gather_values(static_cast<std::int16_t>(-rank));
    std::vector<std::int64_t> pair{rank, -rank};
    fx.combine(std::span(pair), skt::Combine::sum);
    const auto answer = fmt::format("{} {} {} {} '{}' {} {},{}", min, max, sum, from_one, text,
                                    fmt::join(all, ","), pair[0], pair[1]);
    const std::lock_guard<std::mutex> guard(lock);
    answers[static_cast<std::size_t>(rank)] = answer;
  });
  for (const auto& answer : answers)
    EXPECT_EQ(answer, "8 2199023255552 1.5 42 'rank 0's settings' 0,-1,-2 3,-3");
}

class ProtocolCrash : public ::testing::TestWithParam<Shape> {};

TEST_P(ProtocolCrash, EveryEffectOfACheckpointOnEveryRank) {
  const Shape shape = GetParam();
  Counts counts;
  for (int victim = 0; victim < shape.ranks; ++victim) {
    const int effects = count_effects(shape, victim, 3, 3);
    ASSERT_GT(effects, 5);
    for (int at = 1; at <= effects; ++at) {
      for (const Schedule schedule : schedules(victim * 1000 + at)) {
        for (const Loss loss : {Loss::process, Loss::node, Loss::beyond}) {
          // A group of one tolerates no loss of memory: its node lost is `beyond`.
          if (loss == Loss::node && shape.parity == 0) continue;
          for (const bool scribble : {false, true}) {
            if (loss == Loss::beyond && scribble) continue;  // refused either way
            const std::string where = fmt::format(
                "{}: rank {} crashes at effect {} of checkpoint 3 (others: {}), "
                "{} loss{}",
                describe(shape), victim, at, describe(schedule), loss_name(loss),
                scribble ? ", regions written before recovery" : "");
            Job job(shape);
            Launch first;
            first.until = 3;
            first.fault = Fault{victim, 3, at, false};
            const auto crashed = job.run(first, schedule);
            if (any_hung(crashed) || !crashed[static_cast<std::size_t>(victim)].crashed) {
              ++counts.cases;
              ++counts.hung;
              counts.failures.push_back(where + ": the faulty launch" + summary(crashed));
              continue;
            }
            // A checkpoint that returned to the program on any rank is never lost.
            const bool returned = std::any_of(crashed.begin(), crashed.end(), [](const Outcome& o) {
              return o.last_committed == 3;
            });
            const auto lost = lost_ranks(job, victim, loss);
            for (const int r : lost)
              job.lose(r);
            std::map<int, RankMemory> before;
            for (int r = 0; r < shape.ranks; ++r) {
              if (std::find(lost.begin(), lost.end(), r) == lost.end()) before[r] = job.memory(r);
            }
            Launch again;
            again.until = 4;
            again.scribble = scribble;
            const auto relaunched = job.run(again);
            if (loss == Loss::beyond) {
              ++counts.cases;
              const bool refused =
                  std::all_of(relaunched.begin(), relaunched.end(), [](const Outcome& o) {
                    return !o.crashed && !o.hung && o.error == SKT_ERR_UNRECOVERABLE;
                  });
              bool untouched = true;
              for (const auto& [r, m] : before) {
                untouched = untouched && m.checkpoint == job.memory(r).checkpoint &&
                            m.control == job.memory(r).control;
              }
              if (any_hung(relaunched)) {
                ++counts.hung;
                counts.failures.push_back(where + ": hung" + summary(relaunched));
              } else if (refused && untouched) {
                ++counts.refused;
              } else {
                counts.fail(where + (untouched ? "" : ": a survivor's checkpoint was touched") +
                            summary(relaunched));
              }
              continue;
            }
            const bool may_refuse =
                scribble || (shape.mode == Mode::single && loss != Loss::process);
            judge(counts, where, relaunched, returned ? 3 : 2, 4, may_refuse);
            if (counts.wrong > 0 || relaunched[0].error != SKT_OK) continue;
            // The state the recovery left is a committed one: a plain relaunch gets epoch 4.
            Launch third;
            third.until = 4;
            const auto last = job.run(third);
            if (std::any_of(last.begin(), last.end(), [](const Outcome& o) {
                  return o.restored != 4 || !o.exact || o.error != SKT_OK;
                })) {
              counts.fail(where + ": the relaunch after the recovery" + summary(last));
            }
          }
        }
      }
    }
  }
  report(shape, "crash at every effect of a checkpoint", counts);
}

TEST_P(ProtocolCrash, EveryEffectOfARecoveryOnEveryRank) {
  const Shape shape = GetParam();
  Counts counts;
  const int victim = 1;
  const int effects = count_effects(shape, victim, 3, 3);
  // The first failure: the victim's node is lost at points spread over checkpoint 3; in a group of
  // one, which rebuilds nothing, the victim crashes without losing memory.
  const bool node_lost = shape.parity > 0;
  for (const int first_at : {1, effects / 3, 2 * effects / 3, effects}) {
    for (int second = 0; second < shape.ranks; ++second) {
      for (const bool node_again : {false, true}) {
        // A second node would be beyond xor.
        if (node_again && (second != victim || !node_lost)) continue;
        // The recovery's effects on `second` after that failure.
        int recovery_effects = 0;
        {
          Job job(shape);
          Launch first;
          first.until = 3;
          first.fault = Fault{victim, 3, first_at, false};
          job.run(first);
          if (node_lost) job.lose(victim);
          Launch count;
          count.until = 3;
          count.count_effects_of = {second};
          count.count_activity = 0;
          recovery_effects = job.run(count)[static_cast<std::size_t>(second)].effects;
        }
        for (int at = 1; at <= recovery_effects; ++at) {
          const std::string where = fmt::format(
              "{}: {} of rank {} lost at effect {} of checkpoint 3, then rank {} {} "
              "at effect {} of the recovery",
              describe(shape), node_lost ? "node" : "process", victim, first_at, second,
              node_again ? "loses its node" : "crashes", at);
          Job job(shape);
          Launch first;
          first.until = 3;
          first.fault = Fault{victim, 3, first_at, false};
          const auto crashed = job.run(first);
          const bool returned = std::any_of(crashed.begin(), crashed.end(),
                                            [](const Outcome& o) { return o.last_committed == 3; });
          if (node_lost) job.lose(victim);
          Launch recovering;
          recovering.until = 3;
          recovering.fault = Fault{second, 0, at, false};
          const auto interrupted = job.run(recovering);
          if (any_hung(interrupted)) {
            ++counts.cases;
            ++counts.hung;
            counts.failures.push_back(where + ": hung" + summary(interrupted));
            continue;
          }
          if (node_again) job.lose(second);
          Launch again;
          again.until = 4;
          judge(counts, where, job.run(again), returned ? 3 : 2, 4, shape.mode == Mode::single);
        }
      }
    }
  }
  EXPECT_GT(counts.cases, 0);
  report(shape, "crash at every effect of a recovery", counts);
}

TEST_P(ProtocolCrash, AnErrorOnOneRankInAnyCollectivePhaseIsTheSameErrorEverywhere) {
  const Shape shape = GetParam();
  Counts counts;
  for (int rank = 0; rank < shape.ranks; ++rank) {
    for (const int activity : {3, 0}) {
      // During the restore of a job whose rank 0 crashed in the middle of checkpoint 3, or
      // during checkpoint 3 itself.
      const int effects = activity == 3 ? count_effects(shape, rank, 3, 3) : [&] {
        Job job(shape);
        Launch first;
        first.until = 3;
        first.fault = Fault{0, 3, 8, false};
        job.run(first);
        Launch count;
        count.until = 3;
        count.count_effects_of = {rank};
        count.count_activity = 0;
        return job.run(count)[static_cast<std::size_t>(rank)].effects;
      }();
      for (int at = 1; at <= effects; ++at) {
        const std::string where =
            fmt::format("{}: rank {} fails at effect {} of {}", describe(shape), rank, at,
                        activity == 3 ? "checkpoint 3" : "a recovery");
        Job job(shape);
        if (activity == 0) {
          Launch first;
          first.until = 3;
          first.fault = Fault{0, 3, 8, false};
          job.run(first);
        }
        Launch failing;
        failing.until = 3;
        failing.fault = Fault{rank, activity, at, true};
        const auto outs = job.run(failing);
        ++counts.cases;
        if (any_hung(outs)) {
          ++counts.hung;
          counts.failures.push_back(where + ": hung" + summary(outs));
          continue;
        }
        const bool same = std::all_of(outs.begin(), outs.end(), [&](const Outcome& o) {
          return !o.crashed && o.error == outs[0].error && o.message == outs[0].message;
        });
        if (!same) {
          counts.fail(where + ": the ranks ended differently" + summary(outs));
          continue;
        }
        // Whatever the failure left, a relaunch restores a committed epoch exactly.
        Launch again;
        again.until = 4;
        const auto relaunched = job.run(again);
        --counts.cases;
        judge(counts, where + ", then relaunched", relaunched, 2, 4, false);
      }
    }
  }
  report(shape, "an error on one rank in every collective phase", counts);
}

// The job's end (skt_finalize discarding it), interrupted at every effect of every rank, and the
// program run again: nobody recorded the end yet (or only on the node lost), and epoch 3 comes back
// bit for bit (from the group where the victim's node was lost too); someone did, and the job
// starts afresh as a completed one does, whatever the others left. Never a refusal, a hang or
// another epoch.
TEST_P(ProtocolCrash, EveryEffectOfTheJobsEndOnEveryRank) {
  const Shape shape = GetParam();
  Counts counts;
  for (int victim = 0; victim < shape.ranks; ++victim) {
    const int effects = count_effects(shape, victim, kFinishing, 3, true);
    ASSERT_GE(effects, 3);  // two barriers and the fault point, the marker between them
    for (int at = 1; at <= effects; ++at) {
      for (const Schedule schedule : schedules(victim * 1000 + at)) {
        for (const Loss loss : {Loss::process, Loss::node}) {
          if (loss == Loss::node && shape.parity == 0) continue;
          const std::string where =
              fmt::format("{}: rank {} crashes at effect {} of the job's end (others: {}), {} loss",
                          describe(shape), victim, at, describe(schedule), loss_name(loss));
          ++counts.cases;
          Job job(shape);
          Launch first;
          first.until = 3;
          first.finish = true;
          first.fault = Fault{victim, kFinishing, at, false};
          const auto crashed = job.run(first, schedule);
          if (any_hung(crashed) || !crashed[static_cast<std::size_t>(victim)].crashed) {
            ++counts.hung;
            counts.failures.push_back(where + ": the faulty launch" + summary(crashed));
            continue;
          }
          for (const int r : lost_ranks(job, victim, loss))
            job.lose(r);
          // Recorded: a control block that is left says so, or a rank went on to remove its
          // segments (once every rank had recorded it). A record only on the lost node is gone
          // with it, and the job resumes before its end, which it then does again.
          bool recorded = false;
          for (int r = 0; r < shape.ranks; ++r) {
            const RankMemory& m = job.memory(r);
            const auto state = m.present ? read_control(m.control.data()) : std::nullopt;
            recorded = recorded || (!m.present && crashed[static_cast<std::size_t>(r)].finished) ||
                       (state && state->finished >= 0);
          }
          Launch again;
          again.until = 4;
          const auto outs = job.run(again);
          if (any_hung(outs)) {
            ++counts.hung;
            counts.failures.push_back(where + ": the relaunch" + summary(outs));
            continue;
          }
          const std::int64_t expected = recorded ? 0 : 3;
          const bool right = std::all_of(outs.begin(), outs.end(), [&](const Outcome& o) {
            return !o.crashed && o.error == SKT_OK && o.restored == expected && o.exact &&
                   o.last_committed == 4;
          });
          if (!right) {
            counts.fail(fmt::format("{}: expected {}{}", where,
                                    recorded ? "a fresh start" : "epoch 3", summary(outs)));
            continue;
          }
          ++counts.exact;
        }
      }
    }
  }
  report(shape, "the job's end", counts);
}

// A bit flipped in a survivor's memory while a lost member is rebuilt: its chunks fail their
// digests as they stream to the rebuilt rank (or as its own group verifies them). One bit at
// points spread over the checkpoint segment (copies, checksums, digests) of the lost member's
// group partner and of a rank of another group, and in their workspaces. Every relaunch restores
// epoch 3 bit for bit. Where the partner's flipped item leaves a row with more bad items than the
// code tolerates, it may instead be refused with SKT_ERR_UNRECOVERABLE on every rank, or, in the
// double mode, which keeps epoch 2 whole, restore epoch 2 bit for bit, every rank saying why epoch
// 3 could not be. A workspace is put right from its copy, never refused.
TEST_P(ProtocolCrash, ABitFlippedInASurvivorWhileARankIsRebuilt) {
  const Shape shape = GetParam();
  if (shape.parity == 0) GTEST_SKIP() << "a group of one rebuilds nothing";
  Counts counts;
  const int victim = 1;
  const std::vector<int> group = Job(shape).group_of(victim);
  const int partner = group[(std::find(group.begin(), group.end(), victim) - group.begin() + 1) %
                            static_cast<std::ptrdiff_t>(group.size())];
  std::vector<int> flipped_ranks{partner};
  for (int r = 0; r < shape.ranks; ++r) {
    if (std::find(group.begin(), group.end(), r) == group.end()) {
      flipped_ranks.push_back(r);  // another group's: its own members mend it
      break;
    }
  }
  constexpr int kPoints = 8;
  for (const int flipped : flipped_ranks) {
    for (const bool in_checkpoint : {true, false}) {
      for (int point = 0; point < kPoints; ++point) {
        Job job(shape);
        Launch first;
        first.until = 3;
        job.run(first);
        job.lose(victim);
        std::vector<std::byte>& bytes =
            in_checkpoint ? job.memory(flipped).checkpoint : job.memory(flipped).regions;
        const std::size_t at = (bytes.size() - 1) * static_cast<std::size_t>(point) / (kPoints - 1);
        bytes[at] ^= std::byte{0x08};
        const std::string where = fmt::format(
            "{}: rank {}'s node lost after checkpoint 3, bit 3 of byte {} of {} flipped in rank "
            "{}'s {}",
            describe(shape), victim, at, bytes.size(), flipped,
            in_checkpoint ? "checkpoint segment" : "workspace");
        const bool beyond_a_row = in_checkpoint && flipped == partner;
        Launch again;
        again.until = 4;
        const auto outs = job.run(again);
        judge(counts, where, outs, beyond_a_row ? 2 : 3, 4, beyond_a_row);
        const bool said_why = std::all_of(outs.begin(), outs.end(), [](const Outcome& o) {
          return o.restored != 2 || o.passed_over.starts_with("epoch 3: ");
        });
        if (!said_why) counts.fail(where + ": epoch 2 restored, epoch 3 not named" + summary(outs));
      }
    }
  }
  report(shape, "a bit flipped in a survivor while a rank is rebuilt", counts);
}

// Ranks placed otherwise than in the run that wrote the checkpoint (1 and 3 swapped between their
// nodes): each finds nothing of its own, and its checkpoint lies on a node of this launch. Refused
// on every rank with SKT_ERR_MISMATCH before anything is rebuilt or removed; placed right again,
// the job restores epoch 3 bit for bit.
TEST(Protocol, SwappedRanksAreRefusedWithEverySegmentKept) {
  const Shape shape;
  Job job(shape);
  Launch first;
  first.until = 3;
  job.run(first);
  const RankMemory one = job.memory(1);
  const RankMemory three = job.memory(3);
  Launch swapped;
  swapped.until = 4;
  swapped.placement = {0, 3, 2, 1};
  for (const Outcome& o : job.run(swapped)) {
    EXPECT_FALSE(o.crashed || o.hung);
    EXPECT_EQ(o.error, SKT_ERR_MISMATCH) << o.message;
    EXPECT_EQ(o.restored, -1);
  }
  for (const auto& [node, rank, before] : {std::tuple{1, 1, &one}, std::tuple{3, 3, &three}}) {
    const RankMemory* kept = job.left_on(node, rank);
    ASSERT_NE(kept, nullptr) << "rank " << rank << "'s segments were removed";
    EXPECT_TRUE(kept->regions == before->regions && kept->checkpoint == before->checkpoint &&
                kept->control == before->control)
        << "rank " << rank << "'s segments changed";
  }
  Launch placed_right;
  placed_right.until = 4;
  Counts counts;
  judge(counts, "placed right after the refusal", job.run(placed_right), 3, 4, false);
  EXPECT_EQ(counts.exact, 1);
  for (const auto& f : counts.failures)
    ADD_FAILURE() << f;
}

// Segments left on the wrong node: epoch 3 written on nodes 0-3, then
// rank 1 moved to node 4 and rebuilt there up to epoch 5; the launch under test puts rank 1 back on
// node 1 (its epoch-3 segments still there) and rank q of another group on node 4, which holds rank
// 1's epoch-5 segments: misplaced, not needed (rank 1 found its own), so q removes them before
// the groups rebuild ranks 1 and q. Each rank crashes at each effect of that launch's recovery,
// the removal's included; a relaunch with the same placement, or with rank 1 on node 4 again, must
// restore epoch 5 bit for bit.
struct MovedRanks {
  int q = -1;
  std::vector<int> spare_for_1, back_and_q_moved;
};

std::optional<MovedRanks> moved_ranks(const Shape& shape) {
  const Job probe(shape);
  const std::vector<int> group = probe.group_of(1);
  MovedRanks m;
  for (int r = 0; r < shape.ranks && m.q < 0; ++r) {
    if (std::find(group.begin(), group.end(), r) == group.end()) m.q = r;
  }
  // In rank 1's group, q and rank 1 are two losses.
  if (m.q < 0 && shape.parity >= 2) m.q = 3;
  if (m.q < 0 || shape.parity == 0) return std::nullopt;
  for (int r = 0; r < shape.ranks; ++r) {
    m.spare_for_1.push_back(r == 1 ? shape.ranks : r);
    m.back_and_q_moved.push_back(r == m.q ? shape.ranks : r);
  }
  return m;
}

// Epoch 3 on nodes 0-3, then epoch 5 with rank 1 on the spare node.
void write_then_move(Job& job, const MovedRanks& m) {
  Launch first;
  first.until = 3;
  job.run(first);
  Launch moved;
  moved.until = 5;
  moved.placement = m.spare_for_1;
  job.run(moved);
}

TEST_P(ProtocolCrash, EveryEffectOfRemovingMisplacedSegments) {
  const Shape shape = GetParam();
  const auto m = moved_ranks(shape);
  if (!m) GTEST_SKIP() << "the scenario loses two ranks of a group that tolerates one";
  Counts counts;
  {
    Job job(shape);
    write_then_move(job, *m);
    Launch back;
    back.until = 6;
    back.placement = m->back_and_q_moved;
    judge(counts, describe(shape) + ": rank 1 back, misplaced removed", job.run(back), 5, 6, false);
    EXPECT_EQ(job.left_on(shape.ranks, 1), nullptr) << "rank 1's segments on the spare remain";
  }
  for (int rank = 0; rank < shape.ranks; ++rank) {
    int effects = 0;
    {
      Job job(shape);
      write_then_move(job, *m);
      Launch count;
      count.until = 5;
      count.placement = m->back_and_q_moved;
      count.count_effects_of = {rank};
      count.count_activity = 0;
      effects = job.run(count)[static_cast<std::size_t>(rank)].effects;
    }
    for (int at = 1; at <= effects; ++at) {
      for (const Schedule& schedule : schedules(static_cast<std::uint64_t>(rank * 1000 + at))) {
        for (const bool same_placement : {true, false}) {
          const std::string where = fmt::format(
              "{}: rank {} crashes at effect {} of the recovery that removes rank 1's misplaced "
              "segments ({}), relaunched {}",
              describe(shape), rank, at, describe(schedule),
              same_placement ? "alike" : "with rank 1 on the spare again");
          Job job(shape);
          write_then_move(job, *m);
          Launch back;
          back.until = 5;
          back.placement = m->back_and_q_moved;
          back.fault = Fault{rank, 0, at, false};
          const auto crashed = job.run(back, schedule);
          if (any_hung(crashed)) {
            ++counts.cases;
            ++counts.hung;
            counts.failures.push_back(where + ": hung" + summary(crashed));
            continue;
          }
          Launch again;
          again.until = 6;
          again.placement = same_placement ? m->back_and_q_moved : m->spare_for_1;
          judge(counts, where, job.run(again), 5, 6, false);
        }
      }
    }
  }
  report(shape, "crash at every effect of removing misplaced segments", counts);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ProtocolCrash,
    ::testing::Values(Shape{Mode::self, enc::Scheme::xor_parity, 2, 1, 4, false},
                      Shape{Mode::self, enc::Scheme::xor_parity, 2, 1, 4, true},
                      Shape{Mode::self, enc::Scheme::xor_parity, 1, 0, 2, true},
                      Shape{Mode::self, enc::Scheme::xor_parity, 4, 1, 4, false},
                      Shape{Mode::self, enc::Scheme::reed_solomon, 4, 2, 4, true},
                      Shape{Mode::self, enc::Scheme::sum, 2, 1, 4, false},
                      Shape{Mode::twin, enc::Scheme::xor_parity, 2, 1, 4, false},
                      Shape{Mode::twin, enc::Scheme::reed_solomon, 4, 2, 4, false},
                      Shape{Mode::single, enc::Scheme::xor_parity, 2, 1, 4, false},
                      Shape{Mode::single, enc::Scheme::reed_solomon, 4, 2, 4, false}),
    [](const ::testing::TestParamInfo<Shape>& info) {
      std::string name = describe(info.param);
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace skt::sim
