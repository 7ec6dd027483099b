// What a job leaves on its nodes, found and removed: its segments (skt-shm), the memory reserved
// for it on the spares (warm spares), and its drained epochs (skt-drain).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/cli.hpp"
#include "daemon/launch.hpp"
#include "daemon/log.hpp"

namespace skt::run {

// What skt-shm list shows of a job on the nodes of a launch.
struct SegmentsFound {
  int count = 0;
  // By rank of the launch, the node that holds the rank's segments; empty where none is seen.
  // Nothing when a rank's segments lie on two nodes, or a rank beyond the launch's has some.
  std::optional<std::vector<std::string>> node_of_rank;
  // By rank of the launch, its group, as the checkpoints found say it; -1 where none does.
  std::vector<int> group_of_rank;
  // By rank of the launch, the bytes of its segments seen (the job's and its sub-jobs'); 0 where
  // none is.
  std::vector<std::uint64_t> bytes_of_rank;
};

// The job's segments on the nodes of `plan`, its spares included, those of `leave_out` not (skt-shm
// list on each: through the launcher on other hosts, within --probe-timeout); nothing when that
// cannot be known.
std::optional<SegmentsFound> find_segments(const Options& o, const Plan& plan,
                                           const std::set<std::string>& leave_out = {});

// What new segments can take on each of `nodes` now (skt-shm room there, within
// --probe-timeout), less --keep-free, by node; a node that did not answer is not listed.
std::map<std::string, std::uint64_t> room_on_nodes(const Options& o, const Plan& plan,
                                                   const std::vector<std::string>& nodes);
// Where those figures come from, for the log: "skt-shm room[, less --keep-free N MiB]".
std::string room_source(const Options& o);

// Removes the job's segments, and what is reserved for it, on every node of the plan: exactly
// those of its tag and of the sub-jobs its ranks reported.
void clean_segments(const Options& o, const Plan& plan, const std::vector<std::string>& sub_jobs,
                    Log& log);

// Warm spares: on each of `spares`, memory for the segments of one node's ranks, made and written
// now (skt-shm reserve), so that ranks relaunched there take it over instead of paying for fresh
// memory in their recovery. Returns what to log.
std::string reserve_on_spares(const Options& o, const Plan& plan,
                              const std::vector<std::string>& spares);

// Whether a node skt-run lost may serve the job again as a spare: the launcher reaches it (within
// --probe-timeout), the job's segments left there from before its loss, superseded since (its
// ranks were rebuilt elsewhere), are removed (skt-shm clean), no other job of the user holds
// segments there, and its memory holds one node's segments of the job (skt-shm room, less
// --keep-free). Empty when it passes, else why not; `removed` says how many segments went.
std::string take_back_check(const Options& o, const Plan& plan, const std::string& node,
                            int& removed);

// The jobs other than `job` (and its sub-jobs) with segments in an `skt-shm list` output, and
// their bytes.
std::map<std::string, std::uint64_t> other_jobs_segments(const std::string& job,
                                                         const std::string& listing);

// Removes the job's drained epochs: a job started afresh must not find an earlier run's drains,
// which it would refuse.
void clean_drains(const Options& o, const Plan& plan, const std::vector<std::string>& sub_jobs,
                  Log& log);

// How many drained epoch directories of the job skt-drain lists (on every node, for a directory
// per node); nothing when that cannot be known.
std::optional<int> drained_epoch_count(const Options& o, const Plan& plan, Log& log);

}  // namespace skt::run
