// The second level: committed copies B drained from shared memory to files, and read back when
// memory cannot serve. Formats and file operations, no MPI; the session decides when and agrees.
//
// A drained epoch is a directory DIR/JOB/epoch-E holding one file per rank. A rank's file is a
// header page (who, which epoch, the byte layout of B, the group of the run that drained it), the
// CRC of every block, then B and, when the checksum is drained too, C; it gets its name only once
// whole. Every file carries the run's id: files of another run under the same epoch number can
// never be mixed into a restore.
//
// What makes an epoch complete depends on what was drained. A drain of B alone (a directory every
// rank sees) is complete when its manifest, written last and renamed into place once every rank's
// file is there, says so; an epoch without one is never used. A drain of B and C (node-local
// disks, where no rank sees the others' files) has no manifest: it is complete when every group
// holds enough whole files to rebuild the others, as it would in memory, which the ranks decide
// together at restart (drained_candidates).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libselfckpt/internal/layout.hpp"

namespace skt {

// 4: the region table follows the block CRCs.
inline constexpr std::uint32_t kDrainFormatVersion = 4;
inline constexpr std::size_t kDrainHeaderBytes = 4096;
inline constexpr std::size_t kDrainBlockBytes = std::size_t{1} << 20;

struct DrainFileHeader {
  std::string job;
  std::uint64_t run = 0;  // the id of the run that drained (shared by its files and manifest)
  std::uint64_t epoch = 0;
  int rank = 0;
  int nranks = 0;
  // The group of that run, which a rebuild from the group's files joins again: its index among
  // `groups`, this rank's member index, and by member index the ranks and their stream lengths.
  int groups = 0;
  int group = 0;
  int member = 0;
  std::vector<int> members;
  std::vector<std::uint64_t> member_chunks;
  std::uint32_t scheme = 0;  // enc::Scheme, the parity and the chunk size that striped C
  int parity = 0;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t layout_hash = 0;     // of the regions and private objects B holds
  std::uint64_t command = 0;         // CheckpointInfo::command of the rank that drained
  std::uint64_t stage_bytes = 0;     // B: the staged private objects from 0,
  std::uint64_t regions_offset = 0;  // the regions' area from here,
  std::uint64_t regions_bytes = 0;
  std::uint64_t copy_bytes = 0;      // in all
  std::uint64_t checksum_bytes = 0;  // C, after B
  bool with_checksum = false;        // C is drained (SKT_DRAIN_WRITE=copy+checksum)
  std::uint64_t block_bytes = kDrainBlockBytes;
  std::uint32_t table_crc = 0;  // of the block CRCs, which follow the header
  // The regions and private objects of B, after the block CRCs: the header records the encoded
  // table's size and CRC. Left empty by the readers of the header page alone (rank_files,
  // read_drain_header).
  std::vector<RegionEntry> entries;
  std::uint64_t region_table_bytes = 0;
  std::uint32_t region_table_crc = 0;

  bool operator==(const DrainFileHeader&) const = default;
  int group_size() const noexcept { return static_cast<int>(members.size()); }
  std::uint64_t copy_blocks() const noexcept {
    return (copy_bytes + block_bytes - 1) / block_bytes;
  }
  std::uint64_t blocks() const noexcept {
    return copy_blocks() + (checksum_bytes + block_bytes - 1) / block_bytes;
  }
  // Where B starts in the file: after the header, the block CRCs and the region table, on a page;
  // C starts on the block after B's last.
  std::uint64_t data_offset() const noexcept;
  std::uint64_t checksum_offset() const noexcept {
    return data_offset() + copy_blocks() * block_bytes;
  }
  std::uint64_t file_bytes() const noexcept { return checksum_offset() + checksum_bytes; }
};

void encode_drain_header(std::byte* page, const DrainFileHeader& header);
// Nothing when the page is not a drain header of this format or its CRC does not match.
std::optional<DrainFileHeader> decode_drain_header(const std::byte* page);

// What makes an epoch complete: every rank's file, each named by its digest (a CRC over its
// header and block CRCs), so that a file replaced after the manifest was written is caught too.
struct DrainManifest {
  std::string job;
  std::uint64_t run = 0;
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> digests;  // by rank

  bool operator==(const DrainManifest&) const = default;
  int nranks() const noexcept { return static_cast<int>(digests.size()); }
};
std::string format_manifest(const DrainManifest& manifest);
// Nothing when the text is not a whole manifest (its last line checks all before it).
std::optional<DrainManifest> parse_manifest(const std::string& text);

std::filesystem::path drain_job_dir(const std::filesystem::path& dir, const std::string& job);
std::filesystem::path drain_epoch_dir(const std::filesystem::path& dir, const std::string& job,
                                      std::uint64_t epoch);
std::filesystem::path drain_rank_file(const std::filesystem::path& epoch_dir, int rank);

// Writes `header.copy_bytes` at `copy` (and `header.checksum_bytes` at `checksum`), with the
// region table `header.entries`, as the rank's file of the epoch (under a temporary name, synced,
// then renamed), straight from memory. Returns the file's digest; throws std::runtime_error naming
// the file and the system's reason. `cancelled` is polled between blocks, and `progress` told after
// each (blocks written, in all).
using DrainProgress = std::function<void(std::uint64_t, std::uint64_t)>;
std::uint64_t write_drain_file(const std::filesystem::path& epoch_dir, DrainFileHeader header,
                               const std::byte* copy, const std::byte* checksum = nullptr,
                               const std::atomic<bool>* cancelled = nullptr,
                               const DrainProgress& progress = {});

// Writes the manifest into its epoch's directory: a temporary file, synced, renamed, the directory
// synced. Throws std::runtime_error.
void write_manifest(const std::filesystem::path& epoch_dir, const DrainManifest& manifest);

// The epochs of a job that have a valid manifest, newest first. Epoch directories without one
// (a drain that did not finish) are left out.
struct DrainedEpoch {
  std::filesystem::path dir;
  DrainManifest manifest;
  // Its manifest was damaged, but every rank's file is there and they agree (job, run, epoch,
  // ranks): the manifest they make was used instead.
  bool rebuilt = false;
};
std::vector<DrainedEpoch> complete_epochs(const std::filesystem::path& dir, const std::string& job);
// Every epoch directory of a job, complete or not, oldest first.
std::vector<std::filesystem::path> epoch_dirs(const std::filesystem::path& dir,
                                              const std::string& job);

// What a rank's file must be to serve: whose, which epoch, and (from a manifest) its digest.
struct DrainFileExpected {
  std::string job;
  std::uint64_t run = 0;
  std::uint64_t epoch = 0;
  int rank = 0;
  int nranks = 0;
  std::optional<std::uint64_t> digest;
};

// Reads a rank's file and checks it against what is expected and every block against its CRC;
// each verified block goes to `deliver` (offset in B, or past B's end in C: copy_bytes + offset
// in C; bytes), which may be empty to verify only. Returns the header; throws std::runtime_error
// with what is wrong (missing, truncated, a block whose CRC differs, another run's file).
using BlockSink = std::function<void(std::uint64_t offset, const std::byte* bytes, std::size_t n)>;
DrainFileHeader read_rank_file(const std::filesystem::path& path, const DrainFileExpected& expected,
                               const BlockSink& deliver);
// The same for rank's file of a complete epoch, as its manifest records it.
DrainFileHeader read_drain_file(const DrainedEpoch& epoch, int rank, const BlockSink& deliver);

// One rank's file of a complete epoch, opened to read pieces of its copy B: its head (header,
// block CRCs, region table) checked against the manifest when opened, each block against its CRC
// when read. Throws std::runtime_error with what is wrong and where.
class DrainedRankFile {
 public:
  DrainedRankFile(const DrainedEpoch& epoch, int rank);
  ~DrainedRankFile();
  DrainedRankFile(const DrainedRankFile&) = delete;
  DrainedRankFile& operator=(const DrainedRankFile&) = delete;

  const DrainFileHeader& header() const noexcept { return header_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  // Copies bytes [offset, offset + bytes) of B to `out`.
  void read_copy(std::uint64_t offset, std::size_t bytes, std::byte* out);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  DrainFileHeader header_;
  std::vector<std::uint32_t> crcs_;
  std::vector<std::byte> block_;
  std::uint64_t cached_block_ = ~std::uint64_t{0};  // the block `block_` holds, checked
};

// The headers of rank's files of a job (files under their final name whose header is intact),
// newest epoch first, and the header of one file, if it has a valid one.
std::vector<DrainFileHeader> rank_files(const std::filesystem::path& dir, const std::string& job,
                                        int rank);
std::optional<DrainFileHeader> read_drain_header(const std::filesystem::path& path);

// Removes rank's files of the job's epochs other than `keep` (all with none), and the epoch
// directories they leave empty: what each rank does when its files are the only ones it sees.
void remove_rank_files(const std::filesystem::path& dir, const std::string& job, int rank,
                       std::optional<std::uint64_t> keep);

// An epoch drained with its checksums (copy+checksum), and how its groups rebuild it: the ranks
// whose files are missing or damaged, by group.
struct DrainedCandidate {
  std::uint64_t epoch = 0;
  std::uint64_t run = 0;
  std::vector<int> group_of;              // rank → its group in the run that drained
  std::vector<std::vector<int>> members;  // group → ranks, by member index
  std::vector<std::vector<int>> lost;     // group → member indices with no whole file
  std::vector<int> parity_of;             // group → its parity chunks per row (none for one)
  std::vector<std::uint64_t> chunks_of;   // rank → its stream length, as recorded
  DrainFileHeader sample;                 // one file's header (scheme, chunk size)
};
// The epochs that `files[r]` (rank r's headers, as rank_files gives them; those whose CRCs failed
// left out) can restore, newest first: those of one run where every rank belongs to a recorded
// group and no group lacks more files than its code tolerates (`tolerance(scheme, parity)`).
// `why_not` collects, for the newer epochs that cannot, the reason.
std::vector<DrainedCandidate> drained_candidates(
    const std::vector<std::vector<DrainFileHeader>>& files,
    const std::function<int(std::uint32_t scheme, int parity)>& tolerance, std::string* why_not);

// The digest of rank's file of an epoch as the manifest records it, once the file is there under
// its final name and written by run `run`; nothing until then.
std::optional<std::uint64_t> drained_file_digest(const std::filesystem::path& epoch_dir, int rank,
                                                 std::uint64_t run, std::uint64_t epoch,
                                                 int nranks);

// Completes an epoch as soon as every rank's file is in place: polls for them, then writes the
// manifest and removes the job's other epochs (older, or never completed). False when
// `cancelled` was set first. Throws std::runtime_error when the manifest cannot be written.
bool complete_when_drained(const std::filesystem::path& epoch_dir, const std::string& job,
                           std::uint64_t run, std::uint64_t epoch, int nranks,
                           const std::atomic<bool>& cancelled);

// Drains one rank's copy in a background thread: the application goes on computing meanwhile.
// The thread of the rank that completes epochs (rank 0) then waits for every rank's file and
// writes the manifest, so that an epoch is complete as soon as its last file is written.
class DrainWriter {
 public:
  DrainWriter() = default;
  ~DrainWriter();
  DrainWriter(const DrainWriter&) = delete;
  DrainWriter& operator=(const DrainWriter&) = delete;

  // Starts writing; the copy must not change until wait_file() returns.
  void start(std::filesystem::path epoch_dir, DrainFileHeader header, const std::byte* copy,
             const std::byte* checksum, DrainProgress progress, bool completes);
  struct Outcome {
    std::uint64_t epoch = 0;
    std::optional<std::uint64_t> digest;  // of this rank's file, once written
    std::string error;                    // why it was not
    double seconds = 0;                   // writing it
    std::uint64_t bytes = 0;
    bool completed = false;      // the manifest was written (the completing rank)
    std::string manifest_error;  // why it could not be
  };
  // Waits until this rank's file is written, or failed.
  Outcome wait_file();
  // Waits until the thread ends (for the completing rank: the manifest written, or failed).
  Outcome wait();
  // As wait(), but the completing rank waits at most `seconds` for the other ranks' files and
  // then abandons: for an end without an agreement, where another rank may have failed.
  Outcome wait_at_most(double seconds);
  // Stops the drain at its next block, or its wait for the other ranks' files (its epoch stays
  // incomplete), and waits for the thread.
  void abandon();

 private:
  std::thread thread_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable file_written_;
  bool file_done_ = false;
  bool ended_ = false;  // the thread has nothing left to do
  std::condition_variable thread_ended_;
  Outcome outcome_;
};

}  // namespace skt
