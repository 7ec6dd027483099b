// skt-inject: failures on demand for a job running on virtual nodes of this host.
//   skt-inject node NAME --job TAG   kill every process of the job on node NAME, destroy the node's
//                                    memory (the job's segments there) and mark it dead for
//                                    skt-run's local probe
//   skt-inject rank R --job TAG      kill the process of rank R only (its memory stays)
//   skt-inject flip --job TAG --rank R --byte N [--bit B] [--checksum]
//                                    flip one bit of rank R's committed copy (or checksum): the
//                                    silent corruption that skt-shm verify must find
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "daemon/probe.hpp"
#include "daemon/process.hpp"
#include "daemon/ranklist.hpp"
#include "libselfckpt/src/scrub.hpp"
#include "libselfckpt/src/segment.hpp"

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
  bool checksum = false;
};

// Where byte `at` of a committed copy belongs.
std::string copy_byte_owner(const skt::WorkspaceLayout& layout, std::uint64_t at) {
  for (std::size_t i = 0; i < layout.regions.size(); ++i) {
    const std::uint64_t begin = layout.copy_offset[i];
    if (at >= begin && at < begin + layout.regions[i].bytes) {
      return fmt::format("region '{}' byte {}", layout.regions[i].name, at - begin);
    }
  }
  return "padding between regions";
}

int flip(const FlipTarget& t) {
  for (const auto& listing : skt::list_own_segments()) {
    const auto& id = listing.header.identity;
    if (id.kind != skt::SegmentKind::checkpoint || id.job != t.job || id.rank != t.rank) continue;
    std::string why;
    auto segment = skt::Segment::attach(listing.shmid, false, &why);
    std::optional<skt::CheckpointView> view;
    if (segment) view = skt::read_checkpoint_view(*segment, &why);
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
    const std::uint64_t size = t.checksum ? view->geometry.parity_bytes() : view->layout.copy_bytes;
    if (t.byte >= size) {
      fmt::print(stderr, "skt-inject: --byte {} is beyond rank {}'s {} ({} bytes)\n", t.byte,
                 t.rank, t.checksum ? "checksum" : "committed copy", size);
      return 1;
    }
    std::byte* base =
        segment->data() + (t.checksum ? view->areas.checksum_of_epoch(epoch)
                                      : view->areas.copy_offset(view->areas.copy_of_epoch(epoch)));
    base[t.byte] ^= std::byte{static_cast<unsigned char>(1u << t.bit)};
    fmt::print("flipped bit {} of byte {} of rank {}'s committed {} of epoch {}{}\n", t.bit, t.byte,
               t.rank, t.checksum ? "checksum (C)" : "copy (B)", view->state->committed,
               t.checksum ? std::string() : " (" + copy_byte_owner(view->layout, t.byte) + ")");
    return 0;
  }
  fmt::print(stderr, "skt-inject: no checkpoint segment of job {} rank {} here\n", t.job, t.rank);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "skt-inject: kill a virtual node (its processes and its memory) or one rank of a job, or\n"
      "corrupt one bit of a committed checkpoint"};
  app.require_subcommand(1);
  std::string job, node, registry = skt::run::default_registry();
  int rank = -1;
  auto job_check = [](const std::string& v) {
    return skt::run::valid_node_name(v) ? std::string() : "not a valid job tag: " + v;
  };
  auto* node_cmd = app.add_subcommand(
      "node", "kill every process of the job on a node, destroy its memory, mark it dead");
  node_cmd->add_option("name", node, "the virtual node (SKT_NODE)")
      ->required()
      ->check([](const std::string& v) {
        return skt::run::valid_node_name(v) ? std::string() : "not a valid node name: " + v;
      });
  node_cmd->add_option("--job", job, "job tag (SKT_JOB)")->required()->check(job_check);
  node_cmd->add_option("--registry", registry, "the local probe's registry (SKT_RUN_REGISTRY)");
  auto* rank_cmd = app.add_subcommand("rank", "kill one rank's process; its memory stays");
  rank_cmd->add_option("rank", rank, "rank in MPI_COMM_WORLD")
      ->required()
      ->check(CLI::NonNegativeNumber);
  rank_cmd->add_option("--job", job, "job tag (SKT_JOB)")->required()->check(job_check);
  FlipTarget target;
  auto* flip_cmd = app.add_subcommand(
      "flip", "flip one bit of a rank's committed copy B (or checksum C), as silent corruption");
  flip_cmd->add_option("--job", target.job, "job tag (SKT_JOB)")->required()->check(job_check);
  flip_cmd->add_option("--rank", target.rank, "rank in MPI_COMM_WORLD")
      ->required()
      ->check(CLI::NonNegativeNumber);
  flip_cmd->add_option("--byte", target.byte, "byte offset in the copy (or checksum)")->required();
  flip_cmd->add_option("--bit", target.bit, "bit of that byte")->check(CLI::Range(0, 7));
  flip_cmd->add_flag("--checksum", target.checksum, "flip a bit of the checksum C instead of B");
  CLI11_PARSE(app, argc, argv);

  if (*flip_cmd) return flip(target);
  if (*rank_cmd) {
    return kill_all(
        processes_with({{"SKT_JOB", job}, {"OMPI_COMM_WORLD_RANK", std::to_string(rank)}}),
        fmt::format("rank {} of job {}", rank, job));
  }
  // Marked dead first: a daemon that sees the run fail must find the node dead.
  skt::run::mark_dead(registry, node);
  const int code = kill_all(processes_with({{"SKT_JOB", job}, {"SKT_NODE", node}}),
                            fmt::format("job {} on node {}", job, node));
  const std::string tool = shm_tool();
  if (tool.empty()) {
    fmt::print(stderr, "skt-inject: skt-shm not found: node {}'s segments are left\n", node);
    return 1;
  }
  const auto cleaned =
      skt::run::capture({tool, "clean", "--job", job, "--node", node}, {{"SKT_LOG", "off"}});
  const auto last = cleaned.out.rfind('\n', cleaned.out.size() > 1 ? cleaned.out.size() - 2 : 0);
  fmt::print("node {}'s memory destroyed: {}", node,
             cleaned.out.substr(last == std::string::npos ? 0 : last + 1));
  fmt::print("node {} marked dead in {}\n", node, registry);
  return code != 0 || cleaned.code != 0 ? 1 : 0;
}
