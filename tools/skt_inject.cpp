// skt-inject: failures on demand for a job running on virtual nodes of this host.
//   skt-inject node NAME --job TAG   kill every process of the job on node NAME, destroy the node's
//                                    memory (the job's segments there) and mark it dead for
//                                    skt-run's local probe
//   skt-inject rank R --job TAG      kill the process of rank R only (its memory stays)
//   skt-inject flip --job TAG --rank R --byte N [--bit B] [--area B|C|W|D]
//                                    flip one bit of rank R's committed copy B (default), the
//                                    checksum C of its committed epoch, its workspace W, or the
//                                    other checksum area D: the silent corruption that skt-shm
//                                    verify and recovery must find
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "daemon/probe.hpp"
#include "daemon/process.hpp"
#include "daemon/ranklist.hpp"
#include "daemon/state.hpp"
#include "libselfckpt/internal/names.hpp"
#include "libselfckpt/internal/scrub.hpp"
#include "libselfckpt/internal/segment.hpp"

namespace {

std::map<std::string, std::string> environment_of(const std::filesystem::path& proc) {
  std::ifstream in(proc / "environ", std::ios::binary);
  std::map<std::string, std::string> out;
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

// Processes of this user whose environment has every one of `wanted`.
std::vector<pid_t> processes_with(const std::map<std::string, std::string>& wanted) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    const auto env = environment_of(entry.path());
    bool all = !env.empty();
    for (const auto& [k, v] : wanted) {
      const auto it = env.find(k);
      all = all && it != env.end() && it->second == v;
    }
    if (all) out.push_back(pid);
  }
  return out;
}

int kill_all(const std::vector<pid_t>& pids, const std::string& what) {
  for (const pid_t pid : pids)
    ::kill(pid, SIGKILL);
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  fmt::print("{:%H:%M:%S}.{:03d} killed {} process{} of {}\n",
             fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms, pids.size(),
             pids.size() == 1 ? "" : "es", what);
  return pids.empty() ? 1 : 0;
}

std::string shm_tool() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto beside = self.parent_path() / "skt-shm";
  return !ec && ::access(beside.c_str(), X_OK) == 0 ? beside.string()
                                                    : skt::run::find_program("skt-shm");
}

struct FlipTarget {
  std::string job;
  int rank = 0;
  std::uint64_t byte = 0;
  int bit = 0;
  std::string area = "B";
};

// Where byte `at` of a copy (or of the workspace, counted the same way) belongs.
std::string copy_byte_owner(const skt::StreamLayout& layout, std::uint64_t at) {
  const bool staged = at < layout.copy_regions_offset();
  const std::uint64_t offset = staged ? at : at - layout.copy_regions_offset();
  for (const auto& e : layout.entries) {
    if (e.staged != staged || offset < e.offset || offset >= e.offset + e.bytes) continue;
    return staged ? fmt::format("private object '{}'", e.name)
                  : fmt::format("region '{}' byte {}", e.name, offset - e.offset);
  }
  return staged ? "the staged objects' padding" : "the gap between regions";
}

std::optional<skt::Segment> segment_of(const FlipTarget& t, skt::SegmentKind kind) {
  for (const auto& listing : skt::list_own_segments()) {
    const auto& id = listing.header.identity;
    if (id.kind == kind && id.job == t.job && id.rank == t.rank) {
      return skt::Segment::attach(listing.shmid, false);
    }
  }
  return std::nullopt;
}

// Flips a bit of rank t.rank's committed copy B, the checksum C of the committed epoch, its
// workspace W (a byte counted as in B), or (self mode) the other checksum area D.
int flip(const FlipTarget& t) {
  auto segment = segment_of(t, skt::SegmentKind::checkpoint);
  if (!segment) {
    fmt::print(stderr, "skt-inject: no checkpoint segment of job {} rank {} here\n", t.job, t.rank);
    return 1;
  }
  std::string why;
  const auto view = skt::read_checkpoint_view(*segment, &why);
  if (!view) {
    fmt::print(stderr, "skt-inject: rank {}'s checkpoint segment is unusable: {}\n", t.rank, why);
    return 1;
  }
  if (!view->state || view->state->committed < 0) {
    fmt::print(stderr, "skt-inject: rank {} of job {} has no committed checkpoint\n", t.rank,
               t.job);
    return 1;
  }
  const auto epoch = static_cast<std::uint64_t>(view->state->committed);
  const bool self = static_cast<skt::Mode>(view->info.mode) == skt::Mode::self;
  std::byte* base = nullptr;
  std::uint64_t size = 0;
  std::string what;
  std::optional<skt::Segment> workspace;
  if (t.area == "B") {
    base = segment->data() + view->areas.copy_offset(view->areas.copy_of_epoch(epoch));
    size = view->layout.copy_bytes();
    what = fmt::format("committed copy (B) of epoch {}", epoch);
  } else if (t.area == "C" || t.area == "D") {
    if (t.area == "D" && !self) {
      fmt::print(stderr, "skt-inject: job {} keeps no D (mode {})\n", t.job,
                 skt::mode_name(static_cast<skt::Mode>(view->info.mode)));
      return 1;
    }
    const std::uint64_t of = t.area == "C" ? epoch : epoch + 1;
    base = segment->data() + view->areas.checksum_of_epoch(of);
    size = view->geometry.parity_bytes();
    what = t.area == "C" ? fmt::format("checksum (C) of epoch {}", epoch)
                         : fmt::format("other checksum area (D, epoch {}'s next)", epoch);
  } else {
    workspace = segment_of(t, skt::SegmentKind::workspace);
    skt::ArenaRecord record;
    if (!workspace || !skt::decode_arena_record(workspace->base(), &record)) {
      fmt::print(stderr, "skt-inject: no readable workspace segment of job {} rank {} here\n",
                 t.job, t.rank);
      return 1;
    }
    size = view->layout.copy_bytes();
    if (t.byte < size) {
      const bool staged = t.byte < view->layout.copy_regions_offset();
      base = staged ? workspace->data() + record.stage_offset
                    : workspace->data() - view->layout.copy_regions_offset();
    }
    what = "workspace (W)";
  }
  if (t.byte >= size) {
    fmt::print(stderr, "skt-inject: --byte {} is beyond rank {}'s {} ({} bytes)\n", t.byte, t.rank,
               what, size);
    return 1;
  }
  base[t.byte] ^= std::byte{static_cast<unsigned char>(1u << t.bit)};
  const bool data = t.area == "B" || t.area == "W";
  fmt::print("flipped bit {} of byte {} of rank {}'s {}{}\n", t.bit, t.byte, t.rank, what,
             data ? " (" + copy_byte_owner(view->layout, t.byte) + ")" : std::string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "skt-inject: kill a virtual node (its processes and its memory) or one rank of a job, or\n"
      "corrupt one bit of a rank's memory"};
  app.require_subcommand(1);
  std::string job, node, registry;
  int rank = -1;
  auto job_check = [](const std::string& v) {
    return skt::valid_job_tag(v) ? std::string() : "not a valid job tag: " + v;
  };
  auto* node_cmd = app.add_subcommand(
      "node", "kill every process of the job on a node, destroy its memory, mark it dead");
  node_cmd->add_option("name", node, "the virtual node (SKT_NODE)")
      ->required()
      ->check([](const std::string& v) {
        return skt::run::valid_node_name(v) ? std::string() : "not a valid node name: " + v;
      });
  node_cmd->add_option("--job", job, "job tag (SKT_JOB)")->required()->check(job_check);
  node_cmd->add_option("--registry", registry,
                       "the local probe's registry (default: the job's skt-run state directory's "
                       "registry/, or SKT_RUN_REGISTRY)");
  auto* rank_cmd = app.add_subcommand("rank", "kill one rank's process; its memory stays");
  rank_cmd->add_option("rank", rank, "rank in MPI_COMM_WORLD")
      ->required()
      ->check(CLI::NonNegativeNumber);
  rank_cmd->add_option("--job", job, "job tag (SKT_JOB)")->required()->check(job_check);
  FlipTarget target;
  auto* flip_cmd = app.add_subcommand(
      "flip",
      "flip one bit of a rank's committed copy B (or checksum C, workspace W, other "
      "checksum area D), as silent corruption");
  flip_cmd->add_option("--job", target.job, "job tag (SKT_JOB)")->required()->check(job_check);
  flip_cmd->add_option("--rank", target.rank, "rank in MPI_COMM_WORLD")
      ->required()
      ->check(CLI::NonNegativeNumber);
  flip_cmd
      ->add_option("--byte", target.byte,
                   "byte offset in the area (W counts its bytes as B does: private objects, then "
                   "regions)")
      ->required();
  flip_cmd->add_option("--bit", target.bit, "bit of that byte")->check(CLI::Range(0, 7));
  flip_cmd
      ->add_option("--area", target.area,
                   "B (committed copy, default), C (its checksum), W (workspace) or D (the other "
                   "checksum area, self mode)")
      ->check(CLI::IsMember({"B", "C", "W", "D"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*flip_cmd) return flip(target);
  if (*rank_cmd) {
    return kill_all(
        processes_with({{"SKT_JOB", job}, {"OMPI_COMM_WORLD_RANK", std::to_string(rank)}}),
        fmt::format("rank {} of job {}", rank, job));
  }
  const std::string tool = shm_tool();
  if (tool.empty()) {
    fmt::print(stderr, "skt-inject: skt-shm not found: node {}'s segments cannot be removed\n",
               node);
    return 1;
  }
  const auto processes = processes_with({{"SKT_JOB", job}, {"SKT_NODE", node}});
  const auto listed =
      skt::run::capture({tool, "list", "--job", job, "--node", node}, {{"SKT_LOG", "off"}});
  const bool segments = listed.out.find(" 0x") != std::string::npos;
  if (processes.empty() && !segments) {
    // A mark on a node the job does not use would make a later job replace a healthy node.
    fmt::print(stderr,
               "skt-inject: no process and no segment of job {} on node {}: nothing done, "
               "the node is not marked dead\n",
               job, node);
    return 1;
  }
  // An skt-run given --state-dir reads its registry there, not in the default place: said below.
  const bool unread_default = registry.empty() && std::getenv("SKT_RUN_REGISTRY") == nullptr &&
                              !std::filesystem::exists(skt::run::default_state_dir(job) + "/state");
  if (registry.empty()) registry = skt::run::default_registry(job);
  // Marked dead first: a daemon that sees the run fail must find the node dead.
  skt::run::mark_dead(registry, node);
  const int code = kill_all(processes, fmt::format("job {} on node {}", job, node));
  const auto cleaned = skt::run::capture({tool, "clean", "--job", job, "--node", node, "--force"},
                                         {{"SKT_LOG", "off"}});
  const auto last = cleaned.out.rfind('\n', cleaned.out.size() > 1 ? cleaned.out.size() - 2 : 0);
  fmt::print("node {}'s memory destroyed: {}", node,
             cleaned.out.substr(last == std::string::npos ? 0 : last + 1));
  fmt::print("node {} marked dead in {} (skt-run --revive {} --job {} undoes it)\n", node, registry,
             node, job);
  if (unread_default) {
    fmt::print(stderr,
               "skt-inject: no skt-run keeps job {}'s state in {}: one given --state-dir DIR "
               "reads DIR/registry (give --registry DIR/registry), else it relaunches on {}\n",
               job, skt::run::default_state_dir(job), node);
  }
  return cleaned.code != 0 || (code != 0 && !segments) ? 1 : 0;
}
