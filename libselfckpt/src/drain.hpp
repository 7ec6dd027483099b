// The second level: committed copies B drained from shared memory to files, and read back when
// memory cannot serve. Formats and file operations, no MPI; the session decides when and agrees.
//
// A drained epoch is a directory DIR/JOB/epoch-E holding one file per rank and, once every rank's
// file is complete, a manifest written last and renamed into place, so that an epoch without a
// manifest is never taken as complete. A rank's file is a header page (who, which epoch, the byte
// layout of B, the group plan of the run that drained it), the CRC of every block of B, then B.
// Every file and the manifest carry the run's id: files of another run under the same epoch
// number can never be mixed into a restore.
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

namespace skt {

inline constexpr std::uint32_t kDrainFormatVersion = 1;
inline constexpr std::size_t kDrainHeaderBytes = 4096;
inline constexpr std::size_t kDrainBlockBytes = std::size_t{1} << 20;

struct DrainFileHeader {
  std::string job;
  std::uint64_t run = 0;  // the id of the run that drained (shared by its files and manifest)
  std::uint64_t epoch = 0;
  int rank = 0;
  int nranks = 0;
  int group = 0;  // the group plan of that run, for tools and messages
  int member = 0;
  int group_size = 0;
  std::uint64_t layout_hash = 0;     // of the regions and private objects B holds
  std::uint64_t stage_bytes = 0;     // B: the staged private objects from 0,
  std::uint64_t regions_offset = 0;  // the regions' area from here,
  std::uint64_t regions_bytes = 0;
  std::uint64_t copy_bytes = 0;  // in all
  std::uint64_t block_bytes = kDrainBlockBytes;

  bool operator==(const DrainFileHeader&) const = default;
  std::uint64_t blocks() const noexcept { return (copy_bytes + block_bytes - 1) / block_bytes; }
  // Where B starts in the file: after the header and the block CRCs, on a page.
  std::uint64_t data_offset() const noexcept;
  std::uint64_t file_bytes() const noexcept { return data_offset() + copy_bytes; }
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

// Writes `header.copy_bytes` at `copy` as the rank's file of the epoch (under a temporary name,
// synced, then renamed), straight from memory. Returns the file's digest; throws
// std::runtime_error naming the file and the system's reason. `cancelled` is polled between
// blocks, and `progress` told after each (blocks written, blocks in all).
using DrainProgress = std::function<void(std::uint64_t, std::uint64_t)>;
std::uint64_t write_drain_file(const std::filesystem::path& epoch_dir,
                               const DrainFileHeader& header, const std::byte* copy,
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
};
std::vector<DrainedEpoch> complete_epochs(const std::filesystem::path& dir, const std::string& job);
// Every epoch directory of a job, complete or not, oldest first.
std::vector<std::filesystem::path> epoch_dirs(const std::filesystem::path& dir,
                                              const std::string& job);

// Reads rank's file of a complete epoch and checks it against the manifest (job, run, epoch, rank,
// digest) and every block against its CRC; each verified block goes to `deliver` (offset in B,
// bytes), which may be empty to verify only. Returns the header; throws std::runtime_error with
// what is wrong (missing, truncated, a block whose CRC differs, another run's file).
using BlockSink = std::function<void(std::uint64_t offset, const std::byte* bytes, std::size_t n)>;
DrainFileHeader read_drain_file(const DrainedEpoch& epoch, int rank, const BlockSink& deliver);

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
             DrainProgress progress, bool completes);
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
