// SysV segments of the calling user: created 0600, found again by identity, and never attached
// for writing nor modified when the key belongs to someone else.
#include "libselfckpt/internal/segment.hpp"

#include <gtest/gtest.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "selfckpt/selfckpt.hpp"

namespace skt {
namespace {

SegmentIdentity identity_for(const std::string& job, int rank, const std::string& name = "grid") {
  return SegmentIdentity{static_cast<std::uint32_t>(geteuid()),
                         job + "-" + std::to_string(getpid()),
                         "n1",
                         rank,
                         SegmentKind::workspace,
                         name};
}

Segment make(const SegmentIdentity& id, std::size_t bytes) {
  SegmentHeader h;
  h.identity = id;
  h.nranks = 4;
  h.data_bytes = bytes;
  return Segment::create(h, false);
}

// Removes a segment by key at the end of a test, whatever happened.
struct KeyGuard {
  key_t key;
  ~KeyGuard() {
    const int id = shmget(key, 0, 0);
    if (id >= 0) shmctl(id, IPC_RMID, nullptr);
  }
};

// Removes every segment of a job (reserves included) at the end of a test.
struct JobGuard {
  std::string job;
  ~JobGuard() {
    for (const auto& s : list_own_segments())
      if (s.header.identity.job == job) remove_segment(s.shmid);
  }
};

TEST(Reserve, TakenOverOnceByASegmentItCanHoldAndFoundThere) {
  const auto id = identity_for("seg-warm", 3);
  const JobGuard guard{id.job};
  Segment reserve = create_reserve(id.job, "n1", 100000, false);
  const std::size_t reserved_bytes = reserve.header().segment_bytes;
  const int reserved_id = reserve.id();
  reserve.detach();
  ASSERT_EQ(list_reserves(id.job, "n1").size(), 1u);
  EXPECT_TRUE(list_reserves(id.job, "n2").empty()) << "a reserve is for its node only";

  Segment taken = make(id, 90000);
  EXPECT_TRUE(taken.from_reserve());
  EXPECT_EQ(taken.id(), reserved_id);
  EXPECT_EQ(taken.header().segment_bytes, reserved_bytes);
  EXPECT_EQ(taken.header().data_bytes, 90000u);
  EXPECT_TRUE(list_reserves(id.job, "n1").empty()) << "taken over: no longer a reserve";
  std::memset(taken.data(), 0x5a, 90000);
  taken.detach();

  // Found again by its identity, though at a reserve's key; listed as the rank's.
  FindResult found = find_segment(id);
  ASSERT_TRUE(found.segment);
  EXPECT_EQ(found.segment->id(), reserved_id);
  EXPECT_EQ(static_cast<unsigned char>(found.segment->data()[89999]), 0x5a);
  found.segment->detach();
  const auto listed = list_segments_of({id});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed.front().shmid, reserved_id);

  // Another rank finds no reserve left: it makes its own segment.
  const Segment other = make(identity_for("seg-warm", 4), 90000);
  EXPECT_FALSE(other.from_reserve());
  EXPECT_NE(other.id(), reserved_id);
}

TEST(Reserve, NotTakenWhenTooSmallMuchLargerOrOfOtherPages) {
  const auto id = identity_for("seg-cold", 1);
  const JobGuard guard{id.job};
  create_reserve(id.job, "n1", 50000, false);            // too small
  create_reserve(id.job, "n1", 400000000, false);        // far too large
  create_reserve(id.job, "n1", 100000, false).detach();  // fits
  EXPECT_EQ(list_reserves(id.job, "n1").size(), 3u);
  const Segment s = make(id, 100000);
  EXPECT_TRUE(s.from_reserve());
  EXPECT_EQ(list_reserves(id.job, "n1").size(), 2u);
  EXPECT_FALSE(make(identity_for("seg-cold", 2), 100000).from_reserve());
}

TEST(Reserve, TakenBySubJobsOfItsTag) {
  auto id = identity_for("seg-sub", 0);
  const JobGuard guard{id.job};
  const JobGuard sub_guard{id.job + "+t0"};
  create_reserve(id.job, "n1", 20000, false).detach();
  id.job += "+t0";
  EXPECT_TRUE(make(id, 20000).from_reserve());
}

TEST(Segment, CreatedPrivateAndFoundAgain) {
  const auto id = identity_for("seg-a", 2);
  Segment s = make(id, 10000);
  std::memset(s.data(), 0x3c, 10000);
  shmid_ds ds{};
  ASSERT_EQ(shmctl(s.id(), IPC_STAT, &ds), 0);
  EXPECT_EQ(ds.shm_perm.mode & 0777, 0600u);
  EXPECT_EQ(ds.shm_perm.uid, geteuid());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.data()) % 4096, 0u);

  // Attached (here by this very process, standing for a rank of an earlier launch): refused after
  // the wait, naming the job and the live processes.
  try {
    find_segment(id, 0.05);
    FAIL() << "an attached segment was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_BUSY);
    EXPECT_NE(std::string(e.what()).find("still attached by 1 live process"), std::string::npos)
        << e.what();
  }
  const int shmid = s.id();
  s.detach();
  FindResult found = find_segment(id);
  ASSERT_TRUE(found.segment.has_value());
  EXPECT_EQ(found.segment->id(), shmid);
  EXPECT_EQ(found.segment->header().data_bytes, 10000u);
  EXPECT_EQ(static_cast<unsigned char>(found.segment->data()[9999]), 0x3cu);

  auto other_rank = id;
  other_rank.rank = 3;
  EXPECT_FALSE(find_segment(other_rank).segment.has_value());
  auto other_job = id;
  other_job.job += "x";
  EXPECT_FALSE(find_segment(other_job).segment.has_value());
  found.segment->remove();
}

// The VmFlags line of this process's mapping that holds `address` (/proc/self/smaps).
std::string vm_flags_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool holds = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2) {
      holds = from <= at && at < to;
    } else if (holds && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return {};
}

// A rank that crashes dumps its workspace, as the program without selfckpt would, not its
// checkpoint segment: "dd" (VM_DONTDUMP) in the mapping's flags, made or found again.
TEST(Segment, ACheckpointStaysOutOfCoreDumps) {
  auto workspace_id = identity_for("seg-dump", 0);
  auto checkpoint_id = workspace_id;
  checkpoint_id.kind = SegmentKind::checkpoint;
  Segment workspace = make(workspace_id, 100000);
  Segment checkpoint = make(checkpoint_id, 100000);
  EXPECT_EQ(vm_flags_of(workspace.data()).find(" dd "), std::string::npos)
      << vm_flags_of(workspace.data());
  EXPECT_NE(vm_flags_of(checkpoint.data()).find(" dd "), std::string::npos)
      << vm_flags_of(checkpoint.data());
  checkpoint.detach();
  FindResult found = find_segment(checkpoint_id);
  ASSERT_TRUE(found.segment.has_value());
  EXPECT_NE(vm_flags_of(found.segment->data()).find(" dd "), std::string::npos)
      << vm_flags_of(found.segment->data());
  // Renewed after a removal from outside: a new mapping at the same address, left out as well.
  std::byte* const at = found.segment->data();
  ASSERT_EQ(shmctl(found.segment->id(), IPC_RMID, nullptr), 0);
  ASSERT_TRUE(found.segment->removed_from_outside());
  found.segment->renew(false);
  EXPECT_FALSE(found.segment->removed_from_outside());
  EXPECT_EQ(found.segment->data(), at);
  EXPECT_NE(vm_flags_of(at).find(" dd "), std::string::npos) << vm_flags_of(at);
  found.segment->remove();
  workspace.remove();
}

TEST(Segment, KeyCollisionProbesOnAndLeavesTheOtherSegmentAlone) {
  const auto mine = identity_for("seg-b", 0);
  // Someone else's segment (another job) sits at our first key.
  const key_t first = segment_key(mine, 0);
  KeyGuard guard{first};
  const int foreign = shmget(first, 8192, IPC_CREAT | IPC_EXCL | 0600);
  ASSERT_GE(foreign, 0) << "key already in use: " << std::strerror(errno);
  {
    void* p = shmat(foreign, nullptr, 0);
    SegmentHeader h;
    h.identity = identity_for("another-job", 0);
    h.nranks = 4;
    h.data_bytes = 8192 - kHeaderBytes;
    h.segment_bytes = 8192;
    encode_header(static_cast<std::byte*>(p), h);
    std::memset(static_cast<char*>(p) + kHeaderBytes, 0x11, 4096);
    shmdt(p);
  }
  Segment s = make(mine, 5000);
  EXPECT_NE(s.id(), foreign);
  s.detach();
  FindResult found = find_segment(mine);
  ASSERT_TRUE(found.segment.has_value());
  EXPECT_EQ(found.segment->id(), s.id());
  ASSERT_FALSE(found.skipped.empty());
  EXPECT_NE(found.skipped[0].find("another-job"), std::string::npos) << found.skipped[0];
  // The other segment is untouched.
  void* p = shmat(foreign, nullptr, SHM_RDONLY);
  EXPECT_EQ(static_cast<unsigned char*>(p)[kHeaderBytes + 4095], 0x11u);
  shmdt(p);
  found.segment->remove();
}

TEST(Segment, ForeignModeOrGarbageIsNeverAttached) {
  const auto mine = identity_for("seg-c", 1);
  const key_t first = segment_key(mine, 0);
  KeyGuard guard{first};
  const int loose = shmget(first, 8192, IPC_CREAT | IPC_EXCL | 0644);
  ASSERT_GE(loose, 0);
  FindResult found = find_segment(mine);
  EXPECT_FALSE(found.segment.has_value());
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].find("mode 644"), std::string::npos) << found.skipped[0];

  shmctl(loose, IPC_RMID, nullptr);
  const int garbage = shmget(first, 8192, IPC_CREAT | IPC_EXCL | 0600);
  ASSERT_GE(garbage, 0);
  found = find_segment(mine);
  EXPECT_FALSE(found.segment.has_value());
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].find("wrong magic"), std::string::npos) << found.skipped[0];
}

// Our own segment, given away to another user (root can): never attached again, nor listed.
TEST(Segment, ChownedToAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give a segment away";
  const auto id = identity_for("seg-f", 2);
  KeyGuard guard{segment_key(id, 0)};
  Segment s = make(id, 100);
  shmid_ds ds{};
  ASSERT_EQ(shmctl(s.id(), IPC_STAT, &ds), 0);
  ds.shm_perm.uid = 65534;
  ASSERT_EQ(shmctl(s.id(), IPC_SET, &ds), 0);
  const FindResult found = find_segment(id);
  EXPECT_FALSE(found.segment.has_value());
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].find("uid 65534"), std::string::npos) << found.skipped[0];
  std::string why;
  EXPECT_FALSE(Segment::attach(s.id(), true, &why).has_value());
  for (const auto& entry : list_own_segments())
    EXPECT_NE(entry.shmid, s.id());
}

TEST(Segment, ListedWithItsHeaderAndRemoved) {
  const auto id = identity_for("seg-d", 5, "listed");
  Segment s = make(id, 100);
  bool listed = false;
  for (const auto& entry : list_own_segments()) {
    if (entry.shmid == s.id()) {
      listed = true;
      EXPECT_EQ(entry.header.identity.name, "listed");
      EXPECT_EQ(entry.header.identity.rank, 5);
    }
  }
  EXPECT_TRUE(listed);
  s.remove();
  s.detach();
  EXPECT_FALSE(find_segment(id).segment.has_value());
}

// A job's segment written by another version of selfckpt (a relaunch after an upgrade): a
// relaunch refuses it, naming both versions, instead of leaving it unseen, holding its memory, and
// starting afresh; skt-shm lists and removes it.
TEST(Segment, OfAnotherVersionIsRefusedListedAndRemoved) {
  const auto id = identity_for("seg-v", 1);
  KeyGuard guard{segment_key(id, 0)};
  SegmentHeader h;
  h.version = 5;
  h.identity = id;
  h.nranks = 4;
  h.data_bytes = 100;
  Segment old = Segment::create(h, false);
  try {
    find_segment(id);
    FAIL() << "a segment of format 5 was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_MISMATCH);
    const std::string m = e.what();
    EXPECT_NE(m.find("segment format 5; this one reads format"), std::string::npos) << m;
    EXPECT_NE(m.find("skt-shm clean --job " + id.job), std::string::npos) << m;
  }
  for (const auto& entry : list_own_segments())
    EXPECT_NE(entry.shmid, old.id());
  bool listed = false;
  for (const auto& entry : list_own_segments(true)) {
    if (entry.shmid != old.id()) continue;
    listed = true;
    EXPECT_EQ(entry.header.version, 5u);
    EXPECT_TRUE(same_identity(entry.header.identity, id));
  }
  EXPECT_TRUE(listed);
  const int shmid = old.id();
  old.detach();
  EXPECT_TRUE(remove_segment(shmid));
  EXPECT_FALSE(find_segment(id).segment.has_value());
}

TEST(Segment, KernelRefusalNamesTheLimit) {
  SegmentHeader h;
  h.identity = identity_for("seg-e", 0);
  h.nranks = 1;
  h.data_bytes = std::size_t{1} << 62;
  try {
    Segment::create(h, false);
    FAIL() << "a 4 EiB segment cannot exist";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE((e.code() == SKT_ERR_SHM && m.find("kernel.shm") != std::string::npos) ||
                (e.code() == SKT_ERR_NOMEM && m.find("out of memory") != std::string::npos))
        << m;
  }
}

// Twice the node's memory and swap: the kernel's overcommit heuristic refuses it at once (with
// overcommit_memory = 1 it would grant it and the populate would summon the OOM killer, so the test
// is skipped there). The error says so, and no segment is left.
TEST(Segment, OutOfMemoryIsSaidAndLeavesNothing) {
  std::FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r");
  int overcommit = 1;
  if (f != nullptr) {
    if (std::fscanf(f, "%d", &overcommit) != 1) overcommit = 1;
    std::fclose(f);
  }
  if (overcommit == 1) GTEST_SKIP() << "vm.overcommit_memory = 1 grants any size";
  struct sysinfo info {};
  ASSERT_EQ(sysinfo(&info), 0);
  const std::size_t memory =
      (static_cast<std::size_t>(info.totalram) + info.totalswap) * info.mem_unit;
  SegmentHeader h;
  h.identity = identity_for("seg-g", 0);
  h.nranks = 1;
  h.data_bytes = 2 * memory;
  KeyGuard guard{segment_key(h.identity, 0)};
  try {
    Segment::create(h, false);
    FAIL() << "a segment of twice the memory and swap was granted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_NOMEM) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(find_segment(h.identity).segment.has_value());
  for (const auto& entry : list_own_segments())
    EXPECT_NE(entry.header.identity.job, h.identity.job);
}

// Runs `child` in `processes` forked processes released at the same moment; returns the exit code
// of each (-1 for one that did not exit).
std::vector<int> race(int processes, const std::function<int()>& child) {
  int gun[2];
  if (pipe(gun) != 0) return {};
  std::vector<pid_t> children;
  for (int c = 0; c < processes; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(gun[1]);
      char go = 0;
      _exit(read(gun[0], &go, 1) == 0 ? child() : 3);
    }
    if (pid > 0) children.push_back(pid);
  }
  close(gun[0]);
  close(gun[1]);  // the start: every child's read returns at once
  std::vector<int> codes;
  for (const pid_t pid : children) {
    int status = 0;
    const bool exited = waitpid(pid, &status, 0) == pid && WIFEXITED(status);
    codes.push_back(exited ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

// Two relaunches of a job started at once (an operator who runs the resume command twice) race for
// each segment: processes released together, each taking the segment when it is free and holding
// it a while. Never more than one may hold it at a time, however the kernel interleaves them.
TEST(Segment, OneOwnerAmongProcessesThatTakeItAtOnce) {
  constexpr int kProcesses = 6;
  constexpr int kRounds = 20;
  const auto id = identity_for("seg-race", 0);
  Segment s = make(id, 4096);
  KeyGuard guard{segment_key(id, 0)};
  s.detach();
  // [0]: holders now, [1]: the most at once, [2]: takings.
  auto* shared = static_cast<std::atomic<int>*>(mmap(nullptr, 3 * sizeof(std::atomic<int>),
                                                     PROT_READ | PROT_WRITE,
                                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  for (int i = 0; i < 3; ++i)
    new (&shared[i]) std::atomic<int>(0);
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<int> codes = race(kProcesses, [&] {
      try {
        FindResult found = find_segment(id, 30);
        if (!found.segment) return 2;
        const int now = shared[0].fetch_add(1) + 1;
        int most = shared[1].load();
        while (now > most && !shared[1].compare_exchange_weak(most, now)) {
        }
        shared[2].fetch_add(1);
        usleep(2000);
        shared[0].fetch_sub(1);
        return 0;
      } catch (const Error&) {
        return 1;
      }
    });
    EXPECT_EQ(codes, std::vector<int>(kProcesses, 0)) << "round " << round;
  }
  EXPECT_EQ(shared[1].load(), 1) << "processes held the segment at once";
  EXPECT_EQ(shared[2].load(), kProcesses * kRounds);
  munmap(shared, 3 * sizeof(std::atomic<int>));
}

// Two first launches of a job started at once both find no segment and both create one. The
// second must not take the next key and make a twin with the same identity (two launches would
// run on, and a relaunch could mix their segments): one creates it, the others are refused.
TEST(Segment, OneOfProcessesCreatingItAtOnceMakesIt) {
  constexpr int kProcesses = 6;
  constexpr int kRounds = 10;
  const auto id = identity_for("seg-twin", 0);
  const auto remove_all = [&] {
    for (const auto& entry : list_own_segments())
      if (same_identity(entry.header.identity, id)) shmctl(entry.shmid, IPC_RMID, nullptr);
  };
  for (int round = 0; round < kRounds; ++round) {
    // 0: made it, 1: refused as another launch's, 2: anything else.
    std::vector<int> codes = race(kProcesses, [&] {
      try {
        make(id, 1 << 20);
        return 0;
      } catch (const Error& e) {
        return e.code() == SKT_ERR_BUSY &&
                       std::string(e.what()).find("another launch") != std::string::npos
                   ? 1
                   : 2;
      }
    });
    std::sort(codes.begin(), codes.end());
    std::vector<int> expected(kProcesses, 1);
    expected[0] = 0;
    int found = 0;
    for (const auto& entry : list_own_segments())
      found += same_identity(entry.header.identity, id) ? 1 : 0;
    remove_all();
    EXPECT_EQ(codes, expected) << "round " << round;
    EXPECT_EQ(found, 1) << "round " << round;
  }
}

}  // namespace
}  // namespace skt
