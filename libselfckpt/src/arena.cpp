#include "libselfckpt/src/arena.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t round_up(std::size_t value, std::size_t unit) {
  return (value + unit - 1) / unit * unit;
}

// The soft limit on this process's addresses (ulimit -v), if there is one.
std::optional<std::size_t> address_space_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::size_t>(limit.rlim_cur);
}

// The addresses this process spans now.
std::size_t mapped_addresses() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

struct Reservation {
  std::size_t bytes;      // for the segment
  std::size_t alignment;  // of its start: a boundary that suits the segment's page size
};

// Twice the node's memory and 64 GiB more: more than a rank's workspace can ever be, and only
// addresses (the range is neither backed nor accounted until used), starting on 1 GiB. Under
// ulimit -v those addresses count: then a quarter of what is left under the limit, since the
// committed copy and the two checksums of a workspace are mapped beside it (four times its size in
// groups of two), starting on a huge page.
Reservation plan_reservation() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const std::size_t ram = pages > 0 && page > 0
                              ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                              : 64 * kGiB;
  const Reservation unlimited{round_up(2 * ram + 64 * kGiB, kGiB), kGiB};
  const auto limit = address_space_limit();
  if (!limit) return unlimited;
  const std::size_t used = mapped_addresses();
  const std::size_t alignment = kHugePageBytes;
  const std::size_t quarter = *limit > used ? (*limit - used) / 4 : 0;
  const std::size_t bytes = quarter > alignment ? (quarter - alignment) / kMiB * kMiB : 0;
  return {std::min(unlimited.bytes, bytes), alignment};
}

// Why the reservation may be too small, when the process's addresses are limited.
std::string limit_hint() {
  const auto limit = address_space_limit();
  if (!limit) return "";
  return fmt::format(
      "; this process's addresses are limited to {} bytes (ulimit -v), and a workspace gets a "
      "quarter of what is left under the limit: raise it, or lift it (ulimit -v unlimited)",
      *limit);
}

// Where workspaces are reserved: the same addresses in every launch of a program, so that pointers
// that regions hold into regions (a table of row pointers) are still right after a relaunch. From
// 32 TiB up to 80 TiB: above the sanitizers' shadow memory, below where Linux loads a
// position-independent program and its heap (from about 85 TiB) and maps libraries (near 128 TiB).
constexpr std::uintptr_t kWorkspaceAddresses = std::uintptr_t{32} << 40;
constexpr std::uintptr_t kWorkspaceAddressesEnd = std::uintptr_t{80} << 40;
constexpr std::size_t kTiB = std::size_t{1} << 40;

// Reserves `bytes` of addresses, neither backed nor accounted: at the first free place of the
// workspaces' range (a second context of the process takes the next, as in every launch), else
// wherever the kernel puts it (*fixed false). Null when the kernel refuses.
std::byte* reserve_addresses(std::size_t bytes, bool* fixed) {
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  const std::size_t stride = round_up(bytes, kTiB);
  for (std::uintptr_t at = kWorkspaceAddresses; at + bytes <= kWorkspaceAddressesEnd;
       at += stride) {
    void* want = reinterpret_cast<void*>(at);
    void* p = mmap(want, bytes, PROT_NONE, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == want) {
      *fixed = true;
      return static_cast<std::byte*>(p);
    }
    if (p != MAP_FAILED) {
      munmap(p, bytes);  // a kernel before 4.17 took the address as a hint only
      break;
    }
    if (errno != EEXIST) break;  // no such addresses here (a smaller address space), or a limit
  }
  *fixed = false;
  void* p = mmap(nullptr, bytes, PROT_NONE, kFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

// Regions of a page or more start on a page, smaller ones on a cache line.
std::size_t alignment_for(std::size_t bytes) {
  return bytes >= kHeaderBytes ? kHeaderBytes : 64;
}

// Moves the pages of `from` that were ever touched into `to` (the others read as zero, as `to`
// already does), releasing each piece of `from` once copied: a workspace written before
// skt_recover, as programs do, is then never twice in memory. Copied whole, two ranks' workspaces
// of 0.35 of the memory available each had the OOM killer end the job here, before the check of
// the machine's memory could refuse it. `from` reads as zero afterwards; the caller maps the
// segment in its place, and a seal that fails later leaves skt_recover failed, after which the
// program cannot go on anyway.
void move_touched(std::byte* to, std::byte* from, std::size_t bytes) {
  const std::size_t page = kHeaderBytes;
  const std::size_t pages = (bytes + page - 1) / page;
  if (pages == 0) return;
  std::vector<unsigned char> resident(pages);
  if (mincore(from, pages * page, resident.data()) != 0)
    std::fill(resident.begin(), resident.end(), 1);
  constexpr std::size_t kPiecePages = (std::size_t{64} << 20) / kHeaderBytes;
  for (std::size_t i = 0; i < pages;) {
    if ((resident[i] & 1u) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < pages && j - i < kPiecePages && (resident[j] & 1u) != 0)
      ++j;
    const std::size_t end = std::min(j * page, bytes);
    std::memcpy(to + i * page, from + i * page, end - i * page);
    madvise(from + i * page, (j - i) * page, MADV_DONTNEED);
    i = j;
  }
}

// "malloc.3" is the 4th unnamed allocation of the default scope: say so, and how to escape the
// order.
std::string unnamed_hint(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size() ||
      name.find_first_not_of("0123456789", dot + 1) != std::string::npos) {
    return {};
  }
  const int k = std::stoi(name.substr(dot + 1));
  return fmt::format(
      " (allocation #{} of scope '{}' by skt_malloc or skt::allocator: they must "
      "come in the same order with the same sizes; skt_malloc_named, "
      "skt::allocator<T>(\"name\") or skt_malloc_scope make a name independent of "
      "the order)",
      k + 1, name.substr(0, dot));
}

// What differs between the regions a workspace records and those a launch declared, the first
// difference in words and how many more there are.
std::string workspace_differences(const std::vector<RegionEntry>& recorded,
                                  std::size_t recorded_stage, const std::vector<RegionEntry>& live,
                                  std::size_t live_stage) {
  std::vector<std::string> found;
  for (const auto& r : recorded) {
    const auto it = std::find_if(live.begin(), live.end(),
                                 [&](const RegionEntry& e) { return e.name == r.name; });
    if (it == live.end()) {
      found.push_back(
          fmt::format("region '{}' ({} bytes) is in the checkpoint but this launch did "
                      "not allocate it{}",
                      r.name, r.bytes, unnamed_hint(r.name)));
    } else if (it->bytes != r.bytes) {
      found.push_back(
          fmt::format("region '{}' has {} bytes in the checkpoint but {} in this "
                      "launch{}",
                      r.name, r.bytes, it->bytes, unnamed_hint(r.name)));
    }
  }
  for (const auto& l : live) {
    if (std::none_of(recorded.begin(), recorded.end(),
                     [&](const RegionEntry& e) { return e.name == l.name; })) {
      found.push_back(
          fmt::format("this launch allocated region '{}' ({} bytes), which the "
                      "checkpoint does not have{}",
                      l.name, l.bytes, unnamed_hint(l.name)));
    }
  }
  if (recorded_stage != live_stage) {
    found.push_back(
        fmt::format("the protected objects take {} bytes in the checkpoint but {} in "
                    "this launch",
                    recorded_stage, live_stage));
  }
  if (found.empty()) return "its regions lie elsewhere";
  return found.front() + (found.size() > 1
                              ? fmt::format(" (and {} more difference{})", found.size() - 1,
                                            found.size() == 2 ? "" : "s")
                              : std::string());
}

}  // namespace

Arena::Arena(Options options) : options_(std::move(options)) {
  const Reservation plan = plan_reservation();
  reserved_ = plan.bytes;
  alignment_ = plan.alignment;
  reservation_ = reserve_addresses(reserved_ + alignment_, &at_fixed_addresses_);
  if (reservation_ == nullptr) {
    throw Error(SKT_ERR_NOMEM, fmt::format("cannot reserve {} bytes of addresses for the "
                                           "workspace: {}{}",
                                           reserved_, std::strerror(errno), limit_hint()));
  }
  base_ = reinterpret_cast<std::byte*>(
      round_up(reinterpret_cast<std::uintptr_t>(reservation_), alignment_));
  if (!options_.find_existing) return;
  try {
    FindResult result = find_segment(options_.identity, options_.attach_wait_seconds, false);
    if (result.segment) attach_found(std::move(*result.segment));
  } catch (...) {
    munmap(reservation_, reserved_ + alignment_);
    throw;
  }
}

Arena::~Arena() {
  segment_.detach();
  munmap(reservation_, reserved_ + alignment_);
}

void Arena::attach_found(Segment found) {
  const SegmentHeader& header = found.header();
  if (header.nranks != options_.nranks) {
    throw Error(
        SKT_ERR_MISMATCH,
        fmt::format("the checkpoint of job '{}' was written by {} ranks, this run has {}; "
                    "relaunch with the same number of ranks, go on with this one under a tag "
                    "of its own that reads the job's epoch (skt_epoch_open), or remove the "
                    "job's segments (skt-shm clean --job {})",
                    options_.identity.job, header.nranks, options_.nranks, options_.identity.job));
  }
  ArenaRecord record;
  std::optional<std::vector<RegionEntry>> table;
  if (decode_arena_record(found.base(), &record) && record.table_offset <= header.data_bytes &&
      record.table_bytes <= header.data_bytes - record.table_offset &&
      record.stage_offset + record.stage_bytes <= record.table_offset &&
      record.regions_bytes <= record.stage_offset) {
    table = decode_region_table(found.data() + record.table_offset, record.table_bytes);
  }
  if (!table) {
    // Its description is damaged, so none of its bytes can be placed: as good as lost. It is
    // this rank's own segment (owner and identity checked), so it goes.
    found.remove();
    return;
  }
  if (header.segment_bytes > reserved_) {
    throw Error(SKT_ERR_SHM,
                fmt::format("the workspace segment of job '{}' ({} bytes) is larger "
                            "than the addresses reserved for it ({} bytes){}",
                            options_.identity.job, header.segment_bytes, reserved_, limit_hint()));
  }
  found.remap(base_);
  segment_ = std::move(found);
  found_ = true;
  record_ = record;
  recorded_ = std::move(*table);
  // Regions the segment does not record get ordinary memory past its end (and a relaunch that
  // keeps one of them is refused at seal()).
  next_ = segment_.header().segment_bytes - kHeaderBytes;
  mapped_ = next_;
}

void Arena::map_fresh(std::size_t end) {
  if (kHeaderBytes + round_up(end, kHeaderBytes) > reserved_) {
    throw Error(SKT_ERR_NOMEM, fmt::format("the workspace would need {} bytes, more than the {} "
                                           "bytes of addresses reserved for it{}",
                                           end, reserved_, limit_hint()));
  }
  const std::size_t want = round_up(end, kHeaderBytes);
  if (want <= mapped_) return;
  void* p = mmap(regions() + mapped_, want - mapped_, PROT_READ | PROT_WRITE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(SKT_ERR_NOMEM, fmt::format("cannot map {} bytes for the workspace: {}",
                                           want - mapped_, std::strerror(errno)));
  }
  mapped_ = want;
}

std::byte* Arena::allocate(const std::string& name, std::size_t bytes) {
  if (found_) {
    const auto it = std::find_if(recorded_.begin(), recorded_.end(),
                                 [&](const RegionEntry& e) { return !e.staged && e.name == name; });
    // A region recorded with another size gets ordinary memory like an unknown one: seal(), which
    // every rank reaches together, refuses the launch, naming it.
    if (it != recorded_.end() && it->bytes == bytes) {
      live_.push_back(*it);
      return regions() + it->offset;
    }
  }
  const std::size_t offset = round_up(next_, alignment_for(bytes));
  map_fresh(offset + bytes);
  next_ = offset + bytes;
  live_.push_back({name, false, offset, bytes});
  return regions() + offset;
}

bool Arena::release(const std::byte* ptr) {
  const auto it = std::find_if(live_.begin(), live_.end(),
                               [&](const RegionEntry& e) { return regions() + e.offset == ptr; });
  if (it == live_.end()) return false;
  live_.erase(it);
  return true;
}

bool Arena::recorded(const std::string& name) const {
  return std::any_of(recorded_.begin(), recorded_.end(),
                     [&](const RegionEntry& e) { return !e.staged && e.name == name; });
}

const RegionEntry* Arena::region_at(const std::byte* ptr) const {
  for (const auto& e : live_) {
    if (regions() + e.offset == ptr) return &e;
  }
  return nullptr;
}

std::vector<RegionEntry> Arena::entries() const {
  std::vector<RegionEntry> out = live_;
  std::sort(out.begin(), out.end(),
            [](const RegionEntry& a, const RegionEntry& b) { return a.offset < b.offset; });
  return out;
}

std::size_t Arena::unwritten_bytes() const {
  return segment_ ? segment_bytes() - segment_.resident_bytes() : 0;
}

std::size_t Arena::segment_bytes() const noexcept {
  return segment_ ? segment_.header().segment_bytes : 0;
}

void Arena::seal(std::size_t stage_bytes) {
  const std::vector<RegionEntry> live = entries();
  if (found_) {
    std::vector<RegionEntry> recorded = recorded_;
    std::sort(recorded.begin(), recorded.end(),
              [](const RegionEntry& a, const RegionEntry& b) { return a.offset < b.offset; });
    if (live != recorded || record_.stage_bytes != stage_bytes) {
      throw Error(
          SKT_ERR_MISMATCH,
          fmt::format("the workspace of job '{}' rank {} does not match this launch: {}; "
                      "a relaunch must allocate the same regions, with the same names "
                      "and sizes, and protect the same private objects (or remove the "
                      "job's segments to start afresh: skt-shm clean --job {})",
                      options_.identity.job, options_.identity.rank,
                      workspace_differences(recorded, record_.stage_bytes, live, stage_bytes),
                      options_.identity.job));
    }
    sealed_ = true;
    return;
  }
  ArenaRecord record;
  for (const auto& e : live)
    record.regions_bytes = std::max<std::size_t>(record.regions_bytes, e.offset + e.bytes);
  record.regions_bytes = round_up(record.regions_bytes, 64);
  record.stage_offset = round_up(record.regions_bytes, kHeaderBytes);
  record.stage_bytes = stage_bytes;
  record.table_offset = record.stage_offset + round_up(stage_bytes, kHeaderBytes);
  record.table_bytes = region_table_bytes(live);
  SegmentHeader header;
  header.identity = options_.identity;
  header.nranks = options_.nranks;
  header.data_bytes = record.table_offset + round_up(record.table_bytes, kHeaderBytes);
  Segment fresh = Segment::create(header, options_.huge_pages, Segment::Population::none);
  try {
    move_touched(fresh.data(), regions(), std::min(record.regions_bytes, mapped_));
    encode_arena_record(fresh.base(), record);
    encode_region_table(fresh.data() + record.table_offset, live);
    fresh.remap(base_);
  } catch (...) {
    fresh.remove();
    throw;
  }
  segment_ = std::move(fresh);
  // No relaunch can find a segment of an ephemeral job: marked for removal now, it goes with the
  // last process attached to it however the run ends (Ctrl-C, a kill, the OOM killer), where
  // left behind it would hold the machine's memory until someone cleaned it.
  if (!options_.find_existing) segment_.remove();
  record_ = record;
  sealed_ = true;
}

void Arena::remove() {
  if (segment_) segment_.remove();
}

bool Arena::renew_if_removed() {
  if (!segment_ || !segment_.removed_from_outside()) return false;
  segment_.renew(options_.huge_pages);
  return true;
}

}  // namespace skt
