// A simulated job for the protocol's crash tests: N ranks as threads of this process, each running
// the real Protocol over its own memory (heap buffers standing for its two segments), through
// effects whose collectives meet at rendezvous points instead of MPI and whose group operations
// compute straight from every member's memory with the reference codecs (an implementation
// independent of the MPI pipeline).
//
// Any rank can be crashed at any of its effects: its thread stops there, before the effect, as a
// killed process would; the others then stop at their next effect, or run on to their next
// collective (as mpirun ends a job, sooner or later), leaving their memory as it got. A rank can
// instead be made to fail there with an error, which every rank must then report alike.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "encoders/codec.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/protocol.hpp"

namespace skt::sim {

// Thrown in a rank's thread where it dies; not an std::exception, so nothing in the protocol
// catches it.
struct Crashed {};
// A rendezvous that nobody can complete: a deadlock.
struct Hung {};

// One group operation's inputs from one member.
struct GroupCall {
  int member = 0;
  const enc::ChunkList* data = nullptr;
  std::byte* parity = nullptr;
  const enc::Incremental* incremental = nullptr;
  enc::Digests digests;
  const std::vector<std::uint64_t>* changed = nullptr;  // row masks: in
  enc::RowMasks* masks = nullptr;                       // row masks: out
  std::vector<int> lost;
  std::vector<std::uint64_t> skip;
  std::vector<enc::RowRepair> repairs;
  const enc::RebuildHooks* hooks = nullptr;
};

// How the ranks that did not crash stop once the job is dead: each gets a budget of effects it
// may still begin (0: it stops at once; more: it runs on, up to its next collective at most).
// The ranks take turns in `order`, one at a time, switching where they wait for each other, so
// that a case always runs the same way.
struct Schedule {
  bool reversed = false;  // turns go from the last rank to the first
  int budget = 0;         // effects the others may begin after the crash
  bool seeded = false;    // instead, a budget of 0..budget per rank from `seed`
  std::uint64_t seed = 0;
};

class World {
 public:
  World(int ranks, const Schedule& schedule);

  // A rank's thread begins and ends.
  void start(int rank);
  void finish(int rank);
  // Job-wide: every rank's bytes, in rank order.
  std::vector<std::vector<std::byte>> meet(int rank, std::vector<std::byte> mine);
  // A group's members meet; the last to come runs `compute` over every member's call.
  void group(int rank, int group, int size, GroupCall call,
             const std::function<void(std::vector<GroupCall>&)>& compute);
  // A member gave up inside a step: the others leave their group operations (until the job next
  // meets), as GroupLink's notices make them do.
  void abort_group(int group);
  // The job is being killed.
  void kill();
  bool dead();
  // Effects `rank` may still begin now that the job is dead.
  int budget(int rank) const;

 private:
  struct Meeting {
    std::uint64_t generation = 0;
    int arrived = 0;
    std::vector<std::vector<std::byte>> payloads;
    std::vector<std::vector<std::byte>> result;
  };
  struct GroupMeeting {
    std::uint64_t generation = 0;
    int arrived = 0;
    bool aborted = false;
    std::vector<GroupCall> calls;
    std::vector<int> waiting;
  };
  // Hands the turn to the next rank in order that can run; none: a deadlock, unless all ended.
  void pass(int from);
  // Waits at a rendezvous until `done`, then for the turn.
  void wait(std::unique_lock<std::mutex>& lock, int rank, const std::function<bool()>& done);

  int ranks_;
  Schedule schedule_;
  std::vector<int> order_;
  std::mutex mutex_;
  int turn_ = -1;
  std::vector<bool> waiting_, finished_;
  // One per rank: a rank sleeps on its own, woken only when it may have something to do.
  std::vector<std::condition_variable> wake_;
  void wake_all();
  bool dead_ = false;
  bool hung_ = false;
  Meeting meeting_;
  std::vector<GroupMeeting> groups_;
};

// The activity of a job's end (Launch::finish), for Fault and Launch::count_activity.
inline constexpr int kFinishing = 1000;

// Where a rank is to crash (or fail): at its `at`-th effect during `activity` (0: the restore;
// e > 0: the checkpoint to epoch e; kFinishing: the job's end).
struct Fault {
  int rank = -1;
  int activity = 0;
  int at = 0;
  bool raise = false;  // fail with an error instead of crashing
};

// Settings of a simulated job.
struct Shape {
  Mode mode = Mode::self;
  enc::Scheme scheme = enc::Scheme::xor_parity;
  int group_size = 2;
  int parity = 1;
  int ranks = 4;
  bool incremental = false;  // self mode: checkpoints declare what changed
};

std::string describe(const Shape& shape);

class Effects;

// What one rank keeps across launches: its segments, if it still has them.
struct RankMemory {
  bool present = false;
  std::vector<std::byte> stage;       // W: the staged private object
  std::vector<std::byte> regions;     // W: one region, "data"
  std::vector<std::byte> checkpoint;  // the checkpoint segment's data
  std::vector<std::byte> control;     // its first page: the control block
  Finding recorded;                   // what its checkpoint recorded of its group
  // Its workspace segment was removed and its checkpoint segment not (yet): a rank finding this
  // is lost, as the library judges a checkpoint without its workspace.
  bool workspace_removed = false;
};

// How a launch ended on one rank.
struct Outcome {
  bool crashed = false;  // died (or was killed) on the way
  bool hung = false;
  int error = SKT_OK;  // an error the program got
  std::string message;
  std::int64_t restored = -1;
  std::string passed_over;  // why newer epochs than the one restored could not be
  bool exact = false;  // right after the restore, W and the private object held that epoch's data
  std::int64_t last_committed = -1;  // the last checkpoint that returned to the program
  bool finished = false;             // the job's end returned to the program
  int effects = 0;                   // effects counted during the faulty activity
};

// The program: recovers, then checkpoints every epoch up to `until`, with the data of version v
// at epoch v. `scribble`: before recovering, it overwrites its region (as zero-filling containers
// do).
// `finish`: then it ends the job as skt_finalize discarding it does (finish_job, then each rank
// removes its segments); a relaunch judges what is left as Session does (completed_epoch).
struct Launch {
  std::int64_t until = 3;
  bool scribble = false;
  bool finish = false;
  std::optional<Fault> fault;
  // The node each rank runs on (empty: rank r on node r, nodes from 0 up). A rank's segments stay
  // on the node where they were made: a rank placed elsewhere finds nothing of its own, and the
  // first rank on a node holding another's reports them, as misplaced, and removes them once the
  // launch goes ahead without them.
  std::vector<int> placement;
  std::vector<int> count_effects_of;  // ranks whose effects are counted during `count_activity`
  int count_activity = -1;
};

class Job {
 public:
  explicit Job(Shape shape);
  std::vector<Outcome> run(const Launch& launch, const Schedule& schedule = {});
  // A lost node: the rank's segments are gone.
  void lose(int rank) { memory_[static_cast<std::size_t>(rank)] = RankMemory{}; }
  // The rank's segments on the node it last ran on.
  RankMemory& memory(int rank) { return memory_[static_cast<std::size_t>(rank)]; }
  // Its segments left on another node, if any.
  const RankMemory* left_on(int node, int rank) const;
  // Whether rank r's W holds exactly the data of version v (within the sum bound when
  // `approximate`), and its private object v.
  bool holds(int rank, std::int64_t version, bool approximate) const;
  const Shape& shape() const noexcept { return shape_; }
  std::size_t regions_bytes(int rank) const;
  std::vector<int> group_of(int rank) const;  // the ranks of its group, itself included

 private:
  void rank_main(World& world, int rank, const Launch& launch, Outcome& out);
  // Before a launch: each rank's segments where its node is (those it left elsewhere kept there).
  void place(const std::vector<int>& placement);
  // Collective: the segments of other ranks on this rank's node, when it is the first rank there.
  std::vector<Misplaced> gather_misplaced(skt::Effects& fx, int rank);
  // The rank removes those it reported, its workspace segment, then its checkpoint segment, as
  // remove_misplaced does: an effect each.
  void remove_misplaced(Effects& fx, int rank, const std::vector<Misplaced>& misplaced);
  friend class Effects;

  Shape shape_;
  Config config_;
  std::vector<std::string> nodes_;
  std::vector<RankMemory> memory_;
  std::vector<int> home_;                           // the node of each rank's memory_
  std::map<std::pair<int, int>, RankMemory> left_;  // (node, rank): segments left on other nodes
  std::mutex left_mutex_;
  std::vector<std::int64_t> private_version_;  // the program's private object, per rank
};

// Runs `body` on `ranks` simulated ranks at once (threads), each with the simulator's effects:
// for collectives outside the protocol, such as the storage level's. `launch.fault` crashes a rank
// at an effect of `body` (activity 0), and `schedule` says how the others stop; the outcomes say
// which ranks crashed or hung, and the error that ended `body` on a rank, if one did.
std::vector<Outcome> run_ranks(int ranks,
                               const std::function<void(skt::Effects& effects, int rank)>& body,
                               const Launch& launch = {}, const Schedule& schedule = {});

}  // namespace skt::sim
