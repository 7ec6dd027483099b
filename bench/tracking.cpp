// bench-tracking: two ways to find what a program changed in shared memory since a checkpoint,
// side by side on a SysV segment of this machine: comparing the workspace with its committed copy
// block by block (what skt_checkpoint does), and the kernel's write tracking (userfaultfd
// write-protect in asynchronous mode, read back with PAGEMAP_SCAN, Linux 6.7 and later), which
// charges a fault to the first write into each page after the protection is set, in the program's
// own time. For shares of the workspace rewritten between two checkpoints: the program's write time
// plain and under tracking, the scan, and the comparison.
//
//   bench-tracking --mib 256
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bench/table.hpp"

namespace {

// The kernel ABI of asynchronous write-protection and of PAGEMAP_SCAN, newer than the headers of
// Debian 12 (include/uapi/linux/userfaultfd.h and fs.h of Linux 6.7).
constexpr std::uint64_t kFeatureWpUnpopulated = 1u << 13;
constexpr std::uint64_t kFeatureWpAsync = 1u << 15;
struct PageRegion {
  std::uint64_t start, end, categories;
};
struct PageScan {
  std::uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
      category_mask, category_anyof_mask, return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PageScan);
constexpr std::uint64_t kScanCheckWpAsync = 1u << 1;
constexpr std::uint64_t kPageIsWritten = 1u << 1;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A program's step: rewrites the first `bytes` of the area, every word.
void rewrite(std::uint64_t* words, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i)
    words[i] += 1;
}

// Blocks of `block` bytes of `a` that differ from `b`, as skt_checkpoint finds them.
std::size_t differing_blocks(const std::byte* a, const std::byte* b, std::size_t bytes,
                             std::size_t block) {
  std::size_t found = 0;
  for (std::size_t at = 0; at < bytes; at += block)
    found += std::memcmp(a + at, b + at, std::min(block, bytes - at)) != 0 ? 1 : 0;
  return found;
}

// Write tracking over one area; nothing when the kernel does not offer it (the reason is kept).
class WriteTracker {
 public:
  static std::optional<WriteTracker> open(std::byte* area, std::size_t bytes, std::string& why) {
    const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd < 0) {
      why = fmt::format("userfaultfd: {}", std::strerror(errno));
      return std::nullopt;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = kFeatureWpAsync | UFFD_FEATURE_WP_HUGETLBFS_SHMEM | kFeatureWpUnpopulated;
    uffdio_register reg{};
    reg.range = {reinterpret_cast<std::uint64_t>(area), bytes};
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (ioctl(uffd, UFFDIO_API, &api) != 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) != 0 ||
        pagemap < 0) {
      why = fmt::format("asynchronous write-protection of shared memory: {}", std::strerror(errno));
      close(uffd);
      if (pagemap >= 0) close(pagemap);
      return std::nullopt;
    }
    return WriteTracker(uffd, pagemap, area, bytes);
  }

  WriteTracker(WriteTracker&& other) noexcept
      : uffd_(std::exchange(other.uffd_, -1)),
        pagemap_(std::exchange(other.pagemap_, -1)),
        area_(other.area_),
        bytes_(other.bytes_) {}
  WriteTracker(const WriteTracker&) = delete;
  WriteTracker& operator=(const WriteTracker&) = delete;
  WriteTracker& operator=(WriteTracker&&) = delete;
  ~WriteTracker() {
    if (uffd_ >= 0) close(uffd_);
    if (pagemap_ >= 0) close(pagemap_);
  }

  // Every page read-only until written.
  void protect() const {
    uffdio_writeprotect wp{};
    wp.range = {reinterpret_cast<std::uint64_t>(area_), bytes_};
    wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
    if (ioctl(uffd_, UFFDIO_WRITEPROTECT, &wp) != 0) {
      throw std::runtime_error(fmt::format("UFFDIO_WRITEPROTECT: {}", std::strerror(errno)));
    }
  }

  // Bytes written since the protection was set.
  std::size_t written() const {
    std::vector<PageRegion> runs(4096);
    PageScan scan{};
    scan.size = sizeof scan;
    scan.flags = kScanCheckWpAsync;
    scan.start = reinterpret_cast<std::uint64_t>(area_);
    scan.end = scan.start + bytes_;
    scan.category_mask = kPageIsWritten;
    scan.return_mask = kPageIsWritten;
    std::size_t written = 0;
    while (scan.start < scan.end) {
      scan.vec = reinterpret_cast<std::uint64_t>(runs.data());
      scan.vec_len = runs.size();
      const long n = ioctl(pagemap_, kPagemapScan, &scan);
      if (n < 0) throw std::runtime_error(fmt::format("PAGEMAP_SCAN: {}", std::strerror(errno)));
      for (long i = 0; i < n; ++i)
        written += runs[static_cast<std::size_t>(i)].end - runs[static_cast<std::size_t>(i)].start;
      scan.start = scan.walk_end;
    }
    return written;
  }

 private:
  WriteTracker(int uffd, int pagemap, std::byte* area, std::size_t bytes)
      : uffd_(uffd), pagemap_(pagemap), area_(area), bytes_(bytes) {}
  int uffd_;
  int pagemap_;
  std::byte* area_;
  std::size_t bytes_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-tracking: comparing with the committed copy vs the kernel's write tracking"};
  std::size_t mib = 256;
  int repeats = 3;
  std::string csv = "tracking.csv";
  app.add_option("--mib", mib, "workspace in MiB")->check(CLI::Range(1, 65536));
  app.add_option("--repeats", repeats, "timed repetitions (best kept)")->check(CLI::Range(1, 100));
  app.add_option("--csv", csv, "CSV output");
  CLI11_PARSE(app, argc, argv);

  const std::size_t bytes = mib << 20;
  const int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
  void* mapped = id < 0 ? reinterpret_cast<void*>(-1) : shmat(id, nullptr, 0);
  if (id >= 0) shmctl(id, IPC_RMID, nullptr);  // goes with the process
  if (mapped == reinterpret_cast<void*>(-1)) {
    fmt::print(stderr, "bench-tracking: a segment of {} MiB: {}\n", mib, std::strerror(errno));
    return 1;
  }
  auto* workspace = static_cast<std::byte*>(mapped);
  std::memset(workspace, 1, bytes);
  std::vector<std::byte> copy(workspace, workspace + bytes);
  const std::size_t block = 4096;  // skt_checkpoint's block with the default 256 KiB chunk

  // First without any tracking (a registered range costs faults even where it is not protected),
  // then under it.
  const std::vector<int> percents{0, 10, 33, 67, 100};
  auto* words = reinterpret_cast<std::uint64_t*>(workspace);
  auto share = [&](int percent) {
    return bytes / 100 * static_cast<std::size_t>(percent) / 4096 * 4096;
  };
  std::vector<double> plain(percents.size(), 1e30), compare(percents.size(), 1e30);
  for (std::size_t k = 0; k < percents.size(); ++k) {
    for (int r = 0; r < repeats; ++r) {
      std::memcpy(copy.data(), workspace, bytes);  // the last checkpoint
      auto start = std::chrono::steady_clock::now();
      rewrite(words, share(percents[k]));
      plain[k] = std::min(plain[k], seconds_since(start));
      start = std::chrono::steady_clock::now();
      const std::size_t found = differing_blocks(workspace, copy.data(), bytes, block);
      compare[k] = std::min(compare[k], seconds_since(start));
      if (found * block != share(percents[k])) {
        throw std::runtime_error("the comparison missed blocks");
      }
    }
  }
  std::string why;
  auto tracker = WriteTracker::open(workspace, bytes, why);
  fmt::print("{} MiB of SysV shared memory; kernel write tracking: {}\n", mib,
             tracker ? "available (userfaultfd WP_ASYNC + PAGEMAP_SCAN)" : why);
  std::vector<double> tracked(percents.size(), 1e30), scan(percents.size(), 1e30);
  for (std::size_t k = 0; tracker && k < percents.size(); ++k) {
    for (int r = 0; r < repeats; ++r) {
      tracker->protect();
      auto start = std::chrono::steady_clock::now();
      rewrite(words, share(percents[k]));
      tracked[k] = std::min(tracked[k], seconds_since(start));
      start = std::chrono::steady_clock::now();
      const std::size_t written = tracker->written();
      scan[k] = std::min(scan[k], seconds_since(start));
      if (written != share(percents[k])) {
        throw std::runtime_error("the kernel's tracking missed pages");
      }
    }
  }
  skt::bench::Table table({"rewritten_%", "write_s", "tracked_write_s", "fault_cost_s", "scan_s",
                           "tracking_s", "compare_s", "tracking/compare"},
                          csv);
  for (std::size_t k = 0; k < percents.size(); ++k) {
    const double fault_cost = std::max(0.0, tracked[k] - plain[k]);
    auto when_tracked = [&](double v, int digits) {
      return tracker ? skt::bench::num(v, digits) : std::string("-");
    };
    table.row({std::to_string(percents[k]), skt::bench::num(plain[k], 4),
               when_tracked(tracked[k], 4), when_tracked(fault_cost, 4), when_tracked(scan[k], 4),
               when_tracked(fault_cost + scan[k], 4), skt::bench::num(compare[k], 4),
               when_tracked((fault_cost + scan[k]) / compare[k], 2)});
  }
  return 0;
}
