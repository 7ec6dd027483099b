#include "daemon/launch.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "daemon/ranklist.hpp"

extern char** environ;

namespace skt::run {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The settings a rank reads, forwarded by name to every rank, wherever its launcher's daemon
// starts it and with whatever environment: the job's identity, its launch count, where to report,
// and the SKT_*, OPENBLAS_* and OMP_* variables of this environment. Not SKT_NODE, which is each
// node's own, and not skt-run's own SKT_RUN_*.
std::vector<std::string> forwarded_variables() {
  std::vector<std::string> out{"SKT_JOB", "SKT_RESTART", "SKT_MONITOR", "SKT_MONITOR_KEY"};
  for (char** e = ::environ; *e != nullptr; ++e) {
    const std::string name = std::string(*e).substr(0, std::string(*e).find('='));
    const bool skt =
        name.rfind("SKT_", 0) == 0 && name != "SKT_NODE" && name.rfind("SKT_RUN_", 0) != 0;
    if ((skt || name.rfind("OPENBLAS_", 0) == 0 || name.rfind("OMP_", 0) == 0) &&
        std::find(out.begin(), out.end(), name) == out.end()) {
      out.push_back(name);
    }
  }
  return out;
}

}  // namespace

std::string shell_quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain =
        !a.empty() &&
        a.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
            std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (const char c : a)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

std::string locate_tool(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& candidate :
         {self.parent_path() / name, self.parent_path() / ".." / "tools" / name}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal();
    }
  }
  return find_program(name);
}

Plan plan_from(Options& o, Log& log) {
  o.directory = std::filesystem::current_path().string();
  const char* slurm_nodes = std::getenv("SLURM_JOB_NODELIST");
  const bool in_slurm = slurm_nodes != nullptr && *slurm_nodes != '\0';
  std::vector<std::string> all;
  if (!o.nodes.empty() + !o.hostfile.empty() > 1)
    throw std::invalid_argument("give --nodes or --hostfile, not both");
  if (!o.nodes.empty()) {
    all = parse_node_list(o.nodes, "--nodes");
  } else if (!o.hostfile.empty()) {
    all = parse_node_list(read_file(o.hostfile), o.hostfile);
  } else if (in_slurm) {
    const auto r = capture({"scontrol", "show", "hostnames", slurm_nodes});
    if (r.code != 0)
      throw std::runtime_error(
          fmt::format("scontrol show hostnames {} failed (exit {})", slurm_nodes, r.code));
    all = parse_node_list(r.out, "SLURM_JOB_NODELIST");
    log("nodes from the Slurm allocation {}: {}", slurm_nodes, fmt::join(all, ","));
  } else {
    throw std::invalid_argument(
        "no nodes: give --nodes LIST or --hostfile FILE, or run inside a Slurm allocation");
  }
  Plan plan;
  std::vector<std::string> active = all;
  if (!o.spare_nodes.empty()) {
    if (o.spares) throw std::invalid_argument("give --spares or --spare-nodes, not both");
    plan.spares = parse_node_list(o.spare_nodes, "--spare-nodes");
    for (const auto& s : plan.spares) {
      const auto it = std::find(active.begin(), active.end(), s);
      if (it != active.end())
        active.erase(it);
      else if (o.nodes.empty() && o.hostfile.empty())
        throw std::invalid_argument("spare node '" + s + "' is not in the allocation");
    }
  } else if (o.spares) {
    if (*o.spares >= static_cast<int>(all.size())) {
      throw std::invalid_argument(
          fmt::format("--spares {}: there are {} nodes, and at least one must run the job",
                      *o.spares, all.size()));
    }
    plan.spares.assign(all.end() - *o.spares, all.end());
    active.resize(all.size() - static_cast<std::size_t>(*o.spares));
  }
  if (active.empty())
    throw std::invalid_argument("every node is a spare: none is left to run the job");
  plan.ranklist = initial_ranklist(active, o.ranks_per_node);
  plan.local = o.launch == "local" || (o.launch == "auto" && !in_slurm && o.hostfile.empty());
  if (o.launch != "auto" && o.launch != "local" && o.launch != "hosts") {
    throw std::invalid_argument("--launch '" + o.launch + "': expected auto, local or hosts");
  }
  if (o.job.empty()) {
    const char* id = std::getenv("SLURM_JOB_ID");
    o.job = id != nullptr ? std::string("slurm-") + id
                          : default_job_tag(o.directory, all, o.ranks_per_node, o.command);
  }
  if (o.state_dir.empty()) o.state_dir = default_state_dir(o.job);
  if (o.registry.empty()) {
    o.registry = std::getenv("SKT_RUN_REGISTRY") != nullptr ? default_registry(o.job)
                                                            : o.state_dir + "/registry";
  }
  const std::string probe = o.probe == "auto" ? (in_slurm     ? "slurm"
                                                 : plan.local ? "local"
                                                              : "ping")
                                              : o.probe;
  plan.probe = make_probe(probe, o.registry, o.probe_timeout);
  if (const char* id = std::getenv("SLURM_JOB_ID"); in_slurm && id != nullptr) plan.slurm_job = id;
  return plan;
}

std::vector<std::string> launcher_prefix(const Options& o,
                                         const std::vector<std::string>* ranklist) {
  std::vector<std::string> argv{o.launcher};
  for (const auto& a : split_words(o.launcher_args))
    argv.push_back(a);
  if (ranklist != nullptr) {
    argv.insert(argv.end(), {"--host", seq_host_list(*ranklist), "--map-by", "seq", "-n",
                             std::to_string(ranklist->size())});
  }
  return argv;
}

TransportDir::TransportDir(int launch) {
  std::error_code ec;
  if (!std::filesystem::is_directory(base(), ec)) return;
  // Made here, new, 0700 (mkdtemp): never one that another user made in the shared directory
  // beforehand under a name this one could take, which the ranks' transport would then use.
  std::string name = (base() / fmt::format("{}{}.{}.XXXXXX", kPrefix, ::getpid(), launch));
  if (::mkdtemp(name.data()) != nullptr) path_ = name;
}

TransportDir::~TransportDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

EnvChanges TransportDir::environment() const {
  if (path_.empty()) return {};
  return {{kVariable, path_.string()}};
}

void TransportDir::remove_orphans() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + kPrefix.size(), nullptr, 10);
    struct stat owner {};
    if (::lstat(entry.path().c_str(), &owner) != 0 || owner.st_uid != ::geteuid() ||
        !S_ISDIR(owner.st_mode)) {
      continue;  // only this user's own
    }
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      std::filesystem::remove_all(entry.path(), ec);
  }
}
std::filesystem::path TransportDir::base() {
  const char* set = std::getenv(kVariable);
  return set != nullptr && *set != '\0' ? set : "/dev/shm";
}
bool resumes(const std::optional<JobState>& loaded) {
  return loaded && loaded->launches > 0 && !loaded->ranklist.empty() &&
         (loaded->status == "running" || loaded->status == "stopped" || loaded->status == "failed");
}

void resume_plan(const std::vector<std::string>& last_ranklist, const Options& o, Plan& plan,
                 Log& log) {
  std::vector<std::string> given = nodes_of(plan.ranklist);
  given.insert(given.end(), plan.spares.begin(), plan.spares.end());
  const std::string where = !o.nodes.empty()      ? "--nodes"
                            : !o.hostfile.empty() ? o.hostfile
                                                  : "the Slurm allocation";
  Replacement r;
  try {
    r = resume_on_nodes(last_ranklist, given);
  } catch (const OutOfSpares& e) {
    throw OutOfSpares(fmt::format("cannot resume job {} on the nodes of {} ({}): {}", o.job, where,
                                  fmt::join(given, ","), e.what()));
  }
  for (const auto& [from, to] : r.replaced) {
    log("node {} of the last launch is not in {}: its ranks move to {}, and their memory there "
        "counts as lost, as after a node loss{}",
        from, where, to,
        plan.local
            ? ""
            : fmt::format(" (segments it kept stay on it: skt-shm clean --job {} there)", o.job));
  }
  plan.ranklist = r.ranklist;
  plan.spares = r.spares_left;
}

std::string command_change(const JobState& last, const Options& o) {
  const bool moved = last.directory != o.directory;
  return fmt::format("job {} last ran `{}`{}, this command is `{}`{}", o.job,
                     shell_quoted(last.command), moved ? " in " + last.directory : "",
                     shell_quoted(o.command), moved ? " in " + o.directory : "");
}

std::vector<std::string> launch_command(const Options& o, const Plan& plan) {
  std::vector<std::string> argv = launcher_prefix(o, plan.local ? nullptr : &plan.ranklist);
  for (const auto& name : forwarded_variables())
    argv.insert(argv.end(), {"-x", name});
  if (!plan.local) {
    // Ranks doubled up on a node, no spare being left, are more than the slots the allocation or
    // the host list gave it (Open MPI refuses that unless told): the node's processors are the
    // operator's to judge, who can end such a job instead with --stop-at-last-spare.
    if (most_ranks_on_a_node(plan.ranklist) > o.ranks_per_node &&
        std::find(argv.begin(), argv.end(), "--oversubscribe") == argv.end()) {
      argv.insert(argv.begin() + 1, "--oversubscribe");
    }
    argv.insert(argv.end(), o.command.begin(), o.command.end());
    return argv;
  }
  // Virtual nodes of this host: an app context per run of consecutive ranks on one node, which
  // names it in SKT_NODE. They share the host's cores, so more ranks than cores is expected, not a
  // mistake.
  argv.push_back("--oversubscribe");
  for (const auto& [node, count] : runs_of_ranks(plan.ranklist)) {
    argv.insert(argv.end(), {"-n", std::to_string(count), "env", "SKT_NODE=" + node});
    argv.insert(argv.end(), o.command.begin(), o.command.end());
    argv.push_back(":");
  }
  argv.pop_back();
  return argv;
}

void write_ranklist(const std::string& path, const std::vector<std::string>& ranklist) {
  std::string text;
  for (std::size_t r = 0; r < ranklist.size(); ++r)
    text += fmt::format("{} {}\n", r, ranklist[r]);
  write_whole(path, text);
}

const char* const kShmemHugePages = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

std::optional<std::string> shared_memory_huge_pages_off() {
  std::ifstream file(kShmemHugePages);
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  const std::string chosen = line.substr(open + 1, close - open - 1);
  if (chosen != "never" && chosen != "deny") return std::nullopt;
  return "shmem_enabled: " + chosen;
}

}  // namespace skt::run
