// On-segment formats: the header at the start of every segment, the checkpoint segment's static
// description, and its double-buffered control block. Pure functions over bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace skt {

inline constexpr std::size_t kHeaderBytes = 4096;  // data starts one page into a segment
inline constexpr int kMaxGroupSize = 64;
// In a reserve's header page, past everything a header page holds: the word that the rank taking
// the reserve over swaps from zero, so that two never take the same.
inline constexpr std::size_t kClaimOffset = kHeaderBytes - 8;
// 2: checkpoint segments carry their region table (what `skt-shm verify` reads B with).
// 3: in the self mode the two checksum areas alternate between epochs (CheckpointAreas).
// 4: one workspace segment per rank (the arena of all its regions and staged private objects);
//    checkpoint segments keep a CRC of every block of each epoch's data and checksum (digests).
// 5: the control block records a job completed at skt_finalize (ControlState::finished).
// 6: checkpoint segments record the job's lineage and the rank's command (CheckpointInfo).
// From 5 on, the header itself (up to the identity and its CRC) keeps its layout, so that a segment
// of another version is still seen for whose it is: a job's checkpoint is not silently left behind
// by a version that cannot read it.
inline constexpr std::uint32_t kFormatVersion = 7;
inline constexpr std::uint32_t kStableHeaderSince = 5;

// A rank keeps two segments per job: its workspace W (every region and the staged private
// objects) and its checkpoint (B, C and D, their digests, and the protocol's control block).
// A reserve is memory set aside on a spare node for the segments of a rank that may be relaunched
// there (a warm spare): made and written ahead of a failure, taken over by the first rank that
// needs a segment it can hold.
enum class SegmentKind : std::uint32_t { workspace = 1, checkpoint = 3, reserve = 5 };
const char* kind_name(SegmentKind kind) noexcept;

// Who a segment belongs to. Keys are derived from it, and a segment is only ever attached when its
// header says exactly this.
struct SegmentIdentity {
  std::uint32_t uid = 0;
  std::string job;
  std::string domain;
  int rank = 0;
  SegmentKind kind = SegmentKind::workspace;
  std::string name;  // "workspace" or "checkpoint"
};

struct SegmentHeader {
  std::uint32_t version = kFormatVersion;  // the format of the segment's contents
  SegmentIdentity identity;
  int nranks = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t segment_bytes = 0;
};

// other_version: an intact header of another format version, decoded; bad_version: a header of
// another version that cannot be read (its layout differs, or it is damaged).
enum class HeaderStatus { ok, truncated, bad_magic, other_version, bad_version, bad_crc };
const char* header_status_text(HeaderStatus status) noexcept;

void encode_header(std::byte* page, const SegmentHeader& header);
// Decodes and checks magic, version and CRC; `available` is how many bytes `page` has. `out` is
// set when the status is ok or other_version.
HeaderStatus decode_header(const std::byte* page, std::size_t available, SegmentHeader* out);
bool same_identity(const SegmentIdentity& a, const SegmentIdentity& b) noexcept;

// Where a workspace segment keeps what is in it, after its header in the first page: written when
// the segment is created, protected by its own CRC.
struct ArenaRecord {
  std::uint64_t regions_bytes = 0;  // the regions' area, at the start of the data
  std::uint64_t stage_offset = 0;   // the staged private objects
  std::uint64_t stage_bytes = 0;
  std::uint64_t table_offset = 0;  // the region table
  std::uint64_t table_bytes = 0;

  bool operator==(const ArenaRecord&) const = default;
};

void encode_arena_record(std::byte* page, const ArenaRecord& record);
bool decode_arena_record(const std::byte* page, ArenaRecord* out);

// What a checkpoint segment records about its rank's place in the job: written once when the
// segment is created, protected by its own CRC.
struct CheckpointInfo {
  std::uint32_t scheme = 0;
  std::uint32_t parity = 0;
  std::uint32_t requested_group_size = 0;
  std::uint32_t groups = 0;
  std::uint32_t group = 0;
  std::uint32_t member = 0;
  std::uint32_t group_size = 0;
  std::uint32_t mode = 0;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t rows = 0;
  std::uint64_t stage_bytes = 0;    // the staged private objects, first in the stream
  std::uint64_t stage_chunks = 0;   // the stream's chunks before the regions (the stage, padded)
  std::uint64_t regions_bytes = 0;  // the regions' area, alignment gaps included
  std::uint64_t layout_hash = 0;
  std::uint64_t table_offset = 0;  // where the region table sits in the data, and its size
  std::uint64_t table_bytes = 0;
  // Which start of the job this checkpoint descends from: the id of the run that set the job's
  // segments up afresh, kept by every rank, and by each rank rebuilt from its group. Another start
  // under the same tag (after the job was removed from the nodes that could be reached) has a
  // larger one, so the segments a returning node kept from before are told apart.
  std::uint64_t lineage = 0;
  // A print of this rank's command line and working directory when it set the segment up: a resume
  // that nothing says is one (SKT_RESTART unset) must be of the same command.
  std::uint64_t command = 0;
  std::int32_t members[kMaxGroupSize] = {};          // ranks of the group, by member index
  std::uint64_t member_chunks[kMaxGroupSize] = {};   // their stream lengths in chunks
  std::uint64_t member_layouts[kMaxGroupSize] = {};  // their layout hashes
};

void encode_checkpoint_info(std::byte* page, const CheckpointInfo& info);
bool decode_checkpoint_info(const std::byte* page, CheckpointInfo* out);

// The protocol state of one rank. -1 means "none". In the single and double modes, `encoded` is
// the epoch whose copy is being written (ahead of `committed` while the update runs) and the last
// two fields are unused.
struct ControlState {
  std::int64_t committed = -1;  // B and C hold this epoch
  std::int64_t encoded = -1;    // D is the complete checksum of W for this epoch
  std::int64_t agreed = -1;     // this rank saw every rank encode this epoch
  std::int64_t resumed = -1;    // this rank returned to the application after this epoch
  // Every rank finished the job after this epoch (skt_finalize discarding it): what is left of its
  // segments is being removed, and is no checkpoint to resume.
  std::int64_t finished = -1;
  // This rank's time for its last checkpoint, so that a relaunch knows what a checkpoint costs
  // (skt_need_checkpoint's interval) before it has taken one.
  std::int64_t checkpoint_nanoseconds = 0;

  bool operator==(const ControlState&) const = default;
};

// Two slots, each with a sequence number and a CRC: a write goes to the older slot, so a process
// killed in the middle of one leaves the previous state readable.
std::optional<ControlState> read_control(const std::byte* page);
void write_control(std::byte* page, const ControlState& state);
// Zeroes both slots: no valid state.
void clear_control(std::byte* page);

// What a digest slot holds: the block CRCs of one epoch's data (W as it was encoded) and of its
// checksum, each set complete or not. A slot is rewritten for epoch e+2 after it served epoch e.
struct DigestState {
  std::int64_t epoch = -1;
  bool data = false;    // every data block's CRC is in place
  bool parity = false;  // every checksum block's CRC is in place

  bool operator==(const DigestState&) const = default;
};
inline constexpr std::size_t kDigestHeaderBytes = 64;
// Nothing when the slot's header is not valid (never written, cleared, or damaged).
std::optional<DigestState> read_digest_state(const std::byte* slot);
void write_digest_state(std::byte* slot, const DigestState& state);

// A little fixed-layout writer and reader over a page, for every on-disk and on-segment format:
// fields are copied byte for byte, so a format does not depend on struct padding; a text field
// takes kFieldTextBytes, NUL-padded.
inline constexpr std::size_t kFieldTextBytes = 64;

class FieldWriter {
 public:
  explicit FieldWriter(std::byte* p) : p_(p) {}
  template <class T>
  void put(const T& v) {
    std::memcpy(p_ + at_, &v, sizeof v);
    at_ += sizeof v;
  }
  void text(const std::string& s) {
    std::memset(p_ + at_, 0, kFieldTextBytes);
    std::memcpy(p_ + at_, s.data(), std::min(s.size(), kFieldTextBytes - 1));
    at_ += kFieldTextBytes;
  }
  std::size_t size() const { return at_; }

 private:
  std::byte* p_;
  std::size_t at_ = 0;
};

class FieldReader {
 public:
  explicit FieldReader(const std::byte* p) : p_(p) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, p_ + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string text() {
    const char* s = reinterpret_cast<const char*>(p_ + at_);
    at_ += kFieldTextBytes;
    return std::string(s, strnlen(s, kFieldTextBytes - 1));
  }
  std::size_t size() const { return at_; }

 private:
  const std::byte* p_;
  std::size_t at_ = 0;
};

std::uint32_t crc32(const void* data, std::size_t bytes) noexcept;
std::uint64_t crc64(const void* data, std::size_t bytes, std::uint64_t seed = 0) noexcept;

}  // namespace skt
