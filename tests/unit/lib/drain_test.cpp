#include "libselfckpt/internal/drain.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "selfckpt/selfckpt.hpp"

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
    // Groups {0, 2} and {1}.
    h.groups = 2;
    h.group = rank % 2;
    h.member = rank / 2;
    h.members = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1};
    h.member_chunks.assign(h.members.size(), 5);
    h.layout_hash = 77;
    h.stage_bytes = 100;
    h.regions_offset = 128;
    h.regions_bytes = copy_.size() - 128;
    h.copy_bytes = copy_.size();
    h.block_bytes = 4096;
    h.entries = {{"step", true, 0, 8}, {"grid", false, 0, copy_.size() - 128}};
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
  h.groups = 2;
  h.group = 1;
  h.member = 1;
  h.members = {1, 3};
  h.member_chunks = {40, 41};
  h.scheme = 2;
  h.parity = 1;
  h.chunk_bytes = 1 << 20;
  h.copy_bytes = 10'000'001;
  h.checksum_bytes = 1'500'000;
  h.with_checksum = true;
  h.table_crc = 0xabcdef;
  h.command = 0x0123456789abcdefu;
  std::vector<std::byte> page(kDrainHeaderBytes);
  encode_drain_header(page.data(), h);
  ASSERT_EQ(decode_drain_header(page.data()), h);
  EXPECT_EQ(h.blocks(), 12u);  // 10 of B, 2 of C
  EXPECT_EQ(h.data_offset(), 2 * kDrainHeaderBytes);
  EXPECT_EQ(h.checksum_offset(), h.data_offset() + 10 * kDrainBlockBytes);
  page[20] ^= std::byte{1};
  EXPECT_FALSE(decode_drain_header(page.data()));
  // A header whose member list does not hold its own rank is not one.
  h.members = {1, 2};
  encode_drain_header(page.data(), h);
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
    DrainFileHeader expected = header(r);
    expected.table_crc = h.table_crc;
    expected.region_table_bytes = region_table_bytes(expected.entries);
    expected.region_table_crc = h.region_table_crc;
    EXPECT_EQ(h, expected);  // the region table too
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

TEST_F(DrainFiles, ReadsAnyPieceOfTheCopyBlockByBlock) {
  const DrainedEpoch epoch = drain_epoch(6);
  DrainedRankFile file(epoch, 2);
  EXPECT_EQ(file.header().entries, header(2).entries);
  // Within a block, across two, the last byte, and nothing.
  for (const auto& [offset, bytes] : std::vector<std::pair<std::size_t, std::size_t>>{
           {5, 100}, {4000, 5000}, {copy_.size() - 1, 1}, {0, copy_.size()}, {7, 0}}) {
    std::vector<std::byte> out(bytes);
    file.read_copy(offset, bytes, out.data());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), copy_.begin() + static_cast<long>(offset)))
        << offset << " " << bytes;
  }
  std::byte one{};
  EXPECT_THROW(file.read_copy(copy_.size(), 1, &one), std::runtime_error);
  // A flipped bit in block 2 is caught when that block is read, not before.
  const fs::path path = drain_rank_file(epoch.dir, 1);
  DrainedRankFile damaged(epoch, 1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(damaged.header().data_offset() + 2 * 4096 + 9));
    f.put('\x5a');
  }
  std::vector<std::byte> out(4096);
  damaged.read_copy(0, 4096, out.data());
  try {
    damaged.read_copy(2 * 4096 + 1, 10, out.data());
    ADD_FAILURE() << "a damaged block was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("block 2 (bytes 8192 to 12288 of the copy)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(DrainFiles, RefusesADamagedRegionTable) {
  const DrainedEpoch epoch = drain_epoch(6);
  const fs::path path = drain_rank_file(epoch.dir, 0);
  const auto h = read_drain_header(path);
  ASSERT_TRUE(h);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    // A byte of the first entry, just after the block CRCs and the table's count.
    f.seekp(static_cast<std::streamoff>(kDrainHeaderBytes + h->blocks() * 4 + 9));
    f.put('X');
  }
  try {
    DrainedRankFile file(epoch, 0);
    ADD_FAILURE() << "a damaged region table was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("region table does not match its CRC"), std::string::npos)
        << e.what();
  }
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

// A job's drains are its user's alone: made 0700 and 0600, and refused (SKT_ERR_CONFIG, naming
// what and why) where another user owns a part of them or may write it.
TEST_F(DrainFiles, AreMadePrivateAndRefusedWhereAnotherUserCouldHaveWritten) {
  const DrainedEpoch epoch = drain_epoch(3);
  const fs::path job_dir = drain_job_dir(root_, "job-1");
  struct stat st {};
  ASSERT_EQ(::stat(job_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(epoch.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(drain_rank_file(epoch.dir, 1).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const auto refusal = [&](const std::function<void()>& use) {
    try {
      use();
    } catch (const skt::Error& e) {
      EXPECT_EQ(e.code(), SKT_ERR_CONFIG);
      return std::string(e.what());
    }
    return std::string("not refused");
  };
  fs::permissions(job_dir, fs::perms::all);  // 0777: anyone could have put an epoch there
  EXPECT_NE(refusal([&] { complete_epochs(root_, "job-1"); }).find("may be written by other users"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              write_drain_file(drain_epoch_dir(root_, "job-1", 4), header(0, 4), copy_.data());
            }).find(job_dir.string()),
            std::string::npos)
      << "nothing is drained into it either";
  fs::permissions(job_dir, fs::perms::owner_all);
  fs::permissions(drain_rank_file(epoch.dir, 1), fs::perms::all);
  EXPECT_NE(refusal([&] { read_drain_file(epoch, 1, {}); }).find("rank-000001.skt"),
            std::string::npos);
  fs::permissions(drain_rank_file(epoch.dir, 1), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_NO_THROW(read_drain_file(epoch, 1, {}));
  if (::geteuid() == 0) {
    // Another user's epoch directory, however tidy its mode.
    ASSERT_EQ(::chown(epoch.dir.c_str(), 65534, 65534), 0);
    EXPECT_NE(refusal([&] { complete_epochs(root_, "job-1"); }).find("belongs to uid 65534"),
              std::string::npos);
  }
}

// A damaged manifest is no reason to act as if there were no drain: over whole files that agree
// it is rebuilt from them; over files that do not make the epoch, the epoch is refused
// (SKT_ERR_UNRECOVERABLE), never skipped.
TEST_F(DrainFiles, ADamagedManifestIsRebuiltFromWholeFilesOrRefused) {
  const DrainedEpoch good = drain_epoch(5);
  const fs::path manifest = good.dir / "MANIFEST";
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('#');
  }
  auto complete = complete_epochs(root_, "job-1");
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_TRUE(complete[0].rebuilt);
  EXPECT_EQ(complete[0].manifest, good.manifest);
  fs::remove(drain_rank_file(good.dir, 2));
  try {
    complete_epochs(root_, "job-1");
    ADD_FAILURE() << "a damaged manifest over a missing file must be refused";
  } catch (const skt::Error& e) {
    EXPECT_EQ(e.code(), SKT_ERR_UNRECOVERABLE);
    EXPECT_NE(std::string(e.what()).find("skt-drain remove"), std::string::npos) << e.what();
  }
}

TEST_F(DrainFiles, WritersCompleteTheEpochOnceEveryFileIsThere) {
  drain_epoch(1);  // an older complete epoch, removed once epoch 2 is complete
  const fs::path dir = drain_epoch_dir(root_, "job-1", 2);
  DrainWriter writers[3];
  for (int r = 2; r >= 0; --r)
    writers[r].start(dir, header(r, 2), copy_.data(), nullptr, {}, r == 0);
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
  waiting.start(drain_epoch_dir(root_, "job-1", 3), header(0, 3), copy_.data(), nullptr, {}, true);
  write_drain_file(drain_epoch_dir(root_, "job-1", 3), header(1, 3), copy_.data());
  ASSERT_TRUE(waiting.wait_file().digest);
  EXPECT_FALSE(waiting.wait_at_most(0.05).completed);
  EXPECT_EQ(complete_epochs(root_, "job-1").front().manifest.epoch, 2u);
  // Cancelled before its first block: no file under the final name, no partial file left.
  std::atomic<bool> cancelled{true};
  EXPECT_THROW(write_drain_file(drain_epoch_dir(root_, "job-1", 4), header(0, 4), copy_.data(),
                                nullptr, &cancelled),
               std::runtime_error);
  EXPECT_TRUE(fs::is_empty(drain_epoch_dir(root_, "job-1", 4)));
}

TEST_F(DrainFiles, ReportsAnUnwritableDirectory) {
  const fs::path blocker = root_ / "file";
  std::ofstream(blocker) << "x";
  DrainWriter writer;
  writer.start(blocker / "sub", header(0), copy_.data(), nullptr, {}, true);
  const auto done = writer.wait_file();
  EXPECT_FALSE(done.digest);
  EXPECT_NE(done.error.find("cannot create directory"), std::string::npos) << done.error;
}

TEST_F(DrainFiles, CarriesTheChecksumAfterTheCopy) {
  const auto checksum = random_bytes(2 * 4096 + 3, 9);
  DrainFileHeader h = header(1, 5);
  h.checksum_bytes = checksum.size();
  const fs::path dir = drain_epoch_dir(root_, "job-1", 5);
  write_drain_file(dir, h, copy_.data(), checksum.data());
  EXPECT_EQ(fs::file_size(drain_rank_file(dir, 1)), h.file_bytes());
  const DrainFileExpected expected{"job-1", h.run, 5, 1, 3, std::nullopt};
  std::vector<std::byte> copy_back(copy_.size());
  std::vector<std::byte> checksum_back(checksum.size());
  read_rank_file(drain_rank_file(dir, 1), expected,
                 [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
                   if (offset < copy_.size()) {
                     ASSERT_LE(offset + n, copy_.size());  // no block spans both
                     std::copy(bytes, bytes + n, copy_back.begin() + static_cast<long>(offset));
                   } else {
                     std::copy(bytes, bytes + n,
                               checksum_back.begin() + static_cast<long>(offset - copy_.size()));
                   }
                 });
  EXPECT_EQ(copy_back, copy_);
  EXPECT_EQ(checksum_back, checksum);
  // A flipped bit in C's last block is named as such; without a manifest the file checks itself.
  {
    std::fstream f(drain_rank_file(dir, 1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(h.file_bytes() - 1));
    f.put('\x01');
  }
  try {
    read_rank_file(drain_rank_file(dir, 1), expected, {});
    ADD_FAILURE() << "a damaged checksum block was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes 8192 to 8195 of the checksum"), std::string::npos)
        << e.what();
  }
  // Another epoch's expectations refuse the file.
  DrainFileExpected later = expected;
  later.epoch = 7;
  EXPECT_THROW(read_rank_file(drain_rank_file(dir, 1), later, {}), std::runtime_error);
  // A file of another drain format (a relaunch after an upgrade) is named as such, not as damage.
  {
    std::fstream f(drain_rank_file(dir, 1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('\x02');
  }
  try {
    read_rank_file(drain_rank_file(dir, 1), expected, {});
    ADD_FAILURE() << "a file of drain format 2 was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another version of selfckpt (drain format 2"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(DrainFiles, EachRankRemovesOnlyItsOwnFiles) {
  for (const std::uint64_t epoch : {2, 4}) {
    for (int r = 0; r < 3; ++r)
      write_drain_file(drain_epoch_dir(root_, "job-1", epoch), header(r, epoch), copy_.data());
  }
  ASSERT_EQ(rank_files(root_, "job-1", 1).size(), 2u);
  EXPECT_EQ(rank_files(root_, "job-1", 1).front().epoch, 4u);  // newest first
  remove_rank_files(root_, "job-1", 1, 4);
  EXPECT_EQ(rank_files(root_, "job-1", 1).size(), 1u);
  EXPECT_EQ(rank_files(root_, "job-1", 0).size(), 2u);
  for (int r = 0; r < 3; ++r)
    remove_rank_files(root_, "job-1", r, std::nullopt);
  EXPECT_FALSE(fs::exists(drain_job_dir(root_, "job-1")));  // the last one leaves nothing
}

// Four ranks in groups {0, 2} and {1, 3} of a code that tolerates one loss per group.
DrainFileHeader group_file(int rank, std::uint64_t epoch, std::uint64_t run = 7) {
  DrainFileHeader h;
  h.job = "j";
  h.run = run;
  h.epoch = epoch;
  h.rank = rank;
  h.nranks = 4;
  h.groups = 2;
  h.group = rank % 2;
  h.member = rank / 2;
  h.members = {rank % 2, rank % 2 + 2};
  h.member_chunks = {3, 4};
  h.parity = 1;
  return h;
}

int one_loss(std::uint32_t, int) {
  return 1;
}

TEST(DrainedCandidates, TakeTheNewestEpochEveryGroupCanRebuild) {
  std::vector<std::vector<DrainFileHeader>> files(4);
  for (int r = 0; r < 4; ++r)
    files[static_cast<std::size_t>(r)].push_back(group_file(r, 4));
  // Epoch 6 lacks rank 3's file (its node and disk are gone): group 1 rebuilds it.
  for (int r = 0; r < 3; ++r)
    files[static_cast<std::size_t>(r)].insert(files[static_cast<std::size_t>(r)].begin(),
                                              group_file(r, 6));
  // Epoch 8 lacks both files of group 1; a file of another run under epoch 6 is another epoch.
  files[0].insert(files[0].begin(), group_file(0, 8));
  files[2].insert(files[2].begin(), group_file(2, 8));
  files[3].push_back(group_file(3, 6, 99));
  std::string why;
  const auto candidates = drained_candidates(files, one_loss, &why);
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].epoch, 6u);
  EXPECT_EQ(candidates[0].run, 7u);
  EXPECT_EQ(candidates[0].lost, (std::vector<std::vector<int>>{{}, {1}}));
  EXPECT_EQ(candidates[0].group_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(candidates[0].chunks_of, (std::vector<std::uint64_t>{3, 3, 4, 4}));
  EXPECT_EQ(candidates[1].epoch, 4u);
  EXPECT_TRUE(candidates[1].lost[1].empty());
  EXPECT_NE(why.find("epoch 8 of run 0000000000000007: no rank of group 1 holds a file"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("epoch 4"), std::string::npos) << why;

  // A code that tolerates no loss cannot rebuild epoch 6.
  why.clear();
  const auto exact = drained_candidates(
      files, [](std::uint32_t, int) { return 0; }, &why);
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].epoch, 4u);
  EXPECT_NE(why.find("epoch 6 of run 0000000000000007: group 1 lacks the files of ranks 3 and "
                     "tolerates 0"),
            std::string::npos)
      << why;

  // Without any file of group 1, nothing names its members.
  files[1].clear();
  files[3].clear();
  why.clear();
  EXPECT_TRUE(drained_candidates(files, one_loss, &why).empty());
  EXPECT_NE(why.find("no rank of group 1 holds a file"), std::string::npos) << why;
}

TEST(DrainedCandidates, RefuseFilesThatDisagreeOrCountOtherRanks) {
  std::vector<std::vector<DrainFileHeader>> files(4);
  for (int r = 0; r < 4; ++r)
    files[static_cast<std::size_t>(r)].push_back(group_file(r, 4));
  files[2][0].members = {2, 0};
  files[2][0].member = 0;
  std::string why;
  EXPECT_TRUE(drained_candidates(files, one_loss, &why).empty());
  EXPECT_NE(why.find("disagree about the groups"), std::string::npos) << why;
  files[2][0] = group_file(2, 4);
  files[1][0].nranks = 8;
  why.clear();
  EXPECT_TRUE(drained_candidates(files, one_loss, &why).empty());
  EXPECT_NE(why.find("drained by 8 ranks"), std::string::npos) << why;
}

TEST(DrainedCandidates, TakeEachGroupsOwnParity) {
  // Three ranks: {0, 2} with one parity chunk per row, and {1} alone, which has none.
  const auto file = [](int rank) {
    DrainFileHeader h = group_file(rank, 5);
    h.nranks = 3;
    h.group = rank == 1 ? 1 : 0;
    h.member = rank == 2 ? 1 : 0;
    h.members = rank == 1 ? std::vector<int>{1} : std::vector<int>{0, 2};
    h.member_chunks.assign(h.members.size(), 3);
    h.parity = rank == 1 ? 0 : 1;
    return h;
  };
  const auto tolerance = [](std::uint32_t, int parity) { return parity; };
  std::vector<std::vector<DrainFileHeader>> files{{file(0)}, {file(1)}, {}};
  const auto candidates = drained_candidates(files, tolerance, nullptr);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].parity_of, (std::vector<int>{1, 0}));
  EXPECT_EQ(candidates[0].lost, (std::vector<std::vector<int>>{{1}, {}}));
  files = {{file(0)}, {}, {file(2)}};
  std::string why;
  EXPECT_TRUE(drained_candidates(files, tolerance, &why).empty());
  EXPECT_NE(why.find("no rank of group 1 holds a file"), std::string::npos) << why;
}

}  // namespace
}  // namespace skt
