// The storage level under the simulator: an epoch committed by the protocol and drained by four
// ranks (whole files, or with the checksums and one rank's file then lost), restored from its files
// with each rank crashed at each effect of the restore. The ranks that return hold the epoch's
// bytes exactly; a restore cut short leaves the files as they were, and the next one restores
// them whole.
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

// A rank's memory level as a session sets it up: W (a staged object and one region), its
// checkpoint segment and control block as heap buffers, in the group the plan gives it.
class SimMemory final : public MemoryLevel {
 public:
  SimMemory(skt::Effects& fx, const Config& config, int rank, const RestorePlan& setup)
      : fx_(fx), rank_(rank) {
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
    if (shape.geometry.parity > 0) {
      codec_ = enc::make_codec(config.scheme, size, shape.geometry.parity);
      reference_ = enc::make_reference_codec(config.scheme, size, shape.geometry.parity);
    }
    store_.codec = codec_.get();
    stage_.assign(kStage, std::byte{0});
    regions_.assign(kRegion, std::byte{0});
    checkpoint_.assign(store_.areas.data_bytes(0), std::byte{0});
    control_.assign(kHeaderBytes, std::byte{0});
    store_.stage = stage_.data();
    store_.workspace = store_.layout.chunks_at(stage_.data(), regions_.data());
    store_.checkpoint = checkpoint_.data();
    store_.copies.push_back(
        store_.layout.copy_chunks(checkpoint_.data() + store_.areas.copy_offset(0)));
    membership_ =
        GroupMembership{group, store_.member, shape.geometry, reference_.get(), shape.chunks};
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

  // The program's data of the epoch in W, committed by the protocol (B and the checksums).
  void commit(const RestorePlan& setup, const std::vector<std::string>& nodes,
              const std::string& job) {
    for (std::size_t i = 0; i < kStage; ++i)
      stage_[i] = pattern(rank_, i);
    for (std::size_t i = 0; i < kRegion; ++i)
      regions_[i] = pattern(rank_, kStage + i);
    const PrivateObjects staged{[](std::byte*, const Progress& p) {
                                  if (p) p(1, 1);
                                },
                                [](const std::byte*) {}};
    const int group = join_afresh(setup);
    Protocol protocol(Mode::self, fx_, store_, staged, ControlState{});
    protocol.restore(RestoreInputs{setup.candidates, false, setup.shapes, group, nodes, job, {}});
    protocol.checkpoint(kEpoch, nullptr);
  }
  // W holds the epoch's data (a restore puts B back into it).
  bool holds_epoch() const {
    for (std::size_t i = 0; i < kStage; ++i)
      if (stage_[i] != pattern(rank_, i)) return false;
    for (std::size_t i = 0; i < kRegion; ++i)
      if (regions_[i] != pattern(rank_, kStage + i)) return false;
    return true;
  }
  const CheckpointInfo& info() const { return info_; }

  bool joined() const override { return joined_; }
  int join_afresh(const RestorePlan& setup) override {
    fx_.join(membership_);
    fx_.set_control_page(control_.data());
    joined_ = true;
    return setup.groups.group_of[static_cast<std::size_t>(rank_)];
  }
  const RankStore& store() const override { return store_; }
  void load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) override {
    // B is the stage, a gap to the next 64 bytes, then the region.
    const std::uint64_t regions_at = store_.layout.copy_regions_offset();
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t at = offset + i;
      if (at < kStage) stage_[at] = bytes[i];
      if (at >= regions_at && at - regions_at < kRegion) regions_[at - regions_at] = bytes[i];
    }
  }

 private:
  skt::Effects& fx_;
  int rank_;
  RankStore store_;
  std::unique_ptr<enc::Codec> codec_, reference_;
  GroupMembership membership_;
  std::vector<std::byte> stage_, regions_, checkpoint_, control_;
  CheckpointInfo info_;
  bool joined_ = false;
};

// Drained without checksums (every rank's file read back), or with them and rank 1's file gone
// (its group rebuilds it).
class StorageSim : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("skt-storage-sim-{}", getpid());
    std::filesystem::remove_all(dir_);
    config_.job = "storage-sim";
    config_.drain_dir = dir_.string();
    config_.drain_every_commits = 1;
    config_.log_level = LogLevel::off;
    config_.group_size = 2;
    config_.drain_checksum = GetParam();
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
      SimMemory memory(fx, config, rank, setup);
      memory.commit(setup, nodes_, config.job);
      StorageLevel storage(job);
      ASSERT_TRUE(storage.due(kEpoch));
      storage.start(kEpoch, memory.info(), memory.store(), findings[0].layout_hash);
      storage.settle();
    });
    for (const auto& o : outs)
      ASSERT_TRUE(!o.crashed && !o.hung && o.error == SKT_OK) << o.message;
    if (config_.drain_checksum) {
      ASSERT_TRUE(std::filesystem::remove(
          drain_rank_file(drain_epoch_dir(config_.drain_dir, config_.job, kEpoch), 1)));
    }
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
          SimMemory memory(fx, config, rank, setup);
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

TEST_P(StorageSim, EveryEffectOfARestoreFromDrainedFilesOnEveryRank) {
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
  fmt::print("storage sim: restore from drained files{}: {} cases, {} restored whole after\n",
             GetParam() ? " with checksums, rank 1's lost" : "", cases, intact);
  EXPECT_EQ(intact, cases);
}

INSTANTIATE_TEST_SUITE_P(Drains, StorageSim, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "group_files_one_lost" : "whole_files";
                         });

}  // namespace
}  // namespace skt::sim
