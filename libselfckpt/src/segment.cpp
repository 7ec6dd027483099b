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
#include <thread>
#include <utility>

#include "libselfckpt/src/segment_system.hpp"
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
