// The storage level under the simulator: an epoch drained by four ranks, then restored from its
// files with each rank crashed at each effect of the restore. The ranks that return hold the
// epoch's bytes exactly; a restore cut short leaves the files as they were, and the next one
// restores them whole.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "libselfckpt/src/storage_level.hpp"
#include "tests/unit/lib/protocol_sim.hpp"

namespace skt::sim {
namespace {

constexpr int kRanks = 4;
constexpr std::size_t kStage = 64;
constexpr std::size_t kRegion = 3 * 4096 + 100;  // not a whole number of chunks
constexpr std::uint64_t kEpoch = 1;

std::byte pattern(int rank, std::size_t i) {
  return static_cast<std::byte>((i * 131 + static_cast<std::size_t>(rank) * 17 + 5) & 0xff);
}

// A rank's memory level as the storage level sees it: its store, planned as a fresh start would,
// and the bytes of B that a restore loaded.
class SimMemory final : public MemoryLevel {
 public:
  SimMemory(const Config& config, int rank, const RestorePlan& setup) : rank_(rank) {
    const int group = setup.groups.group_of[static_cast<std::size_t>(rank)];
    const GroupShape& shape = setup.shapes[static_cast<std::size_t>(group)];
    const int size = static_cast<int>(shape.ranks.size());
    store_.mode = config.mode;
    store_.layout =
        StreamLayout::plan({{"data", false, 0, kRegion}}, kStage, kRegion, config.chunk_bytes,
                           stage_period(config.scheme, size, config.parity));
    store_.geometry = shape.geometry;
    store_.member = setup.groups.index_of[static_cast<std::size_t>(rank)];
    store_.areas = checkpoint_areas(store_.layout, store_.geometry, 1, true);
    checkpoint_.assign(store_.areas.data_bytes(0), std::byte{0});
    store_.checkpoint = checkpoint_.data();
    loaded_.assign(store_.layout.copy_bytes(), std::byte{0});
    info_.groups = static_cast<std::uint32_t>(setup.groups.groups());
    info_.group = static_cast<std::uint32_t>(group);
    info_.member = static_cast<std::uint32_t>(store_.member);
    info_.group_size = static_cast<std::uint32_t>(size);
    info_.command = skt::Job::command_print();
    for (int i = 0; i < size; ++i) {
      info_.members[i] = shape.ranks[static_cast<std::size_t>(i)];
      info_.member_chunks[i] = shape.chunks[static_cast<std::size_t>(i)];
    }
  }

  // B of the epoch, as a checkpoint would have committed it.
  void commit() {
    std::byte* copy =
        checkpoint_.data() + store_.areas.copy_offset(store_.areas.copy_of_epoch(kEpoch));
    for (std::size_t i = 0; i < store_.layout.copy_bytes(); ++i)
      copy[i] = pattern(rank_, i);
  }
  bool holds_epoch() const {
    for (std::size_t i = 0; i < loaded_.size(); ++i)
      if (loaded_[i] != pattern(rank_, i)) return false;
    return true;
  }
  const CheckpointInfo& info() const { return info_; }

  bool joined() const override { return joined_; }
  int join_afresh(const RestorePlan& setup) override {
    joined_ = true;
    return setup.groups.group_of[static_cast<std::size_t>(rank_)];
  }
  const RankStore& store() const override { return store_; }
  void load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) override {
    ASSERT_LE(offset + n, loaded_.size());
    std::memcpy(loaded_.data() + offset, bytes, n);
  }

 private:
  int rank_;
  RankStore store_;
  std::vector<std::byte> checkpoint_;
  std::vector<std::byte> loaded_;
  CheckpointInfo info_;
  bool joined_ = false;
};

class StorageSim : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("skt-storage-sim-{}", getpid());
    std::filesystem::remove_all(dir_);
    config_.job = "storage-sim";
    config_.drain_dir = dir_.string();
    config_.drain_every_commits = 1;
    config_.log_level = LogLevel::off;
    config_.group_size = 2;
    for (int r = 0; r < kRanks; ++r)
      nodes_.push_back(fmt::format("n{}", r));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Config config_of(int rank) const {
    Config c = config_;
    c.node = nodes_[static_cast<std::size_t>(rank)];
    return c;
  }

  // Every rank's finding of a launch that found nothing in memory, and the fresh plan over them.
  std::pair<std::vector<Finding>, RestorePlan> plan(skt::Effects& fx, const Config& config) const {
    const StreamLayout layout =
        StreamLayout::plan({{"data", false, 0, kRegion}}, kStage, kRegion, config.chunk_bytes);
    Finding mine;
    mine.layout_hash = layout.hash;
    mine.stage_bytes = kStage;
    mine.regions_bytes = kRegion;
    std::vector<Finding> findings = fx.gather_values(mine);
    RestorePlan setup = plan_restore(findings, nodes_, config);
    return {std::move(findings), std::move(setup)};
  }

  void drain_epoch() {
    const auto outs = run_ranks(kRanks, [&](skt::Effects& fx, int rank) {
      const Config config = config_of(rank);
      skt::Job job(fx, config, rank, kRanks, nodes_);
      auto [findings, setup] = plan(fx, config);
      SimMemory memory(config, rank, setup);
      memory.commit();
      StorageLevel storage(job);
      ASSERT_TRUE(storage.due(kEpoch));
      storage.start(kEpoch, memory.info(), memory.store(), findings[0].layout_hash);
      storage.settle();
    });
    for (const auto& o : outs)
      ASSERT_TRUE(!o.crashed && !o.hung && o.error == SKT_OK) << o.message;
  }

  // A restore by every rank; `restored` counts the ranks that got the epoch back exactly.
  std::vector<Outcome> restore(const Launch& launch, const Schedule& schedule, int& restored) {
    std::mutex lock;
    restored = 0;
    return run_ranks(
        kRanks,
        [&](skt::Effects& fx, int rank) {
          const Config config = config_of(rank);
          skt::Job job(fx, config, rank, kRanks, nodes_);
          auto [findings, setup] = plan(fx, config);
          SimMemory memory(config, rank, setup);
          StorageLevel storage(job);
          const auto epoch =
              storage.restore(findings, MemoryShortfall{"memory was lost", 0}, memory);
          const std::lock_guard guard(lock);
          if (epoch == kEpoch && memory.holds_epoch()) ++restored;
        },
        launch, schedule);
  }

  std::filesystem::path dir_;
  Config config_;
  std::vector<std::string> nodes_;
};

TEST_F(StorageSim, EveryEffectOfARestoreFromDrainedFilesOnEveryRank) {
  drain_epoch();
  int restored = 0;
  restore({}, {}, restored);
  ASSERT_EQ(restored, kRanks) << "a restore without faults";
  int cases = 0, intact = 0;
  for (int victim = 0; victim < kRanks; ++victim) {
    Launch counting;
    counting.count_effects_of = {victim};
    counting.count_activity = 0;
    const int effects = restore(counting, {}, restored)[static_cast<std::size_t>(victim)].effects;
    ASSERT_GE(effects, 4);
    for (int at = 1; at <= effects; ++at) {
      for (const Schedule schedule : {Schedule{false, 0, false, 0}, Schedule{true, 1000, false, 0},
                                      Schedule{false, 6, true, static_cast<std::uint64_t>(at)}}) {
        ++cases;
        Launch faulty;
        faulty.fault = Fault{victim, 0, at, false};
        const auto outs = restore(faulty, schedule, restored);
        const std::string where =
            fmt::format("rank {} crashes at effect {} of {}", victim, at, effects);
        int returned = 0;
        for (const auto& o : outs) {
          EXPECT_FALSE(o.hung) << where;
          EXPECT_EQ(o.error, SKT_OK) << where << ": " << o.message;
          if (!o.crashed) ++returned;
        }
        EXPECT_TRUE(outs[static_cast<std::size_t>(victim)].crashed) << where;
        EXPECT_EQ(restored, returned) << where << ": a rank returned without the epoch";
        restore({}, {}, restored);
        EXPECT_EQ(restored, kRanks) << where << ": the next restore";
        if (restored == kRanks) ++intact;
      }
    }
  }
  fmt::print("storage sim: restore from drained files, {} cases, {} restored whole after\n", cases,
             intact);
  EXPECT_EQ(intact, cases);
}

}  // namespace
}  // namespace skt::sim
