#include "libselfckpt/internal/format.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace skt {
namespace {

SegmentHeader sample() {
  SegmentHeader h;
  h.identity = SegmentIdentity{1000, "job-7", "n3", 5, SegmentKind::workspace, "workspace"};
  h.nranks = 8;
  h.data_bytes = 123456;
  h.segment_bytes = 131072;
  return h;
}

TEST(Header, RoundTrips) {
  std::vector<std::byte> page(kHeaderBytes);
  encode_header(page.data(), sample());
  SegmentHeader back;
  ASSERT_EQ(decode_header(page.data(), page.size(), &back), HeaderStatus::ok);
  EXPECT_TRUE(same_identity(back.identity, sample().identity));
  EXPECT_EQ(back.nranks, 8);
  EXPECT_EQ(back.data_bytes, 123456u);
  EXPECT_EQ(back.segment_bytes, 131072u);
}

TEST(Header, RejectsCorruption) {
  std::vector<std::byte> page(kHeaderBytes);
  encode_header(page.data(), sample());
  auto flipped = page;
  flipped[60] ^= std::byte{0x01};
  EXPECT_EQ(decode_header(flipped.data(), flipped.size(), nullptr), HeaderStatus::bad_crc);
  auto magic = page;
  magic[0] = std::byte{'X'};
  EXPECT_EQ(decode_header(magic.data(), magic.size(), nullptr), HeaderStatus::bad_magic);
  auto version = page;
  version[8] = std::byte{99};
  EXPECT_EQ(decode_header(version.data(), version.size(), nullptr), HeaderStatus::bad_version);
  EXPECT_EQ(decode_header(page.data(), kHeaderBytes - 1, nullptr), HeaderStatus::truncated);
  // Intact headers of other versions: from kStableHeaderSince on, read for whose segment it is.
  for (const std::uint32_t v : {kStableHeaderSince, kStableHeaderSince - 1}) {
    SegmentHeader other = sample();
    other.version = v;
    std::vector<std::byte> old(kHeaderBytes);
    encode_header(old.data(), other);
    SegmentHeader back;
    EXPECT_EQ(decode_header(old.data(), old.size(), &back),
              v == kStableHeaderSince ? HeaderStatus::other_version : HeaderStatus::bad_version);
    if (v == kStableHeaderSince) {
      EXPECT_EQ(back.version, kStableHeaderSince);
      EXPECT_TRUE(same_identity(back.identity, other.identity));
    }
  }
  const std::vector<std::byte> zeros(kHeaderBytes);
  EXPECT_EQ(decode_header(zeros.data(), zeros.size(), nullptr), HeaderStatus::bad_magic);
}

TEST(Header, IdentityComparesEveryField) {
  const SegmentIdentity base = sample().identity;
  auto other = base;
  other.job = "job-8";
  EXPECT_FALSE(same_identity(base, other));
  other = base;
  other.uid = 1001;
  EXPECT_FALSE(same_identity(base, other));
  other = base;
  other.rank = 4;
  EXPECT_FALSE(same_identity(base, other));
  other = base;
  other.domain = "n4";
  EXPECT_FALSE(same_identity(base, other));
  other = base;
  other.kind = SegmentKind::checkpoint;
  EXPECT_FALSE(same_identity(base, other));
  other = base;
  other.name = "grid2";
  EXPECT_FALSE(same_identity(base, other));
}

TEST(CheckpointInfo, RoundTripsAndDetectsCorruption) {
  std::vector<std::byte> page(kHeaderBytes);
  CheckpointInfo info;
  info.scheme = 0;
  info.parity = 1;
  info.requested_group_size = 4;
  info.groups = 2;
  info.group = 1;
  info.member = 3;
  info.group_size = 4;
  info.chunk_bytes = 262144;
  info.rows = 12;
  info.stage_bytes = 128;
  info.stage_chunks = 3;
  info.regions_bytes = 999;
  info.layout_hash = 0xabcdef;
  info.lineage = 0x1234567890abcdefu;
  info.command = 0xfedcba0987654321u;
  for (int i = 0; i < 4; ++i) {
    info.members[i] = 2 * i + 1;
    info.member_chunks[i] = 9 + static_cast<std::uint64_t>(i);
  }
  encode_checkpoint_info(page.data(), info);
  CheckpointInfo back;
  ASSERT_TRUE(decode_checkpoint_info(page.data(), &back));
  EXPECT_EQ(back.members[3], 7);
  EXPECT_EQ(back.member_chunks[2], 11u);
  EXPECT_EQ(back.layout_hash, 0xabcdefu);
  EXPECT_EQ(back.stage_chunks, 3u);
  EXPECT_EQ(back.regions_bytes, 999u);
  EXPECT_EQ(back.lineage, 0x1234567890abcdefu);
  EXPECT_EQ(back.command, 0xfedcba0987654321u);
  page[1030] ^= std::byte{0x40};
  EXPECT_FALSE(decode_checkpoint_info(page.data(), &back));
}

TEST(ArenaRecord, RoundTripsAndDetectsCorruption) {
  std::vector<std::byte> page(kHeaderBytes);
  const ArenaRecord record{81920, 81920, 200, 86016, 77};
  encode_arena_record(page.data(), record);
  ArenaRecord back;
  ASSERT_TRUE(decode_arena_record(page.data(), &back));
  EXPECT_EQ(back, record);
  page[1025] ^= std::byte{0x02};
  EXPECT_FALSE(decode_arena_record(page.data(), &back));
}

TEST(DigestState, RoundTripsAndIsNothingWhenEmptyOrDamaged) {
  std::vector<std::byte> slot(kDigestHeaderBytes);
  EXPECT_FALSE(read_digest_state(slot.data()).has_value());
  write_digest_state(slot.data(), {12, true, false});
  EXPECT_EQ(read_digest_state(slot.data()), (DigestState{12, true, false}));
  write_digest_state(slot.data(), {13, true, true});
  EXPECT_EQ(read_digest_state(slot.data()), (DigestState{13, true, true}));
  for (std::size_t i = 0; i < 20; ++i) {
    auto damaged = slot;
    damaged[i] ^= std::byte{0x08};
    EXPECT_FALSE(read_digest_state(damaged.data()).has_value()) << i;
  }
}

TEST(Control, NewestValidSlotWins) {
  std::vector<std::byte> page(kHeaderBytes);
  EXPECT_FALSE(read_control(page.data()).has_value());
  write_control(page.data(), ControlState{1, 1, 1, 1});
  write_control(page.data(), ControlState{1, 2, 2, 1});
  write_control(page.data(), ControlState{2, 2, 2, 1});
  EXPECT_EQ(read_control(page.data()), (ControlState{2, 2, 2, 1}));
  write_control(page.data(), ControlState{2, 2, 2, 2, 2});
  EXPECT_EQ(read_control(page.data()), (ControlState{2, 2, 2, 2, 2}));
  write_control(page.data(), ControlState{3, 3, 3, 3, -1, 41'000'000});
  EXPECT_EQ(read_control(page.data())->checkpoint_nanoseconds, 41'000'000);
  clear_control(page.data());
  EXPECT_FALSE(read_control(page.data()).has_value());
}

TEST(Control, TornWriteLeavesThePreviousState) {
  std::vector<std::byte> page(kHeaderBytes);
  write_control(page.data(), ControlState{4, 4, 4, 4});
  const auto before = page;
  write_control(page.data(), ControlState{4, 5, 5, 4});
  // Find the slot the last write changed and damage it, as a kill in the middle of it would.
  std::size_t changed = 0;
  for (std::size_t i = 0; i < page.size(); ++i) {
    if (page[i] != before[i]) changed = i;
  }
  page[changed] ^= std::byte{0xff};
  EXPECT_EQ(read_control(page.data()), (ControlState{4, 4, 4, 4}));
}

TEST(Crc, MatchesKnownValue) {
  // CRC-32C (iSCSI) of "123456789" is 0xE3069283; ISA-L's variant starts from 0 without the
  // final inversion, so compare against a self-consistent value and a changed input instead.
  const char text[] = "123456789";
  EXPECT_EQ(crc32(text, 9), crc32(text, 9));
  EXPECT_NE(crc32(text, 9), crc32(text, 8));
  EXPECT_NE(crc64(text, 9), crc64(text, 9, 1));
}

}  // namespace
}  // namespace skt
