#include "libselfckpt/internal/memory.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace skt {
namespace {

namespace fs = std::filesystem;

// A hybrid machine (this one): the memory controller on v1, the unified hierarchy without it.
constexpr const char* kHybridCgroup = "9:systemd:/\n4:memory:/process_api/86fb\n3:cpuset:/\n0::/\n";
constexpr const char* kHybridMounts =
    "22 1 0:20 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "23 22 0:21 / /sys/fs/cgroup/unified rw,nosuid shared:3 - cgroup2 cgroup2 rw\n"
    "26 22 0:24 / /sys/fs/cgroup/memory rw,nosuid shared:8 - cgroup cgroup rw,memory\n"
    "27 22 0:25 / /sys/fs/cgroup/cpuset rw,nosuid shared:9 - cgroup cgroup rw,cpuset\n";

TEST(MemoryCgroupPath, HybridUsesTheV1MemoryControllerAndEveryAncestor) {
  const auto path = memory_cgroup_path(kHybridCgroup, kHybridMounts);
  ASSERT_TRUE(path);
  EXPECT_FALSE(path->unified);
  EXPECT_EQ(path->directories, (std::vector<std::string>{"/sys/fs/cgroup/memory/process_api/86fb",
                                                         "/sys/fs/cgroup/memory/process_api",
                                                         "/sys/fs/cgroup/memory"}));
}

TEST(MemoryCgroupPath, UnifiedSlurmStep) {
  const auto path = memory_cgroup_path(
      "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_1\n",
      "30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  ASSERT_TRUE(path);
  EXPECT_TRUE(path->unified);
  ASSERT_EQ(path->directories.size(), 7u);
  EXPECT_EQ(path->directories[0],
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/task_1");
  EXPECT_EQ(path->directories[3], "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42");
  EXPECT_EQ(path->directories[6], "/sys/fs/cgroup");
}

TEST(MemoryCgroupPath, AMountedSubTreeIsFoundBelowItsRoot) {
  // A container sees its own cgroup mounted at /sys/fs/cgroup: the path drops the mount's root.
  const auto path =
      memory_cgroup_path("0::/kubepods/pod7/c1/inner\n",
                         "40 39 0:26 /kubepods/pod7/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(path);
  EXPECT_EQ(path->directories,
            (std::vector<std::string>{"/sys/fs/cgroup/inner", "/sys/fs/cgroup"}));
}

TEST(MemoryCgroupPath, NoneWithoutACgroupMount) {
  EXPECT_FALSE(memory_cgroup_path(kHybridCgroup, "22 1 0:20 / /proc rw - proc proc rw\n"));
  EXPECT_FALSE(memory_cgroup_path("", kHybridMounts));
}

class MemoryLimitFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ =
        fs::temp_directory_path() /
        ("skt-memory-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(directory_ / name) << text;
  }
  fs::path directory_;
};

TEST_F(MemoryLimitFiles, UnifiedRoomLeavesOutTheFileCache) {
  write("memory.max", "3221225472\n");
  write("memory.current", "1073741824\n");
  write("memory.stat",
        "anon 536870912\nfile 536870912\nactive_file 268435456\n"
        "inactive_file 134217728\nshmem 134217728\n");
  const auto limit = memory_limit(directory_, true);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->limit, 3221225472u);
  // Charged: 1 GiB less 384 MiB of file cache.
  EXPECT_EQ(limit->room, 3221225472u - (1073741824u - 402653184u));
  EXPECT_EQ(limit->directory, directory_.string());
}

TEST_F(MemoryLimitFiles, V1CountsDescendantsFileCache) {
  write("memory.limit_in_bytes", "2147483648\n");
  write("memory.usage_in_bytes", "1610612736\n");
  write("memory.stat",
        "active_file 1\ninactive_file 1\ntotal_active_file 536870912\n"
        "total_inactive_file 0\n");
  const auto limit = memory_limit(directory_, false);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->room, 2147483648u - 1073741824u);
}

TEST_F(MemoryLimitFiles, NoLimitIsNone) {
  write("memory.max", "max\n");
  write("memory.current", "1024\n");
  EXPECT_FALSE(memory_limit(directory_, true));
  write("memory.limit_in_bytes", "9223372036854771712\n");
  write("memory.usage_in_bytes", "1024\n");
  EXPECT_FALSE(memory_limit(directory_, false));
  EXPECT_FALSE(memory_limit((directory_ / "absent").string(), true));
}

TEST_F(MemoryLimitFiles, ChargedBeyondTheLimitLeavesNoRoom) {
  write("memory.max", "1000\n");
  write("memory.current", "5000\n");
  write("memory.stat", "");
  const auto limit = memory_limit(directory_, true);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->room, 0u);
}

TEST_F(MemoryLimitFiles, TwoDirectoriesHaveTwoIdentities) {
  write("memory.max", "4096\n");
  write("memory.current", "0\n");
  fs::create_directories(directory_ / "child");
  std::ofstream(directory_ / "child" / "memory.max") << "2048\n";
  std::ofstream(directory_ / "child" / "memory.current") << "0\n";
  const auto parent = memory_limit(directory_, true);
  const auto child = memory_limit((directory_ / "child").string(), true);
  ASSERT_TRUE(parent && child);
  EXPECT_NE(parent->id, child->id);
  EXPECT_EQ(memory_limit(directory_, true)->id, parent->id);
}

// /proc/sysvipc/shm as this machine printed it: another job's workspace of 1 GiB, attached, not
// written; this job's own segment, half written; a leftover of a crashed job, detached; a segment
// partly swapped out; a huge-page segment whose resident count the kernel overstates.
constexpr const char* kSysvShm =
    "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid "
    "     atime      dtime      ctime                   rss                  swap\n"
    "         0  217645115  1600            1073741824 22104 22104      1     0     0     0     0 "
    "1795762774          0 1795762774                     0                     0\n"
    " 12345678        101   600              41943040   900   901      2  1000  1000  1000  1000 "
    "1795762774          0 1795762774              20971520                     0\n"
    " 22222222        102   600              41943040   700   700      0  1000  1000  1000  1000 "
    "1795762774 1795762779 1795762774                     0                     0\n"
    " 33333333        103   600              41947136   800   800      1  1000  1000  1000  1000 "
    "1795762774          0 1795762774              10485760              10485760\n"
    "         0  217645116  1600               8388608 22161 22161      1     0     0     0     0 "
    "1795762784          0 1795762784            1073741824                     0\n";

TEST(SharedSegments, ParsedFromTheKernelsTable) {
  const std::vector<SharedSegment> segments = parse_shared_segments(kSysvShm);
  ASSERT_EQ(segments.size(), 5u);
  EXPECT_EQ(segments[0].id, 217645115);
  EXPECT_EQ(segments[0].bytes, 1073741824u);
  EXPECT_EQ(segments[0].written, 0u);
  EXPECT_EQ(segments[0].attached, 1);
  EXPECT_EQ(segments[1].written, 20971520u);
  EXPECT_EQ(segments[1].attached, 2);
  EXPECT_EQ(segments[3].written, 20971520u);  // resident and swapped out
  EXPECT_EQ(segments[4].written, 8388608u);   // never more than the segment
  EXPECT_TRUE(parse_shared_segments("").empty());
  // A kernel older than the rss and swap columns says nothing of what is written.
  EXPECT_TRUE(parse_shared_segments("1 2 600 4096 1 1 1 0 0 0 0 5 0 5\n").empty());
}

TEST(SharedSegments, PromisedAreTheUnwrittenPagesOfOthersAttachedSegments) {
  const std::vector<SharedSegment> segments = parse_shared_segments(kSysvShm);
  const std::uint64_t others = 1073741824u + 20971520u + 20975616u;
  EXPECT_EQ(promised_to_others(segments, {}, 0), others);
  // This job's own segments are its demand, counted apart; a detached leftover promises nothing.
  EXPECT_EQ(promised_to_others(segments, {101, -1}, 0), others - 20971520u);
  // Where huge pages are reserved, a segment of whole huge pages may be backed by the reserve.
  EXPECT_EQ(promised_to_others(segments, {}, 2u << 20), 20975616u);
}

}  // namespace
}  // namespace skt
