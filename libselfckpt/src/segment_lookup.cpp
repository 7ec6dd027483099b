// Finding a rank's segment (waiting for an earlier launch's processes to let go of it), listing a
// user's segments, those of given identities, and removing one.
#include <fmt/format.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "libselfckpt/internal/segment.hpp"
#include "libselfckpt/src/segment_system.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

using Deadline = std::chrono::steady_clock::time_point;

// Waits until no process has segment `id` attached, until `deadline` (`seconds` after the wait
// began); throws SKT_ERR_BUSY naming the processes left.
void wait_detached(int id, const SegmentIdentity& identity, Deadline deadline, double seconds) {
  for (;;) {
    shmid_ds ds{};
    if (shmctl(id, IPC_STAT, &ds) != 0 || ds.shm_nattch == 0) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(
          SKT_ERR_BUSY,
          fmt::format("the {} segment of job '{}' rank {} is still attached by {} live "
                      "process{} (the last to attach or detach it was pid {}): a launch of "
                      "this job is still running, or its ranks outlived their launcher. "
                      "Waited {:.0f} s (SKT_ATTACH_WAIT). End those processes, then relaunch "
                      "(or remove the job's segments: skt-shm clean --job {} --force)",
                      kind_name(identity.kind), identity.job, identity.rank, ds.shm_nattch,
                      ds.shm_nattch == 1 ? "" : "es", ds.shm_lpid, seconds, identity.job));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::size_t attached_processes(int id) {
  shmid_ds ds{};
  return shmctl(id, IPC_STAT, &ds) == 0 ? ds.shm_nattch : 0;
}

// Attaches segment `id` read-write once no other process has it, for at most `seconds`. Seeing it
// free and attaching it are two steps, between which another launch's process may do the same
// (two relaunches of a job started at once). So a process owns the segment only if, attached, it
// finds itself alone: any process that attached before it is counted, and any that attaches after
// finds it there. Processes that attached between each other's looks all let go and try again
// after a pause of their own.
std::optional<Segment> take(int id, const SegmentIdentity& identity, double seconds) {
  const Deadline deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(std::max(0.0, seconds)));
  // Seeded by the clock as well: processes in containers of their own may share a pid.
  std::minstd_rand pause_of(static_cast<std::uint32_t>(
      getpid() ^ std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uniform_int_distribution<int> pause_ms(1, 20);
  for (;;) {
    wait_detached(id, identity, deadline, seconds);
    std::optional<Segment> taken = Segment::attach(id, false, nullptr, false);
    if (!taken || attached_processes(id) == 1) return taken;
    taken->detach();
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(pause_of)));
  }
}

// The header of segment `id` when it is an intact one of another format version.
std::optional<SegmentHeader> other_version_header(int id) {
  shmid_ds ds{};
  if (shmctl(id, IPC_STAT, &ds) != 0 || ds.shm_segsz < kHeaderBytes) return std::nullopt;
  void* p = shmat(id, nullptr, SHM_RDONLY);
  if (p == reinterpret_cast<void*>(-1)) return std::nullopt;
  SegmentHeader header;
  const HeaderStatus status = decode_header(static_cast<std::byte*>(p), kHeaderBytes, &header);
  shmdt(p);
  if (status != HeaderStatus::other_version) return std::nullopt;
  return header;
}

}  // namespace

void wait_until_detached(int shmid, const SegmentIdentity& identity, double seconds) {
  wait_detached(shmid, identity,
                std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(std::max(0.0, seconds))),
                seconds);
}

FindResult find_segment(const SegmentIdentity& identity, double attach_wait_seconds,
                        bool populate) {
  FindResult result;
  // Its own keys first, then the keys of the job's reserves on the node, one of which it may
  // have taken over.
  std::vector<int> ids;
  for (int probe = 0; probe < kKeyProbes; ++probe) {
    const int id = shmget(segment_key(identity, probe), 0, 0);
    if (id >= 0) ids.push_back(id);
  }
  for_each_reserve_key(identity.job, identity.domain, [&](int id) { ids.push_back(id); });
  for (const int id : ids) {
    shmid_ds ds{};
    if (shmctl(id, IPC_STAT, &ds) != 0) continue;
    const key_t key = ds.shm_perm.__key;
    if (!owned_by_caller(ds)) {
      result.skipped.push_back(fmt::format("key {:#x} belongs to uid {} with mode {:o}", key,
                                           ds.shm_perm.uid, ds.shm_perm.mode & 0777));
      continue;
    }
    // Look before touching: a read-only attach shows the header, and only a segment whose header
    // names exactly this identity is attached for writing.
    std::string why;
    auto look = Segment::attach(id, true, &why);
    if (!look) {
      if (const auto other = other_version_header(id);
          other && same_identity(other->identity, identity)) {
        // Ignored, it would hold its memory unseen and the job's checkpoint would be lost
        // without a word; overwritten, read as this version's.
        throw Error(SKT_ERR_MISMATCH,
                    fmt::format("the {} segment of job '{}' rank {} on node '{}' was written by "
                                "another version of selfckpt (segment format {}; this one reads "
                                "format {}): a checkpoint is resumed only by the version that "
                                "wrote it. Resume the job with that version, or remove its "
                                "segments to start afresh (skt-shm clean --job {})",
                                kind_name(identity.kind), identity.job, identity.rank,
                                identity.domain, other->version, kFormatVersion, identity.job));
      }
      result.skipped.push_back(
          fmt::format("key {:#x} holds no valid selfckpt segment: {}", key, why));
      continue;
    }
    if (!same_identity(look->header().identity, identity)) {
      if (look->header().identity.kind == SegmentKind::reserve) continue;
      result.skipped.push_back(fmt::format(
          "key {:#x} belongs to job '{}' rank {} ({})", key, look->header().identity.job,
          look->header().identity.rank, kind_name(look->header().identity.kind)));
      continue;
    }
    look->detach();
    result.segment = take(id, identity, attach_wait_seconds);
    if (result.segment) {
      if (populate) populate_pages(result.segment->base(), result.segment->header().segment_bytes);
      return result;
    }
  }
  return result;
}

namespace {

// Calls `visit(id, ds)` for each segment of the machine that the calling user owns.
template <typename Visit>
void for_each_own_segment(Visit visit) {
  shm_info info{};
  const int highest = shmctl(0, SHM_INFO, reinterpret_cast<shmid_ds*>(&info));
  for (int index = 0; index <= highest; ++index) {
    shmid_ds ds{};
    const int id = shmctl(index, SHM_STAT, &ds);
    if (id >= 0 && owned_by_caller(ds)) visit(id, ds);
  }
}

}  // namespace

std::vector<SegmentListing> list_own_segments(bool other_versions) {
  std::vector<SegmentListing> out;
  for_each_own_segment([&](int id, const shmid_ds& ds) {
    if (auto look = Segment::attach(id, true)) {
      out.push_back({id, ds.shm_perm.__key, look->header(), ds.shm_nattch});
    } else if (const auto other = other_versions ? other_version_header(id) : std::nullopt;
               other && other->identity.uid == geteuid()) {
      out.push_back({id, ds.shm_perm.__key, *other, ds.shm_nattch});
    }
  });
  return out;
}

std::vector<SegmentListing> list_segments_of(const std::vector<SegmentIdentity>& identities) {
  std::unordered_multimap<key_t, std::size_t> wanted;
  std::set<std::pair<std::string, std::string>> reserves;  // (job, node)
  for (std::size_t i = 0; i < identities.size(); ++i) {
    for (int probe = 0; probe < kKeyProbes; ++probe)
      wanted.emplace(segment_key(identities[i], probe), i);
    reserves.emplace(identities[i].job, identities[i].domain);
  }
  // A segment in a reserve's place: at one of the keys of its job's reserve slots on its node.
  for (const auto& [job, node] : reserves) {
    for (std::size_t i = 0; i < identities.size(); ++i) {
      if (identities[i].job != job || identities[i].domain != node) continue;
      for_each_reserve_key(job, node, [&](int id) {
        shmid_ds ds{};
        if (shmctl(id, IPC_STAT, &ds) == 0) wanted.emplace(ds.shm_perm.__key, i);
      });
    }
  }
  std::vector<SegmentListing> out;
  for_each_own_segment([&](int id, const shmid_ds& ds) {
    if (!wanted.contains(ds.shm_perm.__key)) return;
    const auto look = Segment::attach(id, true);
    if (!look) return;
    const auto [first, last] = wanted.equal_range(ds.shm_perm.__key);
    for (auto it = first; it != last; ++it) {
      if (same_identity(look->header().identity, identities[it->second])) {
        out.push_back({id, ds.shm_perm.__key, look->header(), ds.shm_nattch});
        return;
      }
    }
  });
  return out;
}

bool remove_segment(int shmid) noexcept {
  return shmctl(shmid, IPC_RMID, nullptr) == 0;
}

}  // namespace skt
