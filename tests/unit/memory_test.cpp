#include "libselfckpt/src/memory.hpp"

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

}  // namespace
}  // namespace skt
