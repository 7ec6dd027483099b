// What a launch checks before it takes memory: checkpoints of the job left on the wrong nodes, and
// whether the machine (and each memory cgroup holding a rank) can hold what the job's ranks there
// are about to take.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "libselfckpt/internal/memory.hpp"
#include "libselfckpt/internal/planner.hpp"
#include "libselfckpt/src/decision.hpp"
#include "libselfckpt/src/job.hpp"

namespace skt {

// Collective: the checkpoints of the job on this launch's nodes held for ranks it places
// elsewhere (each node's first rank reports those of its node).
std::vector<Misplaced> gather_misplaced(Job& job);

// Once a launch goes ahead without them, the misplaced segments (both kinds) are of no use and
// would hold their nodes' memory: the rank that reported each removes it.
void remove_misplaced(const Job& job, std::span<const Misplaced> misplaced);

// The bytes of memory this job's ranks are about to take: those on this rank's machine, and those
// in each limited memory cgroup holding this rank (a batch system's limit on the job).
struct MemoryDemand {
  std::uint64_t machine = 0;
  // What other processes' segments on this machine may still take (promised_to_others).
  std::uint64_t elsewhere = 0;
  std::vector<std::pair<MemoryLimit, std::uint64_t>> cgroups;
};

// Collective over the job: the demand, of which `mine` is this rank's; `own_segments` are the ids
// of this rank's segments (-1: none), which the count of other processes' segments leaves out.
MemoryDemand memory_demand(Job& job, std::uint64_t mine, std::span<const int> own_segments);

// Refuses (SKT_ERR_NOMEM) what the machine or a cgroup cannot hold: a segment the kernel grants
// each rank alone can, with the others', exhaust the memory while its pages are mapped.
void refuse_beyond_memory(const Job& job, const MemoryDemand& demand);

// A fresh start's warning where the groups are not of the size asked: larger (the job's ranks
// would leave a group too small), smaller (a node holds more ranks than groups of that size
// make), or one group of the whole job.
void warn_of_other_group_sizes(const Job& job, const GroupPlan& plan);

}  // namespace skt
