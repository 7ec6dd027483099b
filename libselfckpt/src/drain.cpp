#include "libselfckpt/internal/drain.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/src/drain_format.hpp"
#include "libselfckpt/src/drain_io.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace fs = std::filesystem;

fs::path drain_job_dir(const fs::path& dir, const std::string& job) {
  return dir / job;
}

fs::path drain_epoch_dir(const fs::path& dir, const std::string& job, std::uint64_t epoch) {
  return drain_job_dir(dir, job) / fmt::format("epoch-{:012}", epoch);
}

fs::path drain_rank_file(const fs::path& epoch_dir, int rank) {
  return epoch_dir / fmt::format("rank-{:06}.skt", rank);
}

std::uint64_t write_drain_file(const fs::path& epoch_dir, DrainFileHeader header,
                               const std::byte* copy, const std::byte* checksum,
                               const std::atomic<bool>* cancelled, const DrainProgress& progress) {
  header.region_table_bytes = region_table_bytes(header.entries);
  make_directories(epoch_dir);
  const fs::path final_path = drain_rank_file(epoch_dir, header.rank);
  const fs::path part = fs::path(final_path.string() + ".part");
  FileDescriptor fd(
      ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) throw system_failure("cannot create", part);
  try {
    std::vector<std::uint32_t> crcs(header.blocks());
    for (std::uint64_t b = 0; b < crcs.size(); ++b) {
      if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
        throw std::runtime_error(fmt::format("the drain of epoch {} was abandoned", header.epoch));
      }
      const BlockSpan s = block_span(header, b);
      const std::byte* from = s.payload_offset < header.copy_bytes
                                  ? copy + s.payload_offset
                                  : checksum + (s.payload_offset - header.copy_bytes);
      crcs[b] = crc32(from, s.bytes);
      write_all(fd.get(), from, s.bytes, s.file_offset, part);
      if (progress) progress(b + 1, crcs.size());
    }
    std::vector<std::byte> head(kDrainHeaderBytes);
    const std::uint64_t crcs_bytes = crcs.size() * sizeof(std::uint32_t);
    write_all(fd.get(), reinterpret_cast<const std::byte*>(crcs.data()), crcs_bytes,
              kDrainHeaderBytes, part);
    std::vector<std::byte> table(region_table_bytes(header.entries));
    encode_region_table(table.data(), header.entries);
    write_all(fd.get(), table.data(), table.size(), kDrainHeaderBytes + crcs_bytes, part);
    header.table_crc = table_crc(crcs);
    header.region_table_crc = crc32(table.data(), table.size());
    encode_drain_header(head.data(), header);
    write_all(fd.get(), head.data(), head.size(), 0, part);
    if (::fdatasync(fd.get()) != 0) throw system_failure("cannot sync", part);
    if (::close(fd.release()) != 0) throw system_failure("cannot close", part);
    if (::rename(part.c_str(), final_path.c_str()) != 0)
      throw system_failure("cannot rename", part);
    sync_directory(epoch_dir);
    return file_digest(head.data(), crcs);
  } catch (...) {
    std::error_code ignored;
    fs::remove(part, ignored);
    throw;
  }
}

void write_manifest(const fs::path& epoch_dir, const DrainManifest& manifest) {
  const fs::path final_path = epoch_dir / kManifestName;
  const fs::path part = epoch_dir / (std::string(kManifestName) + ".part");
  const std::string text = format_manifest(manifest);
  FileDescriptor fd(
      ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) throw system_failure("cannot create", part);
  write_all(fd.get(), reinterpret_cast<const std::byte*>(text.data()), text.size(), 0, part);
  if (::fsync(fd.get()) != 0) throw system_failure("cannot sync", part);
  if (::close(fd.release()) != 0) throw system_failure("cannot close", part);
  if (::rename(part.c_str(), final_path.c_str()) != 0) throw system_failure("cannot rename", part);
  sync_directory(epoch_dir);
}

std::vector<fs::path> epoch_dirs(const fs::path& dir, const std::string& job) {
  std::vector<std::pair<std::uint64_t, fs::path>> found;
  std::error_code error;
  require_private(drain_job_dir(dir, job));
  for (const auto& entry : fs::directory_iterator(drain_job_dir(dir, job), error)) {
    const auto epoch = epoch_of_name(entry.path().filename().string());
    if (!epoch) continue;
    require_private(entry.path());
    if (entry.is_directory()) found.emplace_back(*epoch, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found)
    out.push_back(std::move(f.second));
  return out;
}

namespace {

// The manifest an epoch's rank files make when every rank's is there, whole, and they agree.
std::optional<DrainManifest> manifest_of_files(const fs::path& epoch_dir, const std::string& job,
                                               std::uint64_t epoch) {
  const auto first = read_drain_header(drain_rank_file(epoch_dir, 0));
  if (!first || first->job != job || first->epoch != epoch || first->nranks < 1) return {};
  DrainManifest m{job, first->run, epoch, {}};
  for (int r = 0; r < first->nranks; ++r) {
    const auto digest = drained_file_digest(epoch_dir, r, first->run, epoch, first->nranks);
    if (!digest) return {};
    m.digests.push_back(*digest);
  }
  return m;
}

bool holds_rank_files(const fs::path& epoch_dir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(epoch_dir, error)) {
    if (entry.path().extension() == ".skt") return true;
  }
  return false;
}

}  // namespace

std::vector<DrainedEpoch> complete_epochs(const fs::path& dir, const std::string& job) {
  std::vector<DrainedEpoch> out;
  const auto dirs = epoch_dirs(dir, job);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const auto epoch = epoch_of_name(it->filename().string());
    FileDescriptor fd(open_private(*it / kManifestName));
    const bool present = fd.get() >= 0;
    std::optional<DrainManifest> manifest;
    if (present) {
      std::string text;
      char buffer[4096];
      for (ssize_t n; (n = ::read(fd.get(), buffer, sizeof buffer)) > 0;)
        text.append(buffer, static_cast<std::size_t>(n));
      manifest = parse_manifest(text);
      if (manifest && (manifest->job != job || epoch != manifest->epoch)) manifest.reset();
    }
    if (manifest) {
      out.push_back({*it, std::move(*manifest)});
      continue;
    }
    // No manifest: the drain was stopped before it completed, and the epoch does not count. A
    // damaged one: the files make the epoch whole when every rank's is there and they agree;
    // else, where there are files, it is refused, since taking the epoch as absent would start
    // the job afresh over a drain that exists.
    if (!present) continue;
    if (auto rebuilt = epoch ? manifest_of_files(*it, job, *epoch) : std::nullopt) {
      out.push_back({*it, std::move(*rebuilt), true});
    } else if (holds_rank_files(*it)) {
      throw Error(
          SKT_ERR_UNRECOVERABLE,
          fmt::format("the manifest of drained epoch {} ({}) is damaged, and its rank files "
                      "do not make a whole epoch without it: refusing to go on as if there "
                      "were no drain. Remove the epoch to start without it (skt-drain "
                      "remove --dir {} --job {} --epoch {})",
                      epoch.value_or(0), (*it / kManifestName).string(), dir.string(), job,
                      epoch.value_or(0)));
    }
  }
  return out;
}

namespace {

// What a rank file starts with: its header page, block CRCs and region table.
struct FileHead {
  std::vector<std::byte> page = std::vector<std::byte>(kDrainHeaderBytes);
  DrainFileHeader header;
  std::vector<std::uint32_t> crcs;
};

// Reads the head of an open rank file, checks it against what is expected (and the manifest's
// digest) and each part against its CRC; throws std::runtime_error with what is wrong.
FileHead read_head(int fd, const fs::path& path, const DrainFileExpected& x) {
  FileHead head;
  if (!read_all(fd, head.page.data(), head.page.size(), 0, path)) {
    throw std::runtime_error(fmt::format("{} is truncated (no whole header)", path.string()));
  }
  const auto header = decode_drain_header(head.page.data());
  if (!header) {
    const auto version = drain_format_of(head.page.data());
    throw std::runtime_error(
        version && *version != kDrainFormatVersion
            ? fmt::format("{} was written by another version of selfckpt (drain format {}; this "
                          "one reads {}), which alone restores it",
                          path.string(), *version, kDrainFormatVersion)
            : fmt::format("{} has no valid header (damaged)", path.string()));
  }
  head.header = *header;
  if (header->job != x.job || header->run != x.run || header->epoch != x.epoch ||
      header->rank != x.rank || header->nranks != x.nranks) {
    throw std::runtime_error(fmt::format(
        "{} belongs elsewhere: job '{}' run {:016x} epoch {} rank {} of {}, expected job '{}' "
        "run {:016x} epoch {} rank {} of {}",
        path.string(), header->job, header->run, header->epoch, header->rank, header->nranks, x.job,
        x.run, x.epoch, x.rank, x.nranks));
  }
  head.crcs.resize(header->blocks());
  const std::uint64_t crcs_bytes = head.crcs.size() * sizeof(std::uint32_t);
  if (!read_all(fd, reinterpret_cast<std::byte*>(head.crcs.data()), crcs_bytes, kDrainHeaderBytes,
                path)) {
    throw std::runtime_error(fmt::format("{} is truncated (in its block CRCs)", path.string()));
  }
  if (table_crc(head.crcs) != header->table_crc) {
    throw std::runtime_error(
        fmt::format("{} is damaged: its block CRCs do not match their own CRC", path.string()));
  }
  if (x.digest && file_digest(head.page.data(), head.crcs) != *x.digest) {
    throw std::runtime_error(
        fmt::format("{} is not the file the manifest recorded (its header or block CRCs differ)",
                    path.string()));
  }
  std::vector<std::byte> table(static_cast<std::size_t>(header->region_table_bytes));
  if (!read_all(fd, table.data(), table.size(), kDrainHeaderBytes + crcs_bytes, path)) {
    throw std::runtime_error(fmt::format("{} is truncated (in its region table)", path.string()));
  }
  auto entries = decode_region_table(table.data(), table.size());
  if (!entries || crc32(table.data(), table.size()) != header->region_table_crc) {
    throw std::runtime_error(
        fmt::format("{} is damaged: its region table does not match its CRC", path.string()));
  }
  head.header.entries = std::move(*entries);
  return head;
}

// Reads block b of a file into `into` and checks it against its CRC.
void read_block(int fd, const fs::path& path, const DrainFileHeader& header,
                const std::vector<std::uint32_t>& crcs, std::uint64_t b, std::byte* into) {
  const BlockSpan s = block_span(header, b);
  if (!read_all(fd, into, s.bytes, s.file_offset, path)) {
    throw std::runtime_error(
        fmt::format("{} is truncated: it ends in block {} of {}", path.string(), b, crcs.size()));
  }
  if (crc32(into, s.bytes) != crcs[b]) {
    throw std::runtime_error(fmt::format("{} is damaged: block {} ({}) does not match its CRC",
                                         path.string(), b, describe_block(header, s)));
  }
}

}  // namespace

DrainFileHeader read_rank_file(const fs::path& path, const DrainFileExpected& expected,
                               const BlockSink& deliver) {
  FileDescriptor fd(open_private(path));
  if (fd.get() < 0) throw system_failure("cannot open", path);
  const FileHead head = read_head(fd.get(), path, expected);
  std::vector<std::byte> block(static_cast<std::size_t>(head.header.block_bytes));
  for (std::uint64_t b = 0; b < head.crcs.size(); ++b) {
    read_block(fd.get(), path, head.header, head.crcs, b, block.data());
    const BlockSpan s = block_span(head.header, b);
    if (deliver) deliver(s.payload_offset, block.data(), s.bytes);
  }
  return head.header;
}

DrainedRankFile::DrainedRankFile(const DrainedEpoch& epoch, int rank)
    : path_(drain_rank_file(epoch.dir, rank)) {
  const DrainManifest& m = epoch.manifest;
  FileDescriptor fd(open_private(path_));
  if (fd.get() < 0) throw system_failure("cannot open", path_);
  FileHead head = read_head(
      fd.get(), path_,
      {m.job, m.run, m.epoch, rank, m.nranks(), m.digests[static_cast<std::size_t>(rank)]});
  header_ = std::move(head.header);
  crcs_ = std::move(head.crcs);
  fd_ = fd.release();
}

DrainedRankFile::~DrainedRankFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DrainedRankFile::read_copy(std::uint64_t offset, std::size_t bytes, std::byte* out) {
  if (offset > header_.copy_bytes || bytes > header_.copy_bytes - offset) {
    throw std::runtime_error(fmt::format("bytes {} to {} are beyond the {} bytes of {}'s copy",
                                         offset, offset + bytes, header_.copy_bytes,
                                         path_.string()));
  }
  block_.resize(static_cast<std::size_t>(header_.block_bytes));
  while (bytes > 0) {
    const std::uint64_t b = offset / header_.block_bytes;
    const std::uint64_t within = offset - b * header_.block_bytes;
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(bytes, header_.block_bytes - within));
    if (b != cached_block_) {
      cached_block_ = ~std::uint64_t{0};
      read_block(fd_, path_, header_, crcs_, b, block_.data());
      cached_block_ = b;
    }
    std::memcpy(out, block_.data() + within, n);
    out += n;
    offset += n;
    bytes -= n;
  }
}

DrainFileHeader read_drain_file(const DrainedEpoch& epoch, int rank, const BlockSink& deliver) {
  const DrainManifest& m = epoch.manifest;
  return read_rank_file(
      drain_rank_file(epoch.dir, rank),
      {m.job, m.run, m.epoch, rank, m.nranks(), m.digests[static_cast<std::size_t>(rank)]},
      deliver);
}

std::optional<DrainFileHeader> read_drain_header(const fs::path& path) {
  FileDescriptor fd(open_private(path));
  if (fd.get() < 0) return {};
  std::vector<std::byte> head(kDrainHeaderBytes);
  if (!read_all(fd.get(), head.data(), head.size(), 0, path)) return {};
  return decode_drain_header(head.data());
}

std::vector<DrainFileHeader> rank_files(const fs::path& dir, const std::string& job, int rank) {
  std::vector<DrainFileHeader> out;
  const auto dirs = epoch_dirs(dir, job);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const auto header = read_drain_header(drain_rank_file(*it, rank));
    if (header && header->job == job && header->rank == rank &&
        epoch_of_name(it->filename().string()) == header->epoch) {
      out.push_back(*header);
    }
  }
  return out;
}

void remove_rank_files(const fs::path& dir, const std::string& job, int rank,
                       std::optional<std::uint64_t> keep) {
  for (const auto& epoch_dir : epoch_dirs(dir, job)) {
    if (keep && epoch_of_name(epoch_dir.filename().string()) == *keep) continue;
    std::error_code ignored;
    fs::remove(drain_rank_file(epoch_dir, rank), ignored);
    fs::remove(fs::path(drain_rank_file(epoch_dir, rank).string() + ".part"), ignored);
    fs::remove(epoch_dir, ignored);  // only once empty: other ranks' files may share it
  }
  std::error_code ignored;
  if (!keep) fs::remove(drain_job_dir(dir, job), ignored);
}

std::vector<DrainedCandidate> drained_candidates(
    const std::vector<std::vector<DrainFileHeader>>& files,
    const std::function<int(std::uint32_t scheme, int parity)>& tolerance, std::string* why_not) {
  const int n = static_cast<int>(files.size());
  // Every (epoch, run) some rank holds a file of, newest epoch first.
  std::set<std::pair<std::uint64_t, std::uint64_t>, std::greater<>> keys;
  for (const auto& mine : files) {
    for (const auto& h : mine)
      keys.emplace(h.epoch, h.run);
  }
  std::vector<DrainedCandidate> out;
  for (const auto& [epoch, run] : keys) {
    DrainedCandidate c;
    c.epoch = epoch;
    c.run = run;
    c.group_of.assign(static_cast<std::size_t>(n), -1);
    c.chunks_of.assign(static_cast<std::size_t>(n), 0);
    std::vector<const DrainFileHeader*> held(static_cast<std::size_t>(n), nullptr);
    std::string why;
    for (int r = 0; r < n && why.empty(); ++r) {
      for (const auto& h : files[static_cast<std::size_t>(r)]) {
        if (h.epoch != epoch || h.run != run) continue;
        if (h.nranks != n) {
          why = fmt::format("it was drained by {} ranks, this run has {}", h.nranks, n);
          break;
        }
        held[static_cast<std::size_t>(r)] = &h;
        if (c.members.empty()) {
          c.sample = h;
          c.members.resize(static_cast<std::size_t>(h.groups));
          c.parity_of.assign(static_cast<std::size_t>(h.groups), -1);
        }
        const auto g = static_cast<std::size_t>(h.group);
        // A group of one has no parity: the parity is the group's, not the job's.
        if (h.groups != c.sample.groups || h.scheme != c.sample.scheme ||
            h.chunk_bytes != c.sample.chunk_bytes ||
            (!c.members[g].empty() && (c.members[g] != h.members || c.parity_of[g] != h.parity))) {
          why = fmt::format("the files of ranks {} and {} disagree about the groups", c.sample.rank,
                            r);
          break;
        }
        c.members[g] = h.members;
        c.parity_of[g] = h.parity;
        for (int i = 0; i < h.group_size(); ++i) {
          const auto member = static_cast<std::size_t>(h.members[static_cast<std::size_t>(i)]);
          if (member >= static_cast<std::size_t>(n)) {
            why = fmt::format("rank {}'s file names rank {}, beyond the job", r, member);
            break;
          }
          c.group_of[member] = h.group;
          c.chunks_of[member] = h.member_chunks[static_cast<std::size_t>(i)];
        }
      }
    }
    c.lost.resize(c.members.size());
    for (std::size_t g = 0; g < c.members.size() && why.empty(); ++g) {
      if (c.members[g].empty()) {
        why = fmt::format("no rank of group {} holds a file", g);
        break;
      }
      for (std::size_t i = 0; i < c.members[g].size(); ++i) {
        if (held[static_cast<std::size_t>(c.members[g][i])] == nullptr)
          c.lost[g].push_back(static_cast<int>(i));
      }
      const int tolerated = tolerance(c.sample.scheme, c.parity_of[g]);
      if (static_cast<int>(c.lost[g].size()) > tolerated) {
        std::vector<int> ranks;
        for (const int i : c.lost[g])
          ranks.push_back(c.members[g][static_cast<std::size_t>(i)]);
        why = fmt::format("group {} lacks the files of ranks {} and tolerates {}", g,
                          fmt::join(ranks, ", "), tolerated);
      }
    }
    for (int r = 0; r < n && why.empty(); ++r) {
      if (c.group_of[static_cast<std::size_t>(r)] < 0)
        why = fmt::format("no file names a group for rank {}", r);
    }
    if (why.empty()) {
      out.push_back(std::move(c));
    } else if (why_not != nullptr && out.empty()) {
      *why_not += fmt::format("{}epoch {} of run {:016x}: {}", why_not->empty() ? "" : "; ", epoch,
                              run, why);
    }
  }
  return out;
}

std::optional<std::uint64_t> drained_file_digest(const fs::path& epoch_dir, int rank,
                                                 std::uint64_t run, std::uint64_t epoch,
                                                 int nranks) {
  const fs::path path = drain_rank_file(epoch_dir, rank);
  FileDescriptor fd(open_private(path));
  if (fd.get() < 0) return {};
  std::vector<std::byte> head(kDrainHeaderBytes);
  if (!read_all(fd.get(), head.data(), head.size(), 0, path)) return {};
  const auto header = decode_drain_header(head.data());
  if (!header || header->run != run || header->epoch != epoch || header->rank != rank ||
      header->nranks != nranks) {
    return {};  // another run's file, which this run's will replace
  }
  std::vector<std::uint32_t> crcs(header->blocks());
  if (!read_all(fd.get(), reinterpret_cast<std::byte*>(crcs.data()),
                crcs.size() * sizeof(std::uint32_t), kDrainHeaderBytes, path)) {
    return {};
  }
  return file_digest(head.data(), crcs);
}

bool complete_when_drained(const fs::path& epoch_dir, const std::string& job, std::uint64_t run,
                           std::uint64_t epoch, int nranks, const std::atomic<bool>& cancelled) {
  DrainManifest manifest{job, run, epoch,
                         std::vector<std::uint64_t>(static_cast<std::size_t>(nranks))};
  for (int rank = 0; rank < nranks;) {
    if (cancelled.load(std::memory_order_relaxed)) return false;
    if (const auto digest = drained_file_digest(epoch_dir, rank, run, epoch, nranks)) {
      manifest.digests[static_cast<std::size_t>(rank)] = *digest;
      ++rank;
    } else {
      // The other ranks write at the speed of the same storage: a short poll costs nothing.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  write_manifest(epoch_dir, manifest);
  const fs::path root = epoch_dir.parent_path().parent_path();
  for (const auto& other : epoch_dirs(root, job)) {
    std::error_code ignored;
    if (other != epoch_dir) fs::remove_all(other, ignored);
  }
  return true;
}

DrainWriter::~DrainWriter() {
  abandon();
}

void DrainWriter::start(fs::path epoch_dir, DrainFileHeader header, const std::byte* copy,
                        const std::byte* checksum, DrainProgress progress, bool completes) {
  abandon();
  cancelled_ = false;
  file_done_ = false;
  ended_ = false;
  outcome_ = Outcome{};
  header.region_table_bytes = region_table_bytes(header.entries);
  outcome_.epoch = header.epoch;
  outcome_.bytes = header.file_bytes();
  thread_ = std::thread([this, dir = std::move(epoch_dir), header = std::move(header), copy,
                         checksum, progress = std::move(progress), completes] {
    const auto begin = std::chrono::steady_clock::now();
    std::optional<std::uint64_t> digest;
    std::string error;
    try {
      digest = write_drain_file(dir, header, copy, checksum, &cancelled_, progress);
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      const std::lock_guard lock(mutex_);
      outcome_.digest = digest;
      outcome_.error = error;
      outcome_.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      file_done_ = true;
    }
    file_written_.notify_all();
    bool completed = false;
    std::string manifest_error;
    if (completes && digest) {
      try {
        completed = complete_when_drained(dir, header.job, header.run, header.epoch, header.nranks,
                                          cancelled_);
      } catch (const std::exception& e) {
        manifest_error = e.what();
      }
    }
    {
      const std::lock_guard lock(mutex_);
      outcome_.completed = completed;
      outcome_.manifest_error = manifest_error;
      ended_ = true;
    }
    thread_ended_.notify_all();
  });
}

DrainWriter::Outcome DrainWriter::wait_file() {
  std::unique_lock lock(mutex_);
  file_written_.wait(lock, [&] { return file_done_ || !thread_.joinable(); });
  return outcome_;
}

DrainWriter::Outcome DrainWriter::wait() {
  if (thread_.joinable()) thread_.join();
  return outcome_;
}

DrainWriter::Outcome DrainWriter::wait_at_most(double seconds) {
  {
    std::unique_lock lock(mutex_);
    thread_ended_.wait_for(lock, std::chrono::duration<double>(seconds),
                           [&] { return ended_ || !thread_.joinable(); });
  }
  abandon();
  return outcome_;
}

void DrainWriter::abandon() {
  cancelled_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace skt
