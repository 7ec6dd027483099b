#include "libselfckpt/internal/segment.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

std::string read_sysctl(const char* path) {
  std::ifstream in(path);
  std::string value;
  in >> value;
  return value.empty() ? "?" : value;
}

[[noreturn]] void shm_failure(int err, std::size_t bytes, bool huge_pages) {
  std::string advice;
  switch (err) {
    case EINVAL:
      advice = fmt::format(
          "the kernel's largest segment is kernel.shmmax = {} bytes; raise it "
          "(sysctl -w kernel.shmmax=...)",
          read_sysctl("/proc/sys/kernel/shmmax"));
      break;
    case ENOSPC:
      advice = fmt::format(
          "the kernel's segment limits are reached: kernel.shmmni = {} segments, "
          "kernel.shmall = {} pages; raise them with sysctl or remove old "
          "segments (skt-shm list, skt-shm clean --job TAG)",
          read_sysctl("/proc/sys/kernel/shmmni"), read_sysctl("/proc/sys/kernel/shmall"));
      break;
    case ENOMEM:
      advice = huge_pages ? "not enough huge pages are reserved (vm.nr_hugepages)"
                          : "the node is out of memory for this segment";
      break;
    case EPERM:
      advice = "huge pages need the CAP_IPC_LOCK capability or vm.hugetlb_shm_group";
      break;
    default:
      break;
  }
  throw Error(err == ENOMEM && !huge_pages ? SKT_ERR_NOMEM : SKT_ERR_SHM,
              fmt::format("shmget of {} bytes failed: {}{}{}", bytes, std::strerror(err),
                          advice.empty() ? "" : "; ", advice));
}

// Maps every page now, in one call, rather than fault by fault on first touch; a node without the
// memory says so here rather than failing later. Kernels before 5.14 lack it: then pages come on
// demand as usual.
void populate_pages(void* base, std::size_t bytes) {
  // Transparent huge pages, where the administrator allows them for shared memory
  // (transparent_hugepage/shmem_enabled = advise): 512 times fewer pages to map.
  madvise(base, bytes, MADV_HUGEPAGE);
  if (madvise(base, bytes, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    throw Error(errno == ENOMEM ? SKT_ERR_NOMEM : SKT_ERR_SHM,
                fmt::format("cannot back a shared-memory segment of {} bytes: {}", bytes,
                            std::strerror(errno)));
  }
}

// Writes into every page of a new segment the byte it holds, which changes nothing (no other
// process writes into it yet: a relaunch of its job waits for this one to end). Some virtual
// machines charge the first write to each page even after MADV_POPULATE_WRITE: on this project's
// Firecracker machines 0.5 s per GiB, then 0.04 s per GiB for a memset. Paid here, at set-up,
// rather than by the first checkpoints that write each area (which then took 2-3 times as long as
// the next, and skewed the interval chosen from them). Reports its progress every 64 MiB.
void write_every_page(std::byte* base, std::size_t bytes, const Segment::Progress& progress) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  constexpr std::size_t kReportEvery = std::size_t{64} << 20;
  for (std::size_t at = 0; at < bytes; at += page) {
    volatile std::byte* const byte = reinterpret_cast<volatile std::byte*>(base) + at;
    *byte = *byte;
    if (progress && ((at + page) % kReportEvery == 0 || at + page >= bytes))
      progress(std::min(at + page, bytes), bytes);
  }
}

// A checkpoint segment (the committed copy, the checksums, the staging area) stays out of core
// dumps: a rank that crashes dumps what the program without selfckpt would, its workspace, not 2 to
// 4 times as much. A core is written for every crashing rank, often into the job's directory on a
// shared file system, and a rank still writing one is not dead yet, which delays the relaunch.
void keep_out_of_core_dumps(std::byte* base, const SegmentHeader& header) {
  if (header.identity.kind == SegmentKind::checkpoint)
    madvise(base, header.segment_bytes, MADV_DONTDUMP);
}

bool owned_by_caller(const shmid_ds& ds) {
  const uid_t me = geteuid();
  return ds.shm_perm.uid == me && ds.shm_perm.cuid == me && (ds.shm_perm.mode & 0777) == 0600;
}

}  // namespace

key_t segment_key(const SegmentIdentity& identity, int probe) noexcept {
  // A reserve's name says which pages it has; its keys are the same either way, so that a
  // rank looking for one finds both.
  const std::string_view name =
      identity.kind == SegmentKind::reserve ? std::string_view("reserve") : identity.name;
  const std::string text =
      fmt::format("{}|{}|{}|{}|{}|{}|{}", identity.uid, identity.job, identity.domain,
                  identity.rank, static_cast<unsigned>(identity.kind), name, probe);
  const std::uint64_t h = crc64(text.data(), text.size());
  auto key = static_cast<key_t>((h ^ (h >> 31) ^ (h >> 62)) & 0x7fffffffu);
  if (key == IPC_PRIVATE) key = 1;
  return key;
}

std::size_t segment_size(std::size_t data_bytes, bool huge_pages) noexcept {
  const std::size_t unit =
      huge_pages ? kHugePageBytes : static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t bytes = kHeaderBytes + data_bytes;
  return (bytes + unit - 1) / unit * unit;
}

Segment::Segment(Segment&& other) noexcept
    : id_(std::exchange(other.id_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      header_(std::move(other.header_)),
      from_reserve_(other.from_reserve_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    detach();
    id_ = std::exchange(other.id_, -1);
    base_ = std::exchange(other.base_, nullptr);
    header_ = std::move(other.header_);
    from_reserve_ = other.from_reserve_;
  }
  return *this;
}

void Segment::detach() noexcept {
  if (base_ != nullptr) shmdt(base_);
  base_ = nullptr;
}

void Segment::remap(std::byte* at) {
  void* p = shmat(id_, at, SHM_REMAP);
  if (p == reinterpret_cast<void*>(-1)) {
    throw Error(SKT_ERR_SHM, fmt::format("cannot map segment {} at {}: {}", id_,
                                         static_cast<void*>(at), std::strerror(errno)));
  }
  shmdt(base_);
  base_ = static_cast<std::byte*>(p);
  keep_out_of_core_dumps(base_, header_);  // a new mapping, without the old one's advice
  populate_pages(p, header_.segment_bytes);
}

bool Segment::removed_from_outside() const noexcept {
  shmid_ds ds{};
  return id_ >= 0 && (shmctl(id_, IPC_STAT, &ds) != 0 || (ds.shm_perm.mode & SHM_DEST) != 0);
}

void Segment::renew(bool huge_pages) {
  Segment fresh = create(header_, huge_pages);
  std::memcpy(fresh.base_, base_, header_.segment_bytes);
  try {
    fresh.remap(base_);
  } catch (...) {
    fresh.remove();
    throw;
  }
  // The remap replaced the removed segment's mapping, its last: the kernel destroys it.
  id_ = std::exchange(fresh.id_, -1);
  fresh.base_ = nullptr;
}

void Segment::remove() {
  if (id_ >= 0 && shmctl(id_, IPC_RMID, nullptr) != 0 && errno != EINVAL && errno != EIDRM) {
    throw Error(SKT_ERR_SHM,
                fmt::format("cannot remove segment {}: {}", id_, std::strerror(errno)));
  }
}

std::size_t Segment::resident_bytes() const {
  if (base_ == nullptr) return 0;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t pages = (header_.segment_bytes + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  if (mincore(base_, pages * page, resident.data()) != 0) return header_.segment_bytes;
  std::size_t count = 0;
  for (const unsigned char r : resident)
    count += r & 1u;
  return std::min(header_.segment_bytes, count * page);
}

namespace {

// Whether the segment at `key` is ours and carries `identity`. Its creator writes the header right
// after making it: a segment still without one while its creator lives is looked at again.
bool made_meanwhile(key_t key, const SegmentIdentity& identity) {
  for (int look = 0; look < 100; ++look) {
    const int id = shmget(key, 0, 0);
    if (id < 0) return false;
    auto seen = Segment::attach(id, true);
    if (seen) return same_identity(seen->header().identity, identity);
    shmid_ds ds{};
    if (shmctl(id, IPC_STAT, &ds) != 0 || kill(ds.shm_cpid, 0) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

namespace {

// The tag a job's reserves go by: its own before any '+'.
std::string reserve_tag(const std::string& job) {
  return job.substr(0, job.find('+'));
}

// The names a reserve's header carries: which pages it has, which only segments with the same may
// take over (segment_key gives both the same keys).
constexpr const char* kReserveName = "reserve";
constexpr const char* kHugeReserveName = "reserve, huge pages";

SegmentIdentity reserve_identity(const std::string& job, const std::string& node, int slot) {
  return SegmentIdentity{static_cast<std::uint32_t>(geteuid()),
                         reserve_tag(job),
                         node,
                         slot,
                         SegmentKind::reserve,
                         kReserveName};
}

// Calls `visit(id)` for every segment at a key of the job's reserve slots on `node` (whatever it
// holds now), slot by slot, up to the first slot with none: slots are filled from the first.
template <typename Visit>
void for_each_reserve_key(const std::string& job, const std::string& node, Visit visit) {
  for (int slot = 0; slot < kReserveSlots; ++slot) {
    bool any = false;
    for (int probe = 0; probe < kKeyProbes; ++probe) {
      const int id = shmget(segment_key(reserve_identity(job, node, slot), probe), 0, 0);
      if (id < 0) continue;
      any = true;
      visit(id);
    }
    if (!any) return;
  }
}

// Takes over a reserve on this node that can hold a segment of `header` (its identity written
// in, its size kept), if there is one.
std::optional<Segment> take_over_reserve(const SegmentHeader& header, bool huge_pages) {
  if (header.identity.kind == SegmentKind::reserve) return std::nullopt;
  const std::size_t need = segment_size(header.data_bytes, huge_pages);
  const std::size_t most = need + need / 4 + (std::size_t{4} << 20);
  std::optional<Segment> taken;
  for_each_reserve_key(header.identity.job, header.identity.domain, [&](int id) {
    if (taken) return;
    auto reserve = Segment::attach(id, false, nullptr, false);
    if (!reserve) return;
    const SegmentHeader& h = reserve->header();
    const bool same_pages = h.identity.name == (huge_pages ? kHugeReserveName : kReserveName);
    if (h.identity.kind != SegmentKind::reserve || !same_pages ||
        h.identity.job != reserve_tag(header.identity.job) ||
        h.identity.domain != header.identity.domain || h.segment_bytes < need ||
        h.segment_bytes > most) {
      return;
    }
    std::uint64_t unclaimed = 0;
    std::atomic_ref<std::uint64_t> claim(
        *reinterpret_cast<std::uint64_t*>(reserve->base() + kClaimOffset));
    if (!claim.compare_exchange_strong(unclaimed, static_cast<std::uint64_t>(getpid()) | 1u))
      return;
    taken = std::move(reserve);
  });
  if (!taken) return std::nullopt;
  SegmentHeader mine = header;
  mine.segment_bytes = taken->header().segment_bytes;
  encode_header(taken->base(), mine);
  // The segment is now the rank's: Segment::header() must say so too.
  std::string why;
  const int id = taken->id();
  taken->detach();
  return Segment::attach(id, false, &why, false);
}

}  // namespace

Segment Segment::create(SegmentHeader header, bool huge_pages, Population population,
                        const Progress& progress) {
  if (auto reserve = take_over_reserve(header, huge_pages)) {
    if (population != Population::none) {
      populate_pages(reserve->base(), reserve->header().segment_bytes);
    }
    reserve->from_reserve_ = true;
    return std::move(*reserve);
  }
  const std::size_t bytes = segment_size(header.data_bytes, huge_pages);
  header.segment_bytes = bytes;
  int flags = IPC_CREAT | IPC_EXCL | 0600;
  if (huge_pages) flags |= SHM_HUGETLB;
  for (int probe = 0; probe < kKeyProbes; ++probe) {
    const key_t key = segment_key(header.identity, probe);
    const int id = shmget(key, bytes, flags);
    if (id < 0) {
      if (errno != EEXIST) shm_failure(errno, bytes, huge_pages);
      // A collision, or an old segment we must not touch: the next key. Unless it is this very
      // segment, made by another launch of the job since this one looked.
      if (made_meanwhile(key, header.identity)) {
        throw Error(SKT_ERR_BUSY,
                    fmt::format("the {} segment of job '{}' rank {} was created by another launch "
                                "of the job while this one started: run one launch of a job at a "
                                "time, and give programs that run side by side a SKT_JOB each",
                                kind_name(header.identity.kind), header.identity.job,
                                header.identity.rank));
      }
      continue;
    }
    void* p = shmat(id, nullptr, 0);
    if (p == reinterpret_cast<void*>(-1)) {
      const int err = errno;
      shmctl(id, IPC_RMID, nullptr);
      throw Error(SKT_ERR_SHM,
                  fmt::format("shmat of a new segment failed: {}", std::strerror(err)));
    }
    Segment s;
    s.id_ = id;
    s.base_ = static_cast<std::byte*>(p);
    s.header_ = header;
    keep_out_of_core_dumps(s.base_, header);
    madvise(p, bytes, MADV_HUGEPAGE);
    // The header first: a process killed while the pages are mapped (seconds for large segments,
    // and when the OOM killer strikes) leaves a segment that names its job, rank and kind, which
    // skt-shm lists and cleans and a relaunch finds and replaces, not a nameless one that no tool
    // attributes and that holds its memory until the machine reboots.
    encode_header(s.base_, header);
    try {
      if (population != Population::none) populate_pages(p, bytes);
      if (population == Population::written) write_every_page(s.base_, bytes, progress);
    } catch (...) {
      s.remove();
      throw;
    }
    return s;
  }
  throw Error(SKT_ERR_SHM,
              fmt::format("all {} keys of {} segment '{}' of rank {} are taken by other segments; "
                          "list them with skt-shm list and remove stale ones",
                          kKeyProbes, kind_name(header.identity.kind), header.identity.name,
                          header.identity.rank));
}

std::optional<Segment> Segment::attach(int shmid, bool read_only, std::string* why,
                                       bool populate_now) {
  auto refuse = [&](std::string reason) -> std::optional<Segment> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  shmid_ds ds{};
  if (shmctl(shmid, IPC_STAT, &ds) != 0) return refuse(std::strerror(errno));
  if (!owned_by_caller(ds)) {
    return refuse(
        fmt::format("owned by uid {} with mode {:o}", ds.shm_perm.uid, ds.shm_perm.mode & 0777));
  }
  if (ds.shm_segsz < kHeaderBytes) return refuse("smaller than a selfckpt header");
  void* p = shmat(shmid, nullptr, read_only ? SHM_RDONLY : 0);
  if (p == reinterpret_cast<void*>(-1)) return refuse(std::strerror(errno));
  Segment s;
  s.id_ = shmid;
  s.base_ = static_cast<std::byte*>(p);
  const HeaderStatus status = decode_header(s.base_, ds.shm_segsz, &s.header_);
  if (status != HeaderStatus::ok) return refuse(header_status_text(status));
  if (s.header_.segment_bytes != ds.shm_segsz) {
    return refuse(fmt::format("its header says {} bytes but the segment has {}",
                              s.header_.segment_bytes, ds.shm_segsz));
  }
  if (s.header_.identity.uid != geteuid()) {
    return refuse(fmt::format("its header names uid {}", s.header_.identity.uid));
  }
  keep_out_of_core_dumps(s.base_, s.header_);
  if (!read_only && populate_now) populate_pages(s.base_, ds.shm_segsz);
  return s;
}

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

std::vector<SegmentListing> list_reserves(const std::string& job, const std::string& node) {
  std::vector<SegmentListing> out;
  for_each_reserve_key(job, node, [&](int id) {
    shmid_ds ds{};
    if (shmctl(id, IPC_STAT, &ds) != 0 || !owned_by_caller(ds)) return;
    const auto look = Segment::attach(id, true);
    if (!look || look->header().identity.kind != SegmentKind::reserve) return;
    const auto claim = *reinterpret_cast<const std::uint64_t*>(look->base() + kClaimOffset);
    if (claim == 0) out.push_back({id, ds.shm_perm.__key, look->header(), ds.shm_nattch});
  });
  return out;
}

Segment create_reserve(const std::string& job, const std::string& node, std::size_t data_bytes,
                       bool huge_pages) {
  for (int slot = 0; slot < kReserveSlots; ++slot) {
    bool taken = false;
    for (int probe = 0; probe < kKeyProbes && !taken; ++probe)
      taken = shmget(segment_key(reserve_identity(job, node, slot), probe), 0, 0) >= 0;
    if (taken) continue;
    SegmentHeader header;
    header.identity = reserve_identity(job, node, slot);
    if (huge_pages) header.identity.name = kHugeReserveName;
    header.data_bytes = data_bytes;
    return Segment::create(header, huge_pages, Segment::Population::written);
  }
  throw Error(SKT_ERR_SHM,
              fmt::format("all {} reserve slots of job '{}' on node '{}' are taken: "
                          "remove what is left of earlier runs (skt-shm clean --job {})",
                          kReserveSlots, reserve_tag(job), node, reserve_tag(job)));
}

}  // namespace skt
