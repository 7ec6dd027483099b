// skt-shm: look at, verify and remove the calling user's selfckpt segments.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/memory.hpp"
#include "libselfckpt/internal/names.hpp"
#include "libselfckpt/internal/scrub.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "tools/shm_verify.hpp"

namespace {

struct Filter {
  std::string job;
  std::string node;
  std::optional<int> rank;
  // clean --exactly: these tags and no others, where --job takes its sub-jobs too.
  std::vector<std::string> exactly;

  bool job_matches(const std::string& tag) const {
    if (!exactly.empty()) return std::find(exactly.begin(), exactly.end(), tag) != exactly.end();
    return job.empty() || skt::job_covers(job, tag);
  }

  bool matches(const skt::SegmentHeader& h) const {
    return job_matches(h.identity.job) && (node.empty() || h.identity.domain == node) &&
           (!rank || h.identity.rank == *rank);
  }
};

std::vector<skt::SegmentListing> selected(const Filter& filter) {
  auto all = skt::list_own_segments(true);
  std::vector<skt::SegmentListing> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [&](const skt::SegmentListing& s) { return filter.matches(s.header); });
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& x = a.header.identity;
    const auto& y = b.header.identity;
    return std::tie(x.job, x.rank, x.kind, x.name) < std::tie(y.job, y.rank, y.kind, y.name);
  });
  return out;
}

std::string epoch_text(std::int64_t e) {
  return e < 0 ? "-" : std::to_string(e);
}

// A segment of another version of selfckpt: listed and removed, never read.
bool other_version(const skt::SegmentListing& s) {
  return s.header.version != skt::kFormatVersion;
}

std::string other_version_text(const skt::SegmentListing& s) {
  return fmt::format("format {}: written by another version of selfckpt, which alone resumes it",
                     s.header.version);
}

std::string state_text(const skt::SegmentListing& s) {
  if (other_version(s)) return other_version_text(s);
  if (s.header.identity.kind != skt::SegmentKind::checkpoint) return "";
  auto segment = skt::Segment::attach(s.shmid, true);
  if (!segment) return "unreadable";
  const auto state = skt::read_control(segment->base());
  if (!state) return "no valid control block";
  // Its group last, which skt-run reads to keep a group's members apart when it doubles ranks up.
  skt::CheckpointInfo info;
  std::string group;
  if (skt::decode_checkpoint_info(segment->base(), &info) && info.group_size > 0 &&
      info.group_size <= static_cast<std::uint32_t>(skt::kMaxGroupSize)) {
    group = fmt::format(" group {} ranks {}", info.group,
                        fmt::join(std::span(info.members, info.group_size), ","));
  }
  return fmt::format(
      "committed {} encoded {} agreed {} resumed {}{}{}", epoch_text(state->committed),
      epoch_text(state->encoded), epoch_text(state->agreed), epoch_text(state->resumed),
      state->finished >= 0 ? fmt::format(" finished {} (the job completed)", state->finished)
                           : std::string(),
      group);
}

int list(const Filter& filter) {
  const auto segments = selected(filter);
  if (segments.empty()) {
    fmt::print("no selfckpt segments{}\n",
               filter.job.empty() ? std::string() : fmt::format(" of job '{}'", filter.job));
    return 0;
  }
  fmt::print("{:>8} {:>10} {:<20} {:>5} {:<12} {:<10} {:<16} {:>12} {:>4}  {}\n", "shmid", "key",
             "job", "rank", "node", "kind", "name", "bytes", "att", "state");
  for (const auto& s : segments) {
    const auto& id = s.header.identity;
    fmt::print("{:>8} {:#10x} {:<20} {:>5} {:<12} {:<10} {:<16} {:>12} {:>4}  {}\n", s.shmid, s.key,
               id.job, id.rank, id.domain, skt::kind_name(id.kind), id.name, s.header.data_bytes,
               s.attached, state_text(s));
  }
  return 0;
}

int inspect(const Filter& filter) {
  const auto segments = selected(filter);
  if (segments.empty()) {
    fmt::print("no matching selfckpt segments\n");
    return 1;
  }
  for (const auto& s : segments) {
    const auto& h = s.header;
    fmt::print("segment {} (key {:#x}): job '{}' rank {}/{} node '{}' {} '{}'\n", s.shmid, s.key,
               h.identity.job, h.identity.rank, h.nranks, h.identity.domain,
               skt::kind_name(h.identity.kind), h.identity.name);
    if (other_version(s)) {
      fmt::print("  segment {} bytes, {} attached; {}\n", h.segment_bytes, s.attached,
                 other_version_text(s));
      continue;
    }
    auto segment = skt::Segment::attach(s.shmid, true);
    if (!segment) continue;
    fmt::print("  data {} bytes, segment {} bytes, {} attached, data digest {:016x}\n",
               h.data_bytes, h.segment_bytes, s.attached,
               skt::crc64(segment->data(), h.data_bytes));
    if (h.identity.kind != skt::SegmentKind::checkpoint) continue;
    skt::CheckpointInfo info;
    if (!skt::decode_checkpoint_info(segment->base(), &info)) {
      fmt::print("  checkpoint description: corrupted (CRC mismatch)\n");
      continue;
    }
    std::string members;
    for (std::uint32_t i = 0; i < info.group_size; ++i) {
      members += fmt::format("{}{}", i == 0 ? "" : " ", info.members[i]);
    }
    fmt::print(
        "  group {} of {}, member {} of {} (ranks {}), scheme {} parity {}, chunk {} bytes, "
        "{} rows\n",
        info.group, info.groups, info.member, info.group_size, members,
        skt::enc::scheme_name(static_cast<skt::enc::Scheme>(info.scheme)), info.parity,
        info.chunk_bytes, info.rows);
    fmt::print("  workspace {} bytes ({} of private objects), layout {:016x}; {}\n",
               info.stage_bytes + info.regions_bytes, info.stage_bytes, info.layout_hash,
               state_text(s));
    // The lineage is the id of the run that started the job, whose high bits are its clock.
    const auto started = static_cast<std::time_t>(info.lineage / 1'000'000'000);
    fmt::print("  lineage {:016x}: of the job's start at {:%Y-%m-%d %H:%M:%S} UTC\n", info.lineage,
               fmt::gmtime(started));
    std::string why;
    const auto view = skt::read_checkpoint_view(*segment, &why);
    if (!view) {
      fmt::print("  regions: unreadable: {}\n", why);
      continue;
    }
    for (const auto& e : view->layout.entries) {
      fmt::print("  {} '{}': {} bytes\n", e.staged ? "private object" : "region", e.name, e.bytes);
    }
    for (const std::uint64_t epoch : {std::uint64_t{0}, std::uint64_t{1}}) {
      const skt::DigestSlot slot{segment->data() + view->areas.digest_offset(epoch)};
      const auto d = slot.state();
      fmt::print("  digest slot {}: {}\n", epoch,
                 d ? fmt::format("epoch {}, data {}, checksum {}", d->epoch,
                                 d->data ? "complete" : "incomplete",
                                 d->parity ? "complete" : "incomplete")
                   : std::string("empty"));
    }
  }
  return 0;
}

int clean(const Filter& filter, bool force) {
  int removed = 0, kept = 0;
  for (const auto& s : selected(filter)) {
    if (s.attached > 0 && !force) {
      // A process still uses it: a rank of a running launch, or one that outlived its launcher.
      fmt::print(
          "left {} segment '{}' of job '{}' rank {} on node '{}': attached by {} "
          "process{} (--force removes it anyway; it goes when they detach)\n",
          skt::kind_name(s.header.identity.kind), s.header.identity.name, s.header.identity.job,
          s.header.identity.rank, s.header.identity.domain, s.attached,
          s.attached == 1 ? "" : "es");
      ++kept;
      continue;
    }
    if (!skt::remove_segment(s.shmid)) continue;
    ++removed;
    fmt::print("removed {} segment '{}' of job '{}' rank {} on node '{}' ({} bytes)\n",
               skt::kind_name(s.header.identity.kind), s.header.identity.name,
               s.header.identity.job, s.header.identity.rank, s.header.identity.domain,
               s.header.data_bytes);
  }
  fmt::print("{} segment{} removed{}\n", removed, removed == 1 ? "" : "s",
             kept == 0 ? "" : fmt::format(", {} left attached", kept));
  return kept == 0 ? 0 : 1;
}

// Makes sure the job's reserves on this node can hold segments of these data sizes: each size
// one unclaimed reserve, made (every page written) where none is there yet.
int reserve(const std::string& job, std::string node, const std::vector<std::size_t>& sizes,
            bool huge_pages) {
  if (node.empty()) node = skt::default_node_name();
  auto present = skt::list_reserves(job, node);
  int made = 0;
  std::size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::size_t size : sizes) {
    const auto it = std::find_if(present.begin(), present.end(),
                                 [&](const auto& r) { return r.header.data_bytes == size; });
    if (it != present.end()) {
      present.erase(it);
      continue;
    }
    const skt::Segment segment = skt::create_reserve(job, node, size, huge_pages);
    bytes += segment.header().segment_bytes;
    ++made;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("node {}: {} reserve{} of job '{}' made ({:.1f} MiB in {:.3f} s), {} already there\n",
             node, made, made == 1 ? "" : "s", job, static_cast<double>(bytes) / (1 << 20), seconds,
             static_cast<int>(sizes.size()) - made);
  return 0;
}

int room() {
  const std::optional<skt::RoomForSegments> room = skt::room_for_segments();
  if (!room) {
    fmt::print(stderr, "skt-shm room: the kernel does not say how much memory is available\n");
    return 1;
  }
  fmt::print("{} bytes new segments can take on this node ({:.1f} GiB, limited by {})\n",
             room->bytes, static_cast<double>(room->bytes) / (1 << 30), room->limited_by);
  return 0;
}

void add_filter(CLI::App* command, Filter& filter, bool job_required) {
  auto* job =
      command->add_option("--job", filter.job, "job tag (SKT_JOB); covers its sub-jobs TAG+*");
  if (job_required) job->required();
  job->check([](const std::string& v) {
    return skt::valid_job_tag(v) ? std::string() : "not a valid job tag: " + v;
  });
  command->add_option("--node", filter.node, "only segments of this node (failure domain)");
  command->add_option("--rank", filter.rank, "only segments of this rank");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "skt-shm: list, inspect and remove the selfckpt shared-memory segments of the calling user.\n"
      "Segments of other users are never shown nor touched."};
  app.require_subcommand(1);
  Filter filter;
  auto* list_cmd = app.add_subcommand("list", "one line per segment, with the protocol state");
  add_filter(list_cmd, filter, false);
  auto* inspect_cmd =
      app.add_subcommand("inspect", "headers, group, layout, state and data digest of a job");
  add_filter(inspect_cmd, filter, true);
  auto* clean_cmd = app.add_subcommand(
      "clean",
      "remove a job's segments (all, or one node's); segments still attached by a process are "
      "left unless --force (exit 1 then)");
  add_filter(clean_cmd, filter, true);
  clean_cmd
      ->add_option("--exactly", filter.exactly,
                   "only these job tags (comma separated; --job's and these), none of their "
                   "sub-jobs unnamed: skt-run names the sub-jobs its own ranks reported, so that "
                   "another job whose tag happens to begin with TAG+ is left alone")
      ->delimiter(',');
  bool force = false;
  clean_cmd->add_flag("--force", force,
                      "remove attached segments too (they go when their processes detach)");
  int show = 10;
  auto* verify_cmd = app.add_subcommand(
      "verify",
      "scrub a job's committed checkpoint: check every block of the committed copies (B) and "
      "checksums (C) against the CRCs kept for them, and recompute the checksums from the copies, "
      "reporting silent corruption and where it is; --repair rebuilds it. Exit status 0: clean "
      "(or repaired); 1: corruption found; 2: some group could not be verified (members on other "
      "nodes, no checkpoint yet, or a checkpoint being written). When the job spans nodes, run it "
      "with one process per node: mpirun --map-by ppr:1:node skt-shm verify --job TAG");
  verify_cmd->add_option("--job", filter.job, "job tag (SKT_JOB); covers its sub-jobs TAG+*")
      ->required()
      ->check([](const std::string& v) {
        return skt::valid_job_tag(v) ? std::string() : "not a valid job tag: " + v;
      });
  verify_cmd->add_option("--show", show, "corrupt rows to describe per group (default 10)")
      ->check(CLI::NonNegativeNumber);
  bool repair = false;
  verify_cmd->add_flag("--repair", repair,
                       "rebuild the damaged items of the committed copies and checksums from the "
                       "rest of their rows (as recovery would), then verify again; the job must "
                       "be stopped");
  verify_cmd->add_option("--node", filter.node,
                         "read only this node's segments: each process of a run on virtual nodes "
                         "of one host stands for one node (default: SKT_NODE, if set)");
  auto* reserve_cmd = app.add_subcommand(
      "reserve",
      "set memory aside on this node for segments of a job that a relaunch may place here (a "
      "warm spare, which skt-run makes of its spare nodes): one reserve per --bytes, each page "
      "in memory and written; a rank that needs a segment of that size on this node takes one "
      "over instead of making its own. Reserves already there count; skt-shm clean --job "
      "removes them");
  std::vector<std::size_t> reserve_sizes;
  bool huge_pages = false;
  reserve_cmd->add_option("--job", filter.job, "job tag (SKT_JOB)")
      ->required()
      ->check([](const std::string& v) {
        return skt::valid_job_tag(v) ? std::string() : "not a valid job tag: " + v;
      });
  reserve_cmd
      ->add_option("--bytes", reserve_sizes,
                   "the data size of each segment to hold, as skt-shm list shows it (repeat, or "
                   "comma separated)")
      ->required()
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 50));
  reserve_cmd->add_option("--node", filter.node,
                          "the node (failure domain) the reserves are for (default: SKT_NODE, "
                          "SLURMD_NODENAME or the host name, as the library takes it)");
  reserve_cmd->add_flag("--huge-pages", huge_pages,
                        "reserves of huge pages, for a job run with SKT_HUGE_PAGES=1");
  auto* room_cmd = app.add_subcommand(
      "room",
      "the bytes new segments can take on this node now, as a rank's start judges it: "
      "MemAvailable less the pages not yet written of every attached segment, and the room of a "
      "memory cgroup limit holding this process, each less 1/32 of the memory kept free (skt-run "
      "asks it of the live nodes before doubling ranks up on them)");
  room_cmd->add_option("--node", filter.node,
                       "the virtual node asked for (virtual nodes of one host share its memory)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (verify_cmd->parsed()) {
    if (filter.node.empty() && std::getenv("SKT_NODE") != nullptr)
      filter.node = std::getenv("SKT_NODE");
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int code = 1;
    try {
      code = skt::tools::verify_job([&](const skt::SegmentHeader& h) { return filter.matches(h); },
                                    show, repair);
    } catch (const std::exception& e) {
      fmt::print(stderr, "skt-shm verify: {}\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return code;
  }
  for (const auto& tag : filter.exactly) {
    if (!skt::valid_job_tag(tag) || !skt::job_covers(filter.job, tag)) {
      fmt::print(stderr, "skt-shm: --exactly '{}' is not job '{}' or one of its sub-jobs\n", tag,
                 filter.job);
      return 2;
    }
  }
  if (!filter.exactly.empty() &&
      std::find(filter.exactly.begin(), filter.exactly.end(), filter.job) == filter.exactly.end()) {
    filter.exactly.push_back(filter.job);
  }
  try {
    if (list_cmd->parsed()) return list(filter);
    if (inspect_cmd->parsed()) return inspect(filter);
    if (room_cmd->parsed()) return room();
    if (reserve_cmd->parsed()) return reserve(filter.job, filter.node, reserve_sizes, huge_pages);
    return clean(filter, force);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-shm: {}\n", e.what());
    return 1;
  }
}
