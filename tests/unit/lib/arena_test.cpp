// The workspace arena: one segment per rank whatever the number of regions, region pointers that
// stay valid from skt_alloc on, a relaunch that gets its regions back where they were.
#include "libselfckpt/src/arena.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "selfckpt/selfckpt.hpp"

namespace skt {
namespace {

Arena::Options options(const std::string& job) {
  Arena::Options o;
  o.identity = SegmentIdentity{static_cast<std::uint32_t>(geteuid()),
                               job + "-" + std::to_string(getpid()),
                               "n1",
                               0,
                               SegmentKind::workspace,
                               "workspace"};
  o.nranks = 2;
  return o;
}

int own_segments(const std::string& job) {
  int n = 0;
  for (const auto& s : list_own_segments())
    n += s.header.identity.job == fmt::format("{}-{}", job, getpid()) ? 1 : 0;
  return n;
}

TEST(Arena, UnderAnAddressSpaceLimitTheWorkspaceGetsAQuarterOfWhatIsLeft) {
  // As under `ulimit -v`: the unlimited reservation (twice the node's memory and 64 GiB) cannot
  // be made there, and every job failed with "cannot reserve ... bytes of addresses".
  constexpr std::size_t kGiB = std::size_t{1} << 30;
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    std::size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const std::size_t mapped = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const rlimit limit{mapped + 2 * kGiB, mapped + 2 * kGiB};
    std::string said;
    int code = 0;
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
      said = "setrlimit failed";
      code = 1;
    } else {
      try {
        Arena arena(options("arena-limit"));
        said = fmt::format("reserved {} bytes", arena.reserved_bytes());
        if (arena.reserved_bytes() == 0 || arena.reserved_bytes() > kGiB / 2) code = 2;
        std::memset(arena.allocate("small", 64 << 20), 1, 64 << 20);
        try {
          arena.allocate("large", kGiB);
          code = 3;
        } catch (const Error& e) {
          said += std::string("; ") + e.what();
          if (said.find("ulimit -v") == std::string::npos) code = 4;
        }
      } catch (const std::exception& e) {
        said += std::string("; ") + e.what();
        code = 5;
      }
    }
    [[maybe_unused]] const auto n = write(report[1], said.data(), said.size());
    _exit(code);
  }
  close(report[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = read(report[0], buffer, sizeof buffer)) > 0;)
    said.append(buffer, static_cast<std::size_t>(n));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << said;
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
  EXPECT_NE(said.find("more than the"), std::string::npos) << said;
}

TEST(Arena, FortyRegionsMakeOneSegmentAndKeepWhatWasWrittenBeforeSeal) {
  std::vector<std::byte*> regions;
  std::size_t total = 0;
  {
    Arena arena(options("arena-a"));
    EXPECT_FALSE(arena.found());
    for (int i = 0; i < 40; ++i) {
      const std::size_t bytes = 1000 + 37 * static_cast<std::size_t>(i * i);
      std::byte* p = arena.allocate(fmt::format("r{}", i), bytes);
      // Written at once, before the next region exists, as programs do.
      std::memset(p, i + 1, bytes);
      regions.push_back(p);
      total += bytes;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (bytes >= 4096 ? 4096 : 64), 0u);
    }
    arena.seal(256);
    EXPECT_EQ(own_segments("arena-a"), 1);
    for (int i = 0; i < 40; ++i) {
      const std::size_t bytes = 1000 + 37 * static_cast<std::size_t>(i * i);
      EXPECT_EQ(static_cast<int>(regions[static_cast<std::size_t>(i)][bytes - 1]), i + 1) << i;
    }
    // Alignment gaps are all the arena adds: under a page per region here.
    EXPECT_LT(arena.regions_bytes(), total + 40 * 4096);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.stage()) % 4096, 0u);
  }
  // A relaunch finds the segment and gets each region back at its recorded place, whatever the
  // order it allocates them in.
  Arena again(options("arena-a"));
  EXPECT_TRUE(again.found());
  for (int i = 39; i >= 0; --i) {
    const std::size_t bytes = 1000 + 37 * static_cast<std::size_t>(i * i);
    std::byte* p = again.allocate(fmt::format("r{}", i), bytes);
    EXPECT_EQ(static_cast<int>(p[0]), i + 1) << i;
    EXPECT_EQ(static_cast<int>(p[bytes - 1]), i + 1) << i;
  }
  again.seal(256);
  EXPECT_TRUE(again.found());
  again.remove();
}

TEST(Arena, EveryLaunchPlacesTheWorkspaceAtTheSameAddresses) {
  // A table of row pointers in one region, pointing into another: a relaunch restores the table as
  // it was, so the rows must come back at the same addresses, in a new process too.
  const auto in_fixed_range = [](const std::byte* p) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return at >= (std::uintptr_t{32} << 40) && at < (std::uintptr_t{80} << 40);
  };
  std::byte* table = nullptr;
  std::byte* rows = nullptr;
  {
    Arena arena(options("arena-fixed"));
    EXPECT_TRUE(arena.at_fixed_addresses());
    table = arena.allocate("table", 8 * sizeof(std::byte*));
    rows = arena.allocate("rows", 8 * 100);
    for (int i = 0; i < 8; ++i) {
      std::byte* row = rows + 100 * i;
      std::memcpy(table + i * sizeof row, &row, sizeof row);
    }
    arena.seal(0);
    EXPECT_TRUE(in_fixed_range(table));
    // A second workspace in the same process (another context) takes the next place.
    Arena other(options("arena-fixed-other"));
    EXPECT_TRUE(other.at_fixed_addresses());
    std::byte* elsewhere = other.allocate("x", 64);
    EXPECT_TRUE(in_fixed_range(elsewhere));
    EXPECT_GE(elsewhere, rows + 8 * 100);
  }
  Arena again(options("arena-fixed"));
  ASSERT_TRUE(again.found());
  EXPECT_EQ(again.allocate("table", 8 * sizeof(std::byte*)), table);
  EXPECT_EQ(again.allocate("rows", 8 * 100), rows);
  again.seal(0);
  std::byte* third_row = nullptr;
  std::memcpy(&third_row, table + 3 * sizeof third_row, sizeof third_row);
  EXPECT_EQ(third_row, rows + 300);
  again.remove();
}

TEST(Arena, WhereTheFixedAddressesAreTakenTheWorkspaceGoesElsewhereAndSaysSo) {
  const auto from = std::uintptr_t{32} << 40;
  const std::size_t span = std::size_t{48} << 40;
  void* taken = mmap(reinterpret_cast<void*>(from), span, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(taken, reinterpret_cast<void*>(from)) << std::strerror(errno);
  {
    Arena arena(options("arena-moved"));
    EXPECT_FALSE(arena.at_fixed_addresses());
    std::byte* p = arena.allocate("r", 4096);
    std::memset(p, 7, 4096);
    arena.seal(0);
    arena.remove();
  }
  munmap(taken, span);
  Arena back(options("arena-moved"));
  EXPECT_TRUE(back.at_fixed_addresses());
}

TEST(Arena, ARelaunchThatDeclaresOtherRegionsIsRefusedAndTouchesNothing) {
  {
    Arena arena(options("arena-b"));
    std::memset(arena.allocate("a", 5000), 7, 5000);
    arena.allocate("b", 100);
    arena.seal(0);
  }
  {
    // The size differs: refused at seal (which every rank reaches together), not at allocate.
    Arena other(options("arena-b"));
    other.allocate("a", 5001);
    other.allocate("b", 100);
    try {
      other.seal(0);
      FAIL() << "a different size was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_MISMATCH);
      EXPECT_NE(std::string(e.what()).find("region 'a' has 5000 bytes in the checkpoint but 5001"),
                std::string::npos)
          << e.what();
    }
  }
  {
    // Unnamed allocations: the message says which one, in which scope, and how to name it.
    Arena other(options("arena-b"));
    other.allocate("a", 5000);
    other.allocate("b", 100);
    other.allocate("malloc.2", 64);
    other.allocate("malloc.3", 64);
    try {
      other.seal(0);
      FAIL() << "extra regions were accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("allocated region 'malloc.2' (64 bytes), which the checkpoint does not "
                          "have (allocation #3 of scope 'malloc'"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("(and 1 more difference)"), std::string::npos) << what;
    }
  }
  {
    Arena other(options("arena-b"));
    other.allocate("a", 5000);
    other.allocate("c", 100);  // not in the checkpoint: ordinary memory until seal
    try {
      other.seal(0);
      FAIL() << "another set of regions was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_MISMATCH);
      EXPECT_NE(std::string(e.what()).find("'b' (100 bytes)"), std::string::npos) << e.what();
    }
  }
  Arena same(options("arena-b"));
  EXPECT_EQ(static_cast<int>(same.allocate("a", 5000)[4999]), 7);
  same.allocate("b", 100);
  same.seal(0);
  same.remove();
}

TEST(Arena, ReleasedRegionsLeaveTheTableAndReallocationsKeepTheirPlaces) {
  Arena arena(options("arena-c"));
  std::byte* a = arena.allocate("a", 100);
  std::byte* b = arena.allocate("b", 200);
  EXPECT_TRUE(arena.release(a));
  EXPECT_FALSE(arena.release(a));
  EXPECT_EQ(arena.region_at(b)->name, "b");
  arena.seal(0);
  const auto entries = arena.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "b");
  arena.remove();
}

}  // namespace
}  // namespace skt
