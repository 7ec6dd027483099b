// How much memory new pages can take before the kernel kills a process: the machine's, and that of
// every memory cgroup holding this process (a batch system's limit on a job, Slurm's --mem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skt {

// A file's text (of /proc, /sys or /etc); empty when it cannot be read.
std::string read_file(const std::string& path);

// This machine's memory as /proc/meminfo has it: what new pages can take without the OOM killer
// (MemAvailable) and the total; nothing where the kernel does not say.
struct MachineMemory {
  std::uint64_t available = 0;
  std::uint64_t total = 0;
};
std::optional<MachineMemory> machine_memory();

// A SysV shared memory segment as /proc/sysvipc/shm lists it: the pages never written are not in
// MemAvailable's count, yet a process that has it attached may write them at any time.
struct SharedSegment {
  int id = -1;
  std::uint64_t bytes = 0;
  std::uint64_t written = 0;  // resident or swapped out
  int attached = 0;
};
std::vector<SharedSegment> parse_shared_segments(std::string_view proc_sysvipc_shm);
// The segments of this machine (of this process's IPC namespace).
std::vector<SharedSegment> shared_segments();
// What the attached segments but `excluded` can still take: their pages not yet written. Another
// job's workspace takes its memory as that job computes, long after its own check passed. Where
// the machine reserves huge pages (`huge_page_bytes` > 0), a segment of whole huge pages is left
// out: it may be backed by the reserve, which MemAvailable does not count.
std::uint64_t promised_to_others(const std::vector<SharedSegment>& segments,
                                 const std::vector<int>& excluded, std::uint64_t huge_page_bytes);
// The size of the huge pages the machine reserves (vm.nr_hugepages), 0 where it reserves none.
std::uint64_t reserved_huge_page_bytes();

// The directories of the memory cgroups a process is in, its own first and then every ancestor up
// to the hierarchy's root, from its /proc/<pid>/cgroup and /proc/<pid>/mountinfo. The v1 memory
// controller where it is mounted, else the unified (v2) hierarchy; none where neither is mounted.
struct CgroupPath {
  bool unified = false;
  std::vector<std::string> directories;
};
std::optional<CgroupPath> memory_cgroup_path(std::string_view proc_cgroup,
                                             std::string_view mountinfo);

// A memory cgroup with a limit: what its pages may still grow by before the kernel kills one of
// its processes (the limit, less what is charged to it and cannot be reclaimed: all but its file
// cache), and an identity shared by every process in it.
struct MemoryLimit {
  std::string directory;
  std::uint64_t id = 0;  // of the directory: its device and inode
  std::uint64_t limit = 0;
  std::uint64_t room = 0;
};
// The limit of cgroup `directory`, if it has one.
std::optional<MemoryLimit> memory_limit(const std::string& directory, bool unified);
// Every limited memory cgroup holding the calling process.
std::vector<MemoryLimit> own_memory_limits();

// What new segments may take of `room` in a memory of `memory` bytes (the machine's, or a cgroup's
// limit): 1/32 of it is kept free for what programs allocate besides their workspaces.
std::uint64_t usable_room(std::uint64_t room, std::uint64_t memory);

// What new segments of the calling user may take on this node now, as the library's admission
// judges it when ranks start: the machine's MemAvailable less the pages not yet written of every
// attached segment, and the room of every limited memory cgroup holding this process, each less
// its 1/32 kept free; the least of them, and which it is. Nothing when the kernel does not say.
struct RoomForSegments {
  std::uint64_t bytes = 0;
  std::string limited_by;  // "the machine" or "the memory cgroup DIR"
};
std::optional<RoomForSegments> room_for_segments();

}  // namespace skt
