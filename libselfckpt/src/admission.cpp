#include "libselfckpt/src/admission.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>

#include "libselfckpt/internal/format.hpp"

namespace skt {

std::vector<Misplaced> gather_misplaced(Job& job) {
  std::vector<Misplaced> mine;
  const std::vector<std::string>& nodes = job.nodes();
  const std::string& here = job.node_of(job.rank());
  const bool first_on_node = std::find(nodes.begin(), nodes.end(), here) - nodes.begin() ==
                             static_cast<std::ptrdiff_t>(job.rank());
  if (!job.ephemeral() && first_on_node) {
    job.effects().agree([&] {
      std::vector<SegmentIdentity> elsewhere;
      for (int r = 0; r < job.nranks(); ++r) {
        if (job.node_of(r) != here)
          elsewhere.push_back(job.identity_of(r, SegmentKind::checkpoint));
      }
      for (const SegmentListing& s : list_segments_of(elsewhere)) {
        if (s.header.nranks != job.nranks()) continue;
        Misplaced m{.rank = s.header.identity.rank, .holder = job.rank()};
        if (const auto seen = Segment::attach(s.shmid, true)) {
          CheckpointInfo info;
          const auto state = read_control(seen->base());
          if (state && state->finished < 0 && decode_checkpoint_info(seen->base(), &info)) {
            m.newest = std::max(state->committed, state->agreed);
            m.committed = state->committed;
            m.lineage = info.lineage;
          }
        }
        mine.push_back(m);
      }
    });
  } else {
    job.effects().agree([] {});
  }
  return job.effects().gather_lists(std::span<const Misplaced>(mine));
}

void remove_misplaced(const Job& job, std::span<const Misplaced> misplaced) {
  if (job.rank() == 0 && !misplaced.empty()) {
    std::string list;
    for (const auto& m : misplaced) {
      list += fmt::format("{}node {} held rank {}'s (on node {} now)", list.empty() ? "" : "; ",
                          job.node_of(m.holder), m.rank, job.node_of(m.rank));
    }
    job.log().warn(
        "segments of job '{}' were left on nodes where this launch runs other ranks: {}. A rank "
        "restores only from its own node, so they were of no use, and are removed",
        job.config().job, list);
  }
  std::vector<SegmentIdentity> mine;  // one scan of the node's segments for all of them
  for (const auto& m : misplaced) {
    if (m.holder != job.rank()) continue;
    mine.push_back(job.identity_of(m.rank, SegmentKind::workspace));
    mine.push_back(job.identity_of(m.rank, SegmentKind::checkpoint));
  }
  if (mine.empty()) return;
  for (const SegmentListing& s : list_segments_of(mine)) {
    if (s.header.nranks == job.nranks()) remove_segment(s.shmid);
  }
}

MemoryDemand memory_demand(Job& job, std::uint64_t mine, std::span<const int> own_segments) {
  MemoryDemand demand;
  // Each rank's need and the cgroups holding it: the ranks sharing a cgroup share its limit.
  constexpr std::size_t kMostLimits = 8;
  std::vector<MemoryLimit> limits = own_memory_limits();
  if (limits.size() > kMostLimits) limits.resize(kMostLimits);
  // Then this rank's segments, which the machine's count of other jobs' segments leaves out.
  constexpr std::size_t kSegments = kMostLimits + 2;
  constexpr std::size_t kMostSegments = 2;
  std::array<std::uint64_t, kSegments + kMostSegments> own{};
  own[0] = mine;
  own[1] = limits.size();
  for (std::size_t i = 0; i < limits.size(); ++i)
    own[i + 2] = limits[i].id;
  for (std::size_t i = 0; i < kMostSegments; ++i) {
    own[kSegments + i] = static_cast<std::uint64_t>(i < own_segments.size() ? own_segments[i] : -1);
  }
  const auto gathered = job.effects().gather_on_machine(std::as_bytes(std::span(own)));
  const auto ranks = static_cast<int>(gathered.size());
  std::vector<std::uint64_t> all(own.size() * gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r)
    std::memcpy(all.data() + r * own.size(), gathered[r].data(), sizeof own);
  std::vector<int> ours;
  for (int r = 0; r < ranks; ++r) {
    const std::uint64_t* other = all.data() + static_cast<std::size_t>(r) * own.size();
    demand.machine += other[0];
    for (std::size_t i = 0; i < kMostSegments; ++i)
      ours.push_back(static_cast<int>(other[kSegments + i]));
  }
  // Read once every rank of the job here has its workspace segment (the gather above).
  demand.elsewhere = promised_to_others(shared_segments(), ours, reserved_huge_page_bytes());
  for (MemoryLimit& limit : limits) {
    std::uint64_t need = 0;
    for (int r = 0; r < ranks; ++r) {
      const std::uint64_t* other = all.data() + static_cast<std::size_t>(r) * own.size();
      for (std::uint64_t i = 0; i < other[1]; ++i)
        if (other[i + 2] == limit.id) need += other[0];
    }
    demand.cgroups.emplace_back(std::move(limit), need);
  }
  return demand;
}

void refuse_beyond_memory(const Job& job, const MemoryDemand& demand) {
  const Config& config = job.config();
  // Reserved huge pages are counted apart from MemAvailable and from a cgroup's memory, and
  // shmget refuses a segment they cannot back.
  if (demand.machine == 0 || config.huge_pages) return;
  constexpr double kGiB = 1 << 30;
  auto gib = [](std::uint64_t bytes) { return static_cast<double>(bytes) / kGiB; };
  auto taking = [&](std::uint64_t bytes) {
    return fmt::format(
        "about to take {:.1f} GiB more (their checkpoint segments in {} mode and the pages of "
        "their workspaces not yet written)",
        gib(bytes), mode_name(config.mode));
  };
  const std::string advice =
      "the kernel would kill a process midway. Give the job a smaller workspace or fewer ranks "
      "per machine, or keep less with another SKT_MODE or larger groups (SKT_GROUP_SIZE)";
  if (const std::optional<MachineMemory> memory = machine_memory()) {
    const std::uint64_t free_of_others =
        memory->available > demand.elsewhere ? memory->available - demand.elsewhere : 0;
    const std::uint64_t left = usable_room(free_of_others, memory->total);
    if (demand.machine > left) {
      const std::string others =
          demand.elsewhere == 0
              ? std::string()
              : fmt::format(
                    ", less {:.1f} GiB not yet written of the shared memory segments "
                    "that other jobs and programs here hold",
                    gib(demand.elsewhere));
      throw Error(SKT_ERR_NOMEM,
                  fmt::format("this machine cannot hold job '{}': its ranks here are {}, and "
                              "{:.1f} GiB is available (MemAvailable {:.1f} GiB{}, less 1/32 of "
                              "the memory kept free); {}",
                              config.job, taking(demand.machine), gib(left), gib(memory->available),
                              others, advice));
    }
  }
  for (const auto& [limit, need] : demand.cgroups) {
    const std::uint64_t left = usable_room(limit.room, limit.limit);
    if (need <= left) continue;
    throw Error(SKT_ERR_NOMEM,
                fmt::format("the memory cgroup {} cannot hold job '{}' (a limit set on the job, as "
                            "Slurm's --mem sets): its ranks in it are {}, and {:.1f} GiB is left "
                            "of its limit of {:.1f} GiB (less 1/32 of the limit kept free); {}, "
                            "or ask for more memory",
                            limit.directory, config.job, taking(need), gib(left), gib(limit.limit),
                            advice));
  }
}

void warn_of_other_group_sizes(const Job& job, const GroupPlan& plan) {
  const int asked = job.config().group_size;
  const int nranks = job.nranks();
  if (asked <= 1) return;
  std::string warning;
  if (asked > nranks) {
    warning = fmt::format(
        "the group size (SKT_GROUP_SIZE) is {} but the job has {} ranks: one group of {}", asked,
        nranks, nranks);
  } else {
    int smallest = nranks, largest = 0;
    for (int g = 0; g < plan.groups(); ++g) {
      smallest = std::min(smallest, plan.size_of(g));
      largest = std::max(largest, plan.size_of(g));
    }
    const std::string sizes =
        smallest == largest ? std::to_string(largest) : fmt::format("{} to {}", smallest, largest);
    if (largest > asked) {
      warning = fmt::format(
          "groups of {} ranks, where the group size (SKT_GROUP_SIZE) is {}: {} ranks in groups of "
          "at most {} would leave a group too small to protect itself",
          sizes, asked, nranks, asked);
    } else if (plan.groups() > (nranks + asked - 1) / asked) {
      warning = fmt::format(
          "groups of {} ranks, where the group size (SKT_GROUP_SIZE) is {}: a group's members must "
          "be on distinct nodes, and a node holds {} of the job's ranks. Smaller groups take more "
          "memory for their checksums",
          sizes, asked, plan.groups());
    }
  }
  if (!warning.empty() && first_time_in_process(warning)) job.log().warn("{}", warning);
}

}  // namespace skt
