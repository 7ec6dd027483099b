#include "libselfckpt/src/drain.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace skt {
namespace {

namespace fs = std::filesystem;

class DrainFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/skt-drain-test-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    root_ = name;
  }
  void TearDown() override { fs::remove_all(root_); }

  // A rank's copy of an odd size, in blocks of 4 KiB so that it spans several and ends in part
  // of one.
  DrainFileHeader header(int rank, std::uint64_t epoch = 6) const {
    DrainFileHeader h;
    h.job = "job-1";
    h.run = 0x1234abcd5678ef90ULL;
    h.epoch = epoch;
    h.rank = rank;
    h.nranks = 3;
    h.group = rank % 2;
    h.member = rank / 2;
    h.group_size = 2;
    h.layout_hash = 77;
    h.stage_bytes = 100;
    h.regions_offset = 128;
    h.regions_bytes = copy_.size() - 128;
    h.copy_bytes = copy_.size();
    h.block_bytes = 4096;
    return h;
  }

  // Drains every rank of an epoch and writes its manifest; returns the epoch as restart sees it.
  DrainedEpoch drain_epoch(std::uint64_t epoch) {
    const fs::path dir = drain_epoch_dir(root_, "job-1", epoch);
    DrainManifest m{"job-1", header(0).run, epoch, {}};
    for (int r = 0; r < 3; ++r)
      m.digests.push_back(write_drain_file(dir, header(r, epoch), copy_.data()));
    write_manifest(dir, m);
    const auto complete = complete_epochs(root_, "job-1");
    EXPECT_FALSE(complete.empty());
    return complete.front();
  }

  static std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::vector<std::byte> out(n);
    for (auto& b : out)
      b = static_cast<std::byte>(gen());
    return out;
  }

  fs::path root_;
  std::vector<std::byte> copy_ = random_bytes(3 * 4096 + 777, 5);
};

TEST(DrainHeader, RoundTripsAndRejectsDamage) {
  DrainFileHeader h;
  h.job = "hpl+x";
  h.run = 42;
  h.epoch = 9;
  h.rank = 3;
  h.nranks = 4;
  h.copy_bytes = 10'000'001;
  std::vector<std::byte> page(kDrainHeaderBytes);
  encode_drain_header(page.data(), h);
  ASSERT_EQ(decode_drain_header(page.data()), h);
  EXPECT_EQ(h.blocks(), 10u);
  EXPECT_EQ(h.data_offset(), 2 * kDrainHeaderBytes);
  page[20] ^= std::byte{1};
  EXPECT_FALSE(decode_drain_header(page.data()));
}

TEST(DrainManifestText, RoundTripsAndRejectsEdits) {
  const DrainManifest m{"job-1", 0xfeedULL, 12, {1, 2, 0xffffffffffffffffULL}};
  const std::string text = format_manifest(m);
  ASSERT_EQ(parse_manifest(text), m);
  std::string edited = text;
  edited[edited.find("epoch 12") + 7] = '3';  // epoch 13: the CRC line no longer matches
  EXPECT_FALSE(parse_manifest(edited));
  EXPECT_FALSE(parse_manifest(text.substr(0, text.size() - 3)));  // cut short
  EXPECT_FALSE(parse_manifest(""));
}

TEST_F(DrainFiles, ReadsBackEveryByteThroughTheSink) {
  const DrainedEpoch epoch = drain_epoch(6);
  EXPECT_EQ(epoch.manifest.epoch, 6u);
  for (int r = 0; r < 3; ++r) {
    std::vector<std::byte> back(copy_.size());
    std::uint64_t delivered = 0;
    const auto h =
        read_drain_file(epoch, r, [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
          std::copy(bytes, bytes + n, back.begin() + static_cast<std::ptrdiff_t>(offset));
          delivered += n;
        });
    EXPECT_EQ(h, header(r));
    EXPECT_EQ(delivered, copy_.size());
    EXPECT_EQ(back, copy_);
  }
}

TEST_F(DrainFiles, DetectsAFlippedBitATruncationAndAMissingFile) {
  const DrainedEpoch epoch = drain_epoch(6);
  const fs::path file = drain_rank_file(epoch.dir, 1);
  const auto size = fs::file_size(file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.put('\x5a');
  }
  EXPECT_THROW(read_drain_file(epoch, 1, {}), std::runtime_error);
  try {
    read_drain_file(epoch, 1, {});
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("block 3"), std::string::npos) << e.what();
  }
  fs::resize_file(drain_rank_file(epoch.dir, 2), size - 100);
  EXPECT_THROW(read_drain_file(epoch, 2, {}), std::runtime_error);
  fs::remove(drain_rank_file(epoch.dir, 0));
  EXPECT_THROW(read_drain_file(epoch, 0, {}), std::runtime_error);
}

TEST_F(DrainFiles, RefusesAnotherRunsFileUnderTheSameEpoch) {
  const DrainedEpoch epoch = drain_epoch(6);
  DrainFileHeader other = header(1);
  other.run ^= 1;
  write_drain_file(epoch.dir, other, copy_.data());
  EXPECT_THROW(read_drain_file(epoch, 1, {}), std::runtime_error);
  // The same run, but the bytes changed after the manifest: the digest differs.
  auto changed = copy_;
  changed[10] ^= std::byte{1};
  write_drain_file(epoch.dir, header(1), changed.data());
  EXPECT_THROW(read_drain_file(epoch, 1, {}), std::runtime_error);
}

TEST_F(DrainFiles, OnlyEpochsWithAManifestAreComplete) {
  drain_epoch(4);
  drain_epoch(8);
  // Epoch 10 drained but never completed; epoch 12's manifest names another epoch.
  for (int r = 0; r < 3; ++r)
    write_drain_file(drain_epoch_dir(root_, "job-1", 10), header(r, 10), copy_.data());
  fs::create_directories(drain_epoch_dir(root_, "job-1", 12));
  write_manifest(drain_epoch_dir(root_, "job-1", 12), DrainManifest{"job-1", 1, 4, {1, 2, 3}});
  const auto complete = complete_epochs(root_, "job-1");
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].manifest.epoch, 8u);
  EXPECT_EQ(complete[1].manifest.epoch, 4u);
  EXPECT_EQ(epoch_dirs(root_, "job-1").size(), 4u);
  EXPECT_TRUE(complete_epochs(root_, "another-job").empty());
}

TEST_F(DrainFiles, WritersCompleteTheEpochOnceEveryFileIsThere) {
  drain_epoch(1);  // an older complete epoch, removed once epoch 2 is complete
  const fs::path dir = drain_epoch_dir(root_, "job-1", 2);
  DrainWriter writers[3];
  for (int r = 2; r >= 0; --r)
    writers[r].start(dir, header(r, 2), copy_.data(), {}, r == 0);
  std::vector<std::uint64_t> digests;
  for (auto& w : writers) {
    const auto written = w.wait_file();
    ASSERT_TRUE(written.digest) << written.error;
    digests.push_back(*written.digest);
  }
  const auto done = writers[0].wait();
  EXPECT_TRUE(done.completed) << done.manifest_error;
  const auto complete = complete_epochs(root_, "job-1");
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_EQ(complete[0].manifest, (DrainManifest{"job-1", header(0).run, 2, digests}));
  EXPECT_EQ(epoch_dirs(root_, "job-1"), std::vector<fs::path>{dir});

  // Rank 2 never writes its file of epoch 3: rank 0's writer waits for it until it gives up.
  DrainWriter waiting;
  waiting.start(drain_epoch_dir(root_, "job-1", 3), header(0, 3), copy_.data(), {}, true);
  write_drain_file(drain_epoch_dir(root_, "job-1", 3), header(1, 3), copy_.data());
  ASSERT_TRUE(waiting.wait_file().digest);
  EXPECT_FALSE(waiting.wait_at_most(0.05).completed);
  EXPECT_EQ(complete_epochs(root_, "job-1").front().manifest.epoch, 2u);
  // Cancelled before its first block: no file under the final name, no partial file left.
  std::atomic<bool> cancelled{true};
  EXPECT_THROW(
      write_drain_file(drain_epoch_dir(root_, "job-1", 4), header(0, 4), copy_.data(), &cancelled),
      std::runtime_error);
  EXPECT_TRUE(fs::is_empty(drain_epoch_dir(root_, "job-1", 4)));
}

TEST_F(DrainFiles, ReportsAnUnwritableDirectory) {
  const fs::path blocker = root_ / "file";
  std::ofstream(blocker) << "x";
  DrainWriter writer;
  writer.start(blocker / "sub", header(0), copy_.data(), {}, true);
  const auto done = writer.wait_file();
  EXPECT_FALSE(done.digest);
  EXPECT_NE(done.error.find("cannot create directory"), std::string::npos) << done.error;
}

}  // namespace
}  // namespace skt
