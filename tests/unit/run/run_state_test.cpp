// skt-run's memory of a job (its state file, its lock, its default tag) and its watchdog, which
// tells a hung run from a slow one by what the ranks say.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "daemon/state.hpp"
#include "daemon/watch.hpp"

namespace skt::run {
namespace {

class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/skt-run-state-XXXXXX";
    path_ = ::mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JobState, RoundTripsThroughItsText) {
  JobState s;
  s.job = "run-0123456789ab";
  s.status = "stopped";
  s.launches = 3;
  s.ranklist = {"n1", "n5", "n3", "n5"};
  s.spares = {"n6"};
  s.cadence = 12.5;
  s.note = "stopped by signal 15";
  s.directory = "/scratch/my runs/100%\nnew";
  s.command = {"./heat3d", "", "a b", "50%", "line\r\nend", "%0A"};
  s.checkpointed = true;
  s.inherited = true;
  s.stalled_at = 7;
  s.nodes = {NodeRecord{"n2", Standing::returned, 1700000000, 1, 1700000600, 1700000700},
             NodeRecord{"n4", Standing::barred, 1700000900, 2, 0, 1700000700}};
  EXPECT_EQ(parse_state(format_state(s)), s);
  JobState none;
  none.job = "j";
  EXPECT_EQ(parse_state(format_state(none)), none);  // empty lists survive
}

TEST(JobState, RejectsWhatIsNotAState) {
  EXPECT_FALSE(parse_state("").has_value());  // no job
  EXPECT_FALSE(parse_state("job j\nlaunches two\n").has_value());
  EXPECT_FALSE(parse_state("job j\nlaunches -1\n").has_value());
  EXPECT_FALSE(parse_state("job j\ncolour blue\n").has_value());
  EXPECT_FALSE(parse_state("job j\nargument 100%\n").has_value());  // not an escape
  EXPECT_FALSE(parse_state("job j\ndirectory /a%zz\n").has_value());
  EXPECT_FALSE(parse_state("job j\ncheckpointed maybe\n").has_value());
  EXPECT_FALSE(parse_state("job j\ninherited 1\n").has_value());
  EXPECT_FALSE(parse_state("job j\nstalled-at -1\n").has_value());
  EXPECT_FALSE(parse_state("job j\nstalled-at 3x\n").has_value());
  EXPECT_FALSE(parse_state("job j\nnode n2 lost 1 1 1\n").has_value());  // a field missing
  EXPECT_FALSE(parse_state("job j\nnode n2 gone 1 1 1 0\n").has_value());
  EXPECT_FALSE(parse_state("job j\nnode n2 lost 1 -1 1 0\n").has_value());
}

TEST(NodePool, ALostNodeIsDueBackOnceItsQuarantineIsOver) {
  std::vector<NodeRecord> nodes;
  record_losses(nodes, {"n2"}, 1000, 600);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0], (NodeRecord{"n2", Standing::lost, 1000, 1, 1600, 0}));
  EXPECT_TRUE(due_back(nodes, 1599).empty());
  EXPECT_EQ(due_back(nodes, 1600), (std::vector<std::string>{"n2"}));
  mark_returned(nodes, "n2", 1700);
  EXPECT_EQ(nodes[0].standing, Standing::returned);
  EXPECT_TRUE(due_back(nodes, 5000).empty());  // among the spares, not due
}

TEST(NodePool, ANodeLostAgainWithinTheQuarantineAfterItCameBackIsBarred) {
  std::vector<NodeRecord> nodes;
  record_losses(nodes, {"n2", "n3"}, 1000, 600);
  mark_returned(nodes, "n2", 1600);
  mark_returned(nodes, "n3", 1600);
  // n2 fails 599 s after it came back: barred for good; n3 after 600 s: lost again.
  record_losses(nodes, {"n2"}, 2199, 600);
  record_losses(nodes, {"n3"}, 2200, 600);
  EXPECT_EQ(record_of(nodes, "n2")->standing, Standing::barred);
  EXPECT_EQ(record_of(nodes, "n3")->standing, Standing::lost);
  EXPECT_EQ(record_of(nodes, "n3")->losses, 2);
  EXPECT_EQ(due_back(nodes, 100000), (std::vector<std::string>{"n3"}));
  record_losses(nodes, {"n2"}, 5000, 600);  // barred stays barred
  EXPECT_EQ(record_of(nodes, "n2")->standing, Standing::barred);
  EXPECT_EQ(record_of(nodes, "n5"), nullptr);
}

TEST(NodePool, SaysWhyEachNodeIsWhereItIs) {
  std::vector<NodeRecord> nodes;
  record_losses(nodes, {"n2", "n4"}, 1000, 600);
  mark_returned(nodes, "n4", 1600);
  const std::vector<std::string> ranklist{"n1", "n1", "n3", "n4"}, spares{"n5"};
  EXPECT_EQ(standing_text(ranklist, spares, nodes, "n1", 1700), "ranks 0,1");
  EXPECT_EQ(standing_text(ranklist, spares, nodes, "n4", 1700),
            "rank 3, came back 100 s ago after 1 loss");
  EXPECT_EQ(standing_text(ranklist, spares, nodes, "n5", 1700), "spare");
  EXPECT_EQ(standing_text(ranklist, spares, nodes, "n2", 1500),
            "lost 500 s ago (1 loss); its quarantine ends in 100 s");
  EXPECT_EQ(standing_text(ranklist, spares, nodes, "n2", 1700),
            "lost 700 s ago (1 loss); its quarantine is over: taken back once it answers and "
            "passes its check (at the next probe while a run is up, or the next failure)");
  record_losses(nodes, {"n4"}, 1650, 600);
  EXPECT_EQ(standing_text({"n1"}, {}, nodes, "n4", 1700),
            "barred: lost again 50 s after it came back, within the quarantine (2 losses)");
}

TEST(JobState, ACheckpointResumesOnlyUnderTheCommandThatMadeIt) {
  JobState last;
  last.job = "heat";
  last.directory = "/runs";
  last.command = {"heat3d", "96", "96", "96", "100000", "10"};
  last.checkpointed = true;
  EXPECT_FALSE(command_changed(last, "/runs", last.command));
  EXPECT_TRUE(command_changed(last, "/runs", {"heat3d", "96", "96", "96", "100", "10"}));
  EXPECT_TRUE(command_changed(last, "/runs", {"heat3d", "96", "96", "96", "100000"}));
  EXPECT_TRUE(command_changed(last, "/other", last.command));  // its relative paths read elsewhere
  JobState older = last;  // written by a skt-run that kept no command: taken at its word
  older.command.clear();
  older.directory.clear();
  EXPECT_FALSE(command_changed(older, "/anywhere", {"anything"}));
  JobState refused = last;  // the program refused a mistyped argument before any checkpoint
  refused.checkpointed = false;
  EXPECT_FALSE(command_changed(refused, "/runs", {"heat3d", "96", "96", "96", "100", "10"}));
  JobState inherited = last;  // found without state: the program knows which command wrote it
  inherited.inherited = true;
  EXPECT_FALSE(command_changed(inherited, "/runs", {"heat3d", "96", "96", "96", "100", "10"}));
}

TEST(StateDir, SavesLoadsAndLetsOneSktRunDriveTheJob) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/job";
  {
    StateDir first(dir);
    EXPECT_FALSE(first.load().has_value());
    JobState s;
    s.job = "j";
    s.launches = 1;
    first.save(s);
    EXPECT_EQ(first.load(), s);
    try {
      StateDir second(dir);
      ADD_FAILURE() << "a second holder of the job's lock";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("pid {}", ::getpid())), std::string::npos)
          << e.what();
    }
  }
  StateDir again(dir);  // the lock went with its holder
  EXPECT_EQ(again.load()->launches, 1);
}

TEST(WriteWhole, ReplacesTheFileOrSaysWhyNotAndLeavesNothingHalfWritten) {
  TempDir temp;
  const std::string path = temp.path() + "/ranklist";
  write_whole(path, "0 n1\n");
  write_whole(path, "0 n2\n1 n3\n");
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "0 n2\n1 n3\n");
  try {
    write_whole(temp.path() + "/gone/state", "x");
    ADD_FAILURE() << "wrote into a directory that does not exist";
  } catch (const WriteError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot write " + temp.path() + "/gone/state.new: No such file or directory");
  }
  // A rename that fails (onto a directory) takes its temporary file with it.
  std::filesystem::create_directory(temp.path() + "/state");
  EXPECT_THROW(write_whole(temp.path() + "/state", "x"), WriteError);
  EXPECT_FALSE(std::filesystem::exists(temp.path() + "/state.new"));
}

TEST(DefaultJobTag, TheSameCommandInTheSamePlaceIsTheSameJob) {
  const auto tag = default_job_tag("/home/a", {"n1", "n2"}, 1, {"app", "--n", "4"});
  EXPECT_EQ(tag, default_job_tag("/home/a", {"n1", "n2"}, 1, {"app", "--n", "4"}));
  EXPECT_EQ(tag.size(), 16u);
  EXPECT_EQ(tag.rfind("run-", 0), 0u);
  EXPECT_NE(tag, default_job_tag("/home/b", {"n1", "n2"}, 1, {"app", "--n", "4"}));
  EXPECT_NE(tag, default_job_tag("/home/a", {"n1", "n3"}, 1, {"app", "--n", "4"}));
  EXPECT_NE(tag, default_job_tag("/home/a", {"n1", "n2"}, 2, {"app", "--n", "4"}));
  EXPECT_NE(tag, default_job_tag("/home/a", {"n1", "n2"}, 1, {"app", "--n4"}));
}

// As a library that does not say a context's process or a process's open contexts would.
Heard said(const std::string& job, int rank, const std::string& kind, std::uint64_t epoch = 0,
           int launch = 0) {
  return Heard{job, rank, launch, 1000 + rank, kind, epoch, rank, std::nullopt, {}};
}

// A process's beat, or its finalize report, as this library sends them: with its open contexts.
Heard process_says(int rank, const std::string& kind, int open_contexts) {
  Heard h = said("j", rank, kind);
  h.open_contexts = open_contexts;
  return h;
}

void each_rank_says(Watchdog& w, int ranks, const std::string& kind, double at,
                    std::uint64_t epoch = 0) {
  for (int r = 0; r < ranks; ++r)
    w.heard(said("j", r, kind, epoch), at);
}

// Every rank beats each second; commits come as the test says.
void beat_until(Watchdog& w, int ranks, double from, double to) {
  for (double t = from; t <= to; t += 1)
    each_rank_says(w, ranks, "beat", t);
}

// The watchdog calls the run hung at `now`, in words that hold `text`.
void expect_hung_saying(const Watchdog& w, double now, const std::string& text) {
  const auto why = w.hung(now);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find(text), std::string::npos) << *why;
}

TEST(Watchdog, ReadsTheLibrarysDatagrams) {
  const auto h = parse_heard("skt1 run-1+hpl 3 2 4242 commit 17\n");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->job, "run-1+hpl");
  EXPECT_EQ(h->rank, 3);
  EXPECT_EQ(h->launch, 2);
  EXPECT_EQ(h->pid, 4242);
  EXPECT_EQ(h->kind, "commit");
  EXPECT_EQ(h->epoch, 17u);
  EXPECT_EQ(h->process, 3);  // not said: the context's rank
  EXPECT_FALSE(h->open_contexts.has_value());
  const auto context = parse_heard("skt1 run-1+t0 1 0 4242 bye 0 5\n");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->process, 5);
  EXPECT_FALSE(context->open_contexts.has_value());
  const auto process = parse_heard("skt1 run-1 5 0 4242 live 0 2\n");
  ASSERT_TRUE(process.has_value());
  EXPECT_EQ(process->process, 5);
  EXPECT_EQ(process->open_contexts, 2);
  EXPECT_FALSE(parse_heard("skt2 j 0 0 1 beat 0").has_value());
  EXPECT_FALSE(parse_heard("skt1 j -1 0 1 beat 0").has_value());
  EXPECT_FALSE(parse_heard("skt1 j 0 0").has_value());
  EXPECT_TRUE(context->waiting_in.empty());
  const auto waiting = parse_heard("skt1 run-1 2 0 4242 beat 3 2 skt_checkpoint\n");
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->waiting_in, "skt_checkpoint");
  const auto garbled = parse_heard("skt1 run-1 2 0 4242 beat 3 2 \x1b[2Jskt\n");
  ASSERT_TRUE(garbled.has_value());
  EXPECT_TRUE(garbled->waiting_in.empty());
}

TEST(Watchdog, ASilentRankIsHungAndOneThatSaidByeIsNot) {
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 1);
  w.heard(said("j", 1, "hello"), 1);
  w.heard(said("j", 0, "beat"), 9);
  EXPECT_FALSE(w.hung(10).has_value());
  expect_hung_saying(w, 11.5, "rank 1 has been silent for 10.5 s");  // silent since 1
  w.heard(said("j", 1, "bye"), 11.6);
  w.heard(said("j", 0, "bye"), 11.6);
  w.heard(said("j", 1, "beat"), 11.7);  // a beat that overtook its bye
  EXPECT_FALSE(w.hung(100).has_value());
}

TEST(Watchdog, AContextWhoseByeWasLostIsNotASilentRank) {
  // skt-run stopped (Ctrl-Z) or busy while its socket filled up: skt-hpl's TAG+t0 said bye into a
  // full socket, and TAG+hpl goes on. skt-run used to call the run hung, end it and relaunch it.
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 1, limits, 0, 0);
  w.heard(said("j+hpl", 0, "hello"), 0);
  w.heard(said("j+t0", 0, "hello"), 0);
  for (double t = 0; t <= 100; t += 1) {
    w.heard(said("j+hpl", 0, "beat"), t);
    if (t <= 5) w.heard(said("j+t0", 0, "beat"), t);  // then its bye, lost
    w.heard(process_says(0, "live", t <= 5 ? 2 : 1), t);
  }
  EXPECT_FALSE(w.hung(100).has_value());
  EXPECT_TRUE(w.contexts_open());
  // The program's last context ends, its bye lost too: its process says none is open.
  w.heard(process_says(0, "live", 0), 101);
  EXPECT_FALSE(w.contexts_open());
  // Stopped now, it is silent after its work, not hung.
  EXPECT_FALSE(w.hung(120).has_value());
  EXPECT_TRUE(w.stuck_after_work(120).has_value());
}

TEST(Watchdog, AContextWhoseByeWasLostWaitsInMpiFinalizeUnwatched) {
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  each_rank_says(w, 2, "hello", 0);
  for (double t = 0; t <= 5; t += 1)
    each_rank_says(w, 2, "beat", t);
  // Rank 0's bye is lost; it enters MPI_Finalize and waits there for rank 1, still at work.
  w.heard(process_says(0, "finalize", 0), 5.5);
  for (double t = 6; t <= 100; t += 1)
    w.heard(said("j", 1, "beat"), t);
  EXPECT_FALSE(w.hung(100).has_value());
  // A context open through MPI_Finalize is watched there.
  Watchdog open("j", 0, 1, limits, 0, 0);
  open.heard(said("j", 0, "hello"), 0);
  open.heard(process_says(0, "finalize", 1), 1);
  EXPECT_TRUE(open.hung(11.5).has_value());
}

TEST(Watchdog, ABeatStandsForALostHello) {
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 0);  // rank 1's hello was lost
  for (double t = 1; t <= 5; t += 1)
    each_rank_says(w, 2, "beat", t);
  EXPECT_TRUE(w.contexts_open());
  for (double t = 6; t <= 20; t += 1)
    w.heard(said("j", 0, "beat"), t);  // rank 1 stopped at 5
  expect_hung_saying(w, 15.5, "rank 1 has been silent for 10.5 s");
}

TEST(Watchdog, AProcessSilentWhileContextsAreOpenIsAHang) {
  // Rank 1's every word of its context was lost, or its context ended while rank 0's is open:
  // stopped, its process goes silent, and rank 0 waits for it in vain.
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 0);
  for (double t = 0; t <= 5; t += 1)
    w.heard(process_says(1, "live", 0), t);
  for (double t = 0; t <= 30; t += 1)
    w.heard(said("j", 0, "beat"), t);
  EXPECT_FALSE(w.hung(15).has_value());
  expect_hung_saying(w, 15.5, "rank 1 has been silent for 10.5 s");
}

TEST(Watchdog, EachContextOfARankSpeaksForItself) {
  // skt-hpl: TAG+hpl lives through the run, TAG+t0 ends; a rank stopped after that is silent
  // in TAG+hpl.
  WatchLimits limits;
  limits.silence = 5;
  Watchdog w("j", 1, 1, limits, 0, 0);
  w.heard(said("j+hpl", 0, "hello", 0, 1), 1);
  w.heard(said("j+t0", 0, "hello", 0, 1), 1);
  w.heard(said("j+t0", 0, "bye", 0, 1), 2);
  w.heard(said("j+hpl", 0, "beat", 0, 1), 3);
  EXPECT_FALSE(w.hung(7).has_value());
  EXPECT_TRUE(w.hung(8.5).has_value());
}

TEST(Watchdog, OnlyThisJobAndLaunchCount) {
  WatchLimits limits;
  limits.silence = 5;
  Watchdog w("j", 2, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello", 0, 1), 1);   // the previous launch
  w.heard(said("jx", 0, "hello", 0, 2), 1);  // another job whose tag starts alike
  w.heard(said("j.2", 0, "hello", 0, 2), 1);
  w.heard(said("j", 7, "hello", 0, 2), 1);  // no such rank
  EXPECT_FALSE(w.anyone_started());
  EXPECT_FALSE(w.hung(100).has_value());  // nothing heard, before the startup bound
}

TEST(Watchdog, RanksThatNeverStartAreHungAfterTheStartupBound) {
  WatchLimits limits;
  limits.startup = 60;
  Watchdog w("j", 0, 3, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 1);
  w.heard(said("j", 2, "hello"), 1);
  for (double t = 2; t <= 60; t += 1) {
    w.heard(said("j", 0, "beat"), t);
    w.heard(said("j", 2, "beat"), t);
  }
  EXPECT_FALSE(w.hung(60).has_value());
  const auto why = w.hung(61);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("1 of the 3 ranks (rank 1 first) did not start within 60 s"),
            std::string::npos)
      << *why;
}

// Ranks 0 to ranks - 1 of job "j" say the same thing at the same time.
TEST(Watchdog, NoCheckpointForThreeCadencesIsADeadlock) {
  WatchLimits limits;
  limits.progress_floor = 30;
  Watchdog w("j", 0, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 0);
  w.heard(said("j", 1, "hello"), 0);
  EXPECT_FALSE(w.progress_bound().has_value());  // no cadence yet: no bound
  w.heard(said("j", 0, "commit", 1), 5);
  w.heard(said("j", 1, "commit", 1), 5.1);  // the same commit, told by another rank
  w.heard(said("j", 0, "commit", 2), 25);
  w.heard(said("j", 1, "commit", 2), 25.2);
  EXPECT_DOUBLE_EQ(w.cadence(), 20);
  EXPECT_DOUBLE_EQ(*w.progress_bound(), 60);  // 3 x 20, above the floor of 30
  beat_until(w, 2, 26, 85);
  EXPECT_FALSE(w.hung(85).has_value());
  beat_until(w, 2, 86, 86);
  const auto why = w.hung(86);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("no checkpoint for 61.0 s"), std::string::npos) << *why;
}

TEST(Watchdog, AStallSaysWhichCallsTheRanksWaitInAndTheEpochItReached) {
  WatchLimits limits;
  limits.silence = 5;
  limits.progress_fixed = 10;
  Watchdog w("j", 0, 4, limits, 0, 0);
  each_rank_says(w, 4, "recovered", 1, 3);
  each_rank_says(w, 4, "commit", 2, 4);
  // Ranks 0, 1 and 3 wait in skt_checkpoint from t = 3; rank 2 is in the program's own
  // communication, beating without a call.
  const auto beats_until = [&](double to) {
    for (double t = 3; t <= to; t += 1) {
      for (const int rank : {0, 1, 3}) {
        auto beat =
            parse_heard(fmt::format("skt1 j {} 0 4242 beat 4 {} skt_checkpoint", rank, rank));
        ASSERT_TRUE(beat.has_value());
        w.heard(*beat, t);
      }
      w.heard(said("j", 2, "beat", 4), t);
    }
  };
  beats_until(12);
  EXPECT_FALSE(w.hung(12).has_value());
  EXPECT_FALSE(w.stalled_at(12).has_value());
  beats_until(13);
  expect_hung_saying(w, 13,
                     "the selfckpt calls the ranks wait in for the others: skt_checkpoint "
                     "on ranks 0-1 and 3, none on rank 2");
  EXPECT_EQ(w.stalled_at(13), 4u);  // its commit, not the epoch it restored
  // Ranks that missed their last three beats may be stopping, not stalled: a bound shorter than
  // --silence sees them first.
  ASSERT_TRUE(w.hung(16.5).has_value());
  EXPECT_FALSE(w.stalled_at(16.5).has_value());
  // A rank that falls silent is a hang of another kind: not a stall of the program.
  EXPECT_NE(w.hung(19)->find("rank 0 has been silent"), std::string::npos) << *w.hung(19);
  EXPECT_FALSE(w.stalled_at(19).has_value());

  // A run that restored epoch 3 and committed nothing stalled at 3; with no rank in a call, its
  // words name none.
  Watchdog restored("j", 0, 2, limits, 0, 0);
  each_rank_says(restored, 2, "recovered", 1, 3);
  for (double t = 2; t <= 12; t += 1)
    each_rank_says(restored, 2, "beat", t, 3);
  EXPECT_EQ(restored.stalled_at(12), 3u);
  EXPECT_EQ(restored.hung(12)->find("wait in"), std::string::npos) << *restored.hung(12);
  // And a run with no checkpoint at all stalled at 0.
  Watchdog fresh("j", 0, 1, limits, 0, 0);
  fresh.heard(said("j", 0, "hello"), 0);
  for (double t = 1; t <= 11; t += 1)
    fresh.heard(said("j", 0, "beat"), t);
  EXPECT_EQ(fresh.stalled_at(11), 0u);
}

TEST(Watchdog, TheFloorAndTheFixedBound) {
  WatchLimits limits;
  limits.progress_floor = 300;
  Watchdog fast("j", 0, 1, limits, 2, 0);  // a cadence of 2 s from earlier runs
  EXPECT_DOUBLE_EQ(*fast.progress_bound(), 300);
  limits.progress_fixed = 45;
  Watchdog fixed("j", 0, 1, limits, 0, 0);
  EXPECT_DOUBLE_EQ(*fixed.progress_bound(), 45);
  fixed.heard(said("j", 0, "hello"), 0);
  beat_until(fixed, 1, 1, 46);
  ASSERT_TRUE(fixed.hung(46).has_value());
  EXPECT_NE(fixed.hung(46)->find("--hang-timeout"), std::string::npos);
}

TEST(Watchdog, ReadsAnExitReport) {
  const auto h = parse_heard("skt1 j 1 0 4243 exit 3\n");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->kind, "exit");
  EXPECT_EQ(h->epoch, 3u);
}

TEST(Watchdog, AProgramWithNoContextLeftIsNotWatched) {
  // Its work after the last checkpoint (writing its results, say) may take hours.
  WatchLimits limits;
  limits.progress_fixed = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 0);
  w.heard(said("j", 1, "hello"), 0);
  w.heard(said("j", 0, "bye"), 1);
  w.heard(said("j", 1, "bye"), 1);
  w.heard(said("j", 0, "exit", 0), 2);
  EXPECT_FALSE(w.hung(1000).has_value());
  EXPECT_FALSE(w.launcher_overdue(1000).has_value());  // rank 1 has not exited
  EXPECT_FALSE(w.exit_code().has_value());
}

TEST(Watchdog, ALauncherThatOutlivesEveryRanksExitIsOverdue) {
  WatchLimits limits;
  limits.progress_fixed = 20;
  Watchdog w("j", 0, 3, limits, 0, 0);
  each_rank_says(w, 3, "hello", 0);
  w.heard(said("j", 2, "exit", 0), 4);  // exits without its bye: gone, not silent
  w.heard(said("j", 0, "bye"), 5);
  w.heard(said("j", 1, "bye"), 5);
  w.heard(said("j", 1, "exit", 3), 6);
  EXPECT_FALSE(w.launcher_overdue(6).has_value());
  EXPECT_FALSE(w.exit_code().has_value());
  w.heard(said("j", 0, "exit", 0), 7);
  EXPECT_FALSE(w.hung(1000).has_value());  // every rank exited: not hung, whatever the time
  EXPECT_FALSE(w.launcher_overdue(27).has_value());
  const auto why = w.launcher_overdue(27.5);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("every rank exited 20.5 s ago, but the launcher did not end within 20.0 s"),
            std::string::npos)
      << *why;
  EXPECT_EQ(w.exit_code(), 3);  // the first nonzero code, in rank order
}

TEST(Watchdog, ARankStuckInMpiFinalizeOnceEveryRankReachedItIsHung) {
  WatchLimits limits;
  limits.progress_floor = 30;
  Watchdog w("j", 0, 3, limits, 0, 0);
  each_rank_says(w, 3, "hello", 0);
  each_rank_says(w, 3, "bye", 5);
  // Ranks 1 and 2 wait in MPI_Finalize while rank 0 writes its results, for as long as it takes.
  w.heard(said("j", 1, "finalize"), 6);
  w.heard(said("j", 2, "finalize"), 6);
  EXPECT_FALSE(w.stuck_in_finalize(1000).has_value());
  // Rank 0 done: MPI_Finalize ends once every rank entered it, unless a frozen daemon holds it.
  w.heard(said("j", 0, "finalize"), 1001);
  w.heard(said("j", 0, "exit", 0), 1002);
  w.heard(said("j", 1, "finalize"), 1010);  // a repeat says nothing new
  EXPECT_FALSE(w.stuck_in_finalize(1032).has_value());
  const auto why = w.stuck_in_finalize(1032.5);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("every rank reached MPI_Finalize 30.5 s ago, but rank 1 has not left it "
                      "within 30.0 s (a frozen MPI daemon or node?)"),
            std::string::npos)
      << *why;
  // Every context closed: the work ended, which is not a hang to relaunch (it would start over).
  EXPECT_FALSE(w.contexts_open());
  EXPECT_FALSE(w.hung(1032.5).has_value());
  // A suspended job's ranks are not stuck in it: their time counts from the pardon.
  w.pardon(1032.5);
  EXPECT_FALSE(w.stuck_in_finalize(1062.5).has_value());
  ASSERT_TRUE(w.stuck_in_finalize(1063).has_value());
  EXPECT_FALSE(w.launcher_overdue(2000).has_value());
  // Once they all exited, the launcher's time is what counts.
  w.heard(said("j", 1, "exit", 0), 1040);
  w.heard(said("j", 2, "exit", 0), 1040);
  EXPECT_FALSE(w.stuck_in_finalize(2000).has_value());
  EXPECT_TRUE(w.launcher_overdue(2000).has_value());
}

TEST(Watchdog, TheWorkEndedOnceEveryRankReachedMpiFinalizeWithNoContextOpen) {
  // What a launcher that fails then ends is work done: mpirun interrupted (SIGTERM) exits 1 and
  // ends ranks still in MPI_Finalize. skt-run used to relaunch such a run and do the work again.
  Watchdog w("j", 0, 3, WatchLimits{}, 0, 0);
  each_rank_says(w, 3, "hello", 0);
  w.heard(said("j", 0, "bye"), 5);
  w.heard(said("j", 1, "bye"), 5);
  w.heard(said("j", 0, "finalize"), 6);
  w.heard(said("j", 1, "exit", 0), 6);
  EXPECT_FALSE(w.work_ended());  // rank 2 is at work
  w.heard(said("j", 2, "bye"), 7);
  EXPECT_FALSE(w.work_ended());  // and has not entered MPI_Finalize
  w.heard(said("j", 2, "finalize"), 8);
  EXPECT_TRUE(w.work_ended());
  EXPECT_FALSE(w.exit_code().has_value());    // two ranks never said how they exited
  EXPECT_FALSE(w.failed_exit().has_value());  // and the one that did succeeded
  w.heard(said("j", 2, "exit", 4), 9);        // its verdict, which ends the others' in mpirun
  EXPECT_EQ(w.failed_exit(), 4);
  EXPECT_FALSE(w.exit_code().has_value());  // still not every rank's
  // In MPI_Finalize with a context open (never closed), its work may not have ended.
  Watchdog open("j", 0, 1, WatchLimits{}, 0, 0);
  open.heard(said("j", 0, "hello"), 0);
  open.heard(process_says(0, "finalize", 1), 1);
  EXPECT_FALSE(open.work_ended());
}

TEST(Watchdog, ARankStoppedAfterItsLastContextBeforeMpiFinalizeIsStuckAfterItsWork) {
  // Its process beats (live) from a thread until MPI_Finalize: one that writes its results for
  // hours goes on beating; one stopped there (or on a frozen node) does not. skt-run used to wait
  // for it forever, the other ranks in MPI_Finalize.
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 2, limits, 0, 0);
  each_rank_says(w, 2, "hello", 0);
  each_rank_says(w, 2, "live", 1);
  each_rank_says(w, 2, "bye", 2);
  w.heard(said("j", 0, "finalize"), 2);
  w.heard(said("j", 0, "live"), 2.5);  // a beat that crossed the finalize report on the way
  for (double t = 3; t <= 1000; t += 1)
    w.heard(said("j", 1, "live"), t);  // rank 1 still at work, alive
  EXPECT_FALSE(w.stuck_after_work(1000).has_value());
  EXPECT_FALSE(w.stuck_after_work(1010).has_value());
  const auto why = w.stuck_after_work(1010.5);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("rank 1 has been silent for 10.5 s since its last selfckpt context ended, "
                      "before MPI_Finalize (stopped, or its node frozen)"),
            std::string::npos)
      << *why;
  EXPECT_FALSE(w.hung(1010.5).has_value());  // not a hang to relaunch: the work would start over
  // A suspended job's ranks are silent on purpose.
  w.pardon(1010.5);
  EXPECT_FALSE(w.stuck_after_work(1020).has_value());
  // Once it entered MPI_Finalize, or exited, its silence says nothing.
  w.heard(said("j", 1, "finalize"), 1021);
  w.heard(said("j", 1, "exit", 0), 1022);
  w.heard(said("j", 0, "exit", 0), 1022);
  w.heard(said("j", 1, "live"), 1023);  // a beat that crossed its exit report
  EXPECT_FALSE(w.stuck_after_work(5000).has_value());
}

TEST(Watchdog, AStoppedProcessWithAContextOpenIsAHangNotStuckAfterItsWork) {
  WatchLimits limits;
  limits.silence = 10;
  Watchdog w("j", 0, 1, limits, 0, 0);
  w.heard(said("j", 0, "hello"), 0);
  w.heard(process_says(0, "live", 1), 1);
  EXPECT_FALSE(w.stuck_after_work(100).has_value());
  ASSERT_TRUE(w.hung(100).has_value());
}

TEST(Watchdog, StuckInMpiFinalizeWithAContextOpenIsAHang) {
  // A program that calls MPI_Finalize before its context ends (a C++ context in main's scope):
  // its checkpoints are still there, and a relaunch resumes from them.
  WatchLimits limits;
  limits.progress_floor = 10;  // one commit: no cadence yet, so no bound on the time without one
  Watchdog w("j", 0, 2, limits, 0, 0);
  each_rank_says(w, 2, "hello", 0);
  each_rank_says(w, 2, "commit", 1, 1);
  each_rank_says(w, 2, "finalize", 2);
  beat_until(w, 2, 2, 12);
  EXPECT_FALSE(w.hung(12).has_value());
  EXPECT_TRUE(w.contexts_open());
  const auto why = w.hung(12.5);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("but rank 0 has not left it within 10.0 s"), std::string::npos) << *why;
}

TEST(Watchdog, APardonedSilenceCountsFromThePardon) {
  // A suspended Slurm job: its ranks stop beating, on purpose, for as long as it takes.
  WatchLimits limits;
  limits.silence = 10;
  limits.progress_floor = 30;
  Watchdog w("j", 0, 3, limits, 10, 0);  // cadence known: at most 30 s without a checkpoint
  each_rank_says(w, 2, "hello", 1);
  ASSERT_TRUE(w.hung(11.5).has_value());
  w.pardon(11.5);
  EXPECT_FALSE(w.hung(21.5).has_value());
  w.pardon(100);  // still suspended at 100
  EXPECT_FALSE(w.hung(110).has_value());
  const auto silent = w.hung(110.5);
  ASSERT_TRUE(silent.has_value());
  EXPECT_NE(silent->find("has been silent for 10.5 s"), std::string::npos) << *silent;
  // Rank 2 never spoke: its 120 s to start count from the pardon too, and so do the 30 s without
  // a checkpoint.
  beat_until(w, 2, 101, 125);
  EXPECT_FALSE(w.hung(125).has_value());
  beat_until(w, 2, 126, 131);
  const auto stuck = w.hung(131);
  ASSERT_TRUE(stuck.has_value());
  EXPECT_NE(stuck->find("no checkpoint for 31.0 s"), std::string::npos) << *stuck;
}

TEST(Watchdog, ExitCodesOfZeroMakeARunThatSucceeded) {
  Watchdog w("j", 0, 2, WatchLimits{}, 0, 0);
  w.heard(said("j+hpl", 1, "hello"), 0);
  w.heard(said("j+hpl", 1, "exit", 0), 1);
  w.heard(said("j", 0, "exit", 0), 1);
  EXPECT_EQ(w.exit_code(), 0);
}

TEST(Watchdog, AJobHasACheckpointOnceOneIsCommittedOrRestored) {
  Watchdog fresh("j", 0, 2, WatchLimits{}, 0, 0);
  fresh.heard(said("j", 0, "hello"), 1);
  fresh.heard(said("j", 0, "recovered", 0), 1);  // a first launch: nothing restored
  EXPECT_FALSE(fresh.checkpointed());
  fresh.heard(said("j", 1, "commit", 1), 2);
  EXPECT_TRUE(fresh.checkpointed());
  Watchdog resumed("j", 1, 2, WatchLimits{}, 0, 0);
  resumed.heard(said("j", 0, "recovered", 3, 1), 1);
  EXPECT_TRUE(resumed.checkpointed());
}

TEST(Watchdog, TheRestoredEpochAndWhen) {
  Watchdog w("j", 1, 2, WatchLimits{}, 0, 0);
  w.heard(said("j", 1, "recovered", 4, 1), 2.5);
  w.heard(said("j", 0, "recovered", 4, 1), 2.7);
  EXPECT_EQ(w.restored(), 4u);
  EXPECT_DOUBLE_EQ(*w.restored_at(), 2.5);
}

}  // namespace
}  // namespace skt::run
