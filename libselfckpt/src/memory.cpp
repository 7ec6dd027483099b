#include "libselfckpt/internal/memory.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace skt {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const std::size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out = split(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

bool has_word(std::string_view list, std::string_view word) {
  for (const std::string_view w : split(list, ','))
    if (w == word) return true;
  return false;
}

// A file holding one number; "max" (v2's no limit) or anything else unreadable gives nothing.
std::optional<std::uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

// The numbers of /proc/meminfo's lines, by key ("MemTotal:"), as printed (kB, or a count).
std::map<std::string, std::uint64_t> meminfo() {
  std::ifstream in("/proc/meminfo");
  std::map<std::string, std::uint64_t> values;
  std::string key, unit;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    values[key] = value;
  }
  return values;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<MachineMemory> machine_memory() {
  const auto values = meminfo();
  const auto available = values.find("MemAvailable:"), total = values.find("MemTotal:");
  if (available == values.end() || total == values.end()) return std::nullopt;
  return MachineMemory{available->second * 1024, total->second * 1024};
}

std::vector<SharedSegment> parse_shared_segments(std::string_view proc_sysvipc_shm) {
  std::vector<SharedSegment> segments;
  for (const std::string_view line : lines(proc_sysvipc_shm)) {
    // key shmid perms size cpid lpid nattch uid gid cuid cgid atime dtime ctime rss swap
    std::istringstream fields{std::string(line)};
    std::string key;
    SharedSegment s;
    std::uint64_t skip = 0, rss = 0, swap = 0;
    std::string perms;
    if (!(fields >> key >> s.id >> perms >> s.bytes >> skip >> skip >> s.attached)) continue;
    for (int i = 0; i < 7; ++i)  // uid gid cuid cgid atime dtime ctime
      fields >> skip;
    if (!(fields >> rss >> swap)) continue;  // the header, or a kernel without these columns
    // The kernel counts a huge-page segment's resident pages in units too large; none is more
    // than all of it.
    s.written = std::min(s.bytes, rss + swap);
    segments.push_back(s);
  }
  return segments;
}

std::vector<SharedSegment> shared_segments() {
  return parse_shared_segments(read_file("/proc/sysvipc/shm"));
}

std::uint64_t promised_to_others(const std::vector<SharedSegment>& segments,
                                 const std::vector<int>& excluded, std::uint64_t huge_page_bytes) {
  std::uint64_t promised = 0;
  for (const SharedSegment& s : segments) {
    if (s.attached == 0 || std::find(excluded.begin(), excluded.end(), s.id) != excluded.end())
      continue;
    if (huge_page_bytes > 0 && s.bytes % huge_page_bytes == 0) continue;
    promised += s.bytes - s.written;
  }
  return promised;
}

std::uint64_t reserved_huge_page_bytes() {
  const auto values = meminfo();
  const auto pages = values.find("HugePages_Total:"), kib = values.find("Hugepagesize:");
  if (pages == values.end() || pages->second == 0 || kib == values.end()) return 0;
  return kib->second * 1024;
}

std::optional<CgroupPath> memory_cgroup_path(std::string_view proc_cgroup,
                                             std::string_view mountinfo) {
  // /proc/<pid>/cgroup: "hierarchy-id:controllers:path"; the unified hierarchy is "0::path".
  std::optional<std::string_view> v1, v2;
  for (const std::string_view line : lines(proc_cgroup)) {
    const std::size_t first = line.find(':');
    const std::size_t second = line.find(':', first + 1);
    if (first == std::string_view::npos || second == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (has_word(controllers, "memory")) v1 = path;
    if (line.substr(0, first) == "0" && controllers.empty()) v2 = path;
  }
  // mountinfo: "id parent major:minor root mount-point options [optional...] - type source
  // super-options". A cgroup namespace, or a bind mount of a sub-tree, mounts `root` of the
  // hierarchy at the mount point.
  for (const std::string_view line : lines(mountinfo)) {
    const std::vector<std::string_view> fields = split(line, ' ');
    std::size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-")
      ++dash;
    if (dash < 5 || dash + 3 >= fields.size()) continue;
    const std::string_view type = fields[dash + 1];
    const bool unified = type == "cgroup2";
    if (!(v1 && type == "cgroup" && has_word(fields[dash + 3], "memory")) &&
        !(!v1 && v2 && unified))
      continue;
    const std::string_view root = fields[3];
    const std::string mount_point(fields[4]);
    std::string_view path = unified ? *v2 : *v1;
    if (root != "/" && path.substr(0, root.size()) == root &&
        (path.size() == root.size() || path[root.size()] == '/')) {
      path.remove_prefix(root.size());
    }
    CgroupPath result;
    result.unified = unified;
    std::string below(path);
    while (!below.empty() && below.back() == '/')
      below.pop_back();
    for (;;) {
      result.directories.push_back(mount_point + below);
      if (below.empty()) break;
      const std::size_t slash = below.rfind('/');
      below.erase(slash == std::string::npos ? 0 : slash);
    }
    return result;
  }
  return std::nullopt;
}

std::optional<MemoryLimit> memory_limit(const std::string& directory, bool unified) {
  // v1 says "no limit" with a number near 2^63; v2 with "max".
  constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;
  const std::optional<std::uint64_t> limit =
      read_number(directory + (unified ? "/memory.max" : "/memory.limit_in_bytes"));
  const std::optional<std::uint64_t> usage =
      read_number(directory + (unified ? "/memory.current" : "/memory.usage_in_bytes"));
  if (!limit || !usage || *limit >= kUnlimited) return std::nullopt;
  // The file cache charged to the cgroup is reclaimed before any process is killed (both
  // versions count the cgroup's descendants in its usage; v1's "total_" lines do in its stat).
  std::uint64_t reclaimable = 0;
  std::istringstream stat(read_file(directory + "/memory.stat"));
  std::string key;
  std::uint64_t value = 0;
  const std::string prefix = unified ? "" : "total_";
  while (stat >> key >> value) {
    if (key == prefix + "active_file" || key == prefix + "inactive_file") reclaimable += value;
  }
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) return std::nullopt;
  MemoryLimit m;
  m.directory = directory;
  m.id = (static_cast<std::uint64_t>(info.st_dev) << 40) ^ static_cast<std::uint64_t>(info.st_ino);
  m.limit = *limit;
  const std::uint64_t charged = *usage > reclaimable ? *usage - reclaimable : 0;
  m.room = *limit > charged ? *limit - charged : 0;
  return m;
}

std::vector<MemoryLimit> own_memory_limits() {
  std::vector<MemoryLimit> limits;
  const std::optional<CgroupPath> path =
      memory_cgroup_path(read_file("/proc/self/cgroup"), read_file("/proc/self/mountinfo"));
  if (!path) return limits;
  for (const std::string& directory : path->directories) {
    if (auto limit = memory_limit(directory, path->unified)) limits.push_back(std::move(*limit));
  }
  return limits;
}

std::uint64_t usable_room(std::uint64_t room, std::uint64_t memory) {
  return room > memory / 32 ? room - memory / 32 : 0;
}

std::optional<RoomForSegments> room_for_segments() {
  const std::optional<MachineMemory> memory = machine_memory();
  if (!memory) return std::nullopt;
  const std::uint64_t promised =
      promised_to_others(shared_segments(), {}, reserved_huge_page_bytes());
  RoomForSegments room{
      usable_room(memory->available > promised ? memory->available - promised : 0, memory->total),
      "the machine"};
  for (const MemoryLimit& limit : own_memory_limits()) {
    const std::uint64_t left = usable_room(limit.room, limit.limit);
    if (left < room.bytes) room = {left, "the memory cgroup " + limit.directory};
  }
  return room;
}

}  // namespace skt
