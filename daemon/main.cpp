// skt-run: launches an MPI program on a ranklist and keeps it going without a human: when a run
// fails or hangs, it probes the nodes, swaps each dead node for a spare (healthy ranks stay where
// their memory is) and relaunches, until the program succeeds or cannot go on. What it knows of a
// job lives in the job's state directory, so that the same command resumes a job it stopped.
#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include "daemon/output.hpp"
#include "daemon/probe.hpp"
#include "daemon/process.hpp"
#include "daemon/ranklist.hpp"
#include "daemon/state.hpp"
#include "daemon/watch.hpp"
#include "libselfckpt/src/job_tag.hpp"
#include "libselfckpt/src/monitor_wire.hpp"

extern char** environ;

namespace skt::run {
namespace {

// skt-run's own exit codes, beyond the program's 0, 2, 3 and 4 which it passes on.
constexpr int kExitUsage = 2;
constexpr int kExitOutOfSpares = 5;
constexpr int kExitRestartBudget = 6;
constexpr int kExitLaunchFailed = 7;
constexpr int kExitStuckAfterWork = 8;
constexpr int kExitStalledAgain = 9;

// A job tag leaves room for the sub-jobs a program derives from it (skt-hpl's TAG+t12).
constexpr std::size_t kMaxJobTag = 48;

// A signal to skt-run (SIGINT, SIGTERM, SIGHUP) is written to this pipe, which the run's loop
// watches.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal = sig;
  const char byte = 1;
  [[maybe_unused]] const auto n = ::write(g_signal_pipe[1], &byte, 1);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Log {
 public:
  template <class... Args>
  void operator()(fmt::format_string<Args...> format, Args&&... args) {
    const auto now = std::chrono::system_clock::now();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    output::write(
        STDERR_FILENO,
        fmt::format("[skt-run {:%H:%M:%S}.{:03d} +{:.3f}s] {}\n",
                    fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms,
                    seconds_since(start_), fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  Clock::time_point start_ = Clock::now();
};

struct Options {
  std::string nodes, hostfile, spare_nodes;
  std::optional<int> spares;
  int ranks_per_node = 1;
  std::string job;
  std::string launch = "auto";
  std::string launcher = "mpirun";
  std::string launcher_args;
  std::string probe = "auto";
  std::string registry;
  int max_restarts = 5;
  double backoff = 0;
  std::string ranklist_out;
  std::string shm_tool;
  std::string state_dir;
  std::string revive;
  std::string monitor_host;
  double silence = WatchLimits{}.silence;
  double startup = WatchLimits{}.startup;
  double progress_floor = WatchLimits{}.progress_floor;
  std::optional<double> hang_timeout;
  double probe_interval = 5;
  double probe_timeout = 10;
  bool dry_run = false;
  bool fresh_if_unrecoverable = false;
  bool new_command = false;
  bool warm_spares = true;
  std::vector<std::string> command;
  std::string directory;  // where skt-run was started (plan_from)
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// For display only: the command as a shell would need it quoted.
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

// skt-shm: next to this program (installed), in the build tree's tools/, or in PATH.
// A tool of this project: next to skt-run (installed), in the build tree's tools, or on PATH.
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

std::string locate_shm_tool() {
  return locate_tool("skt-shm");
}

// Settings that make no sense, said in words.
void validate(const Options& o) {
  if (o.nodes.find_first_of(" \t\n") != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("--nodes '{}': node names are separated by commas, without spaces", o.nodes));
  }
  if (o.ranks_per_node < 1) {
    throw std::invalid_argument(
        fmt::format("--ranks-per-node {}: every node runs at least one rank", o.ranks_per_node));
  }
  if (o.spares && *o.spares < 0) {
    throw std::invalid_argument(
        fmt::format("--spares {}: the number of spare nodes cannot be negative", *o.spares));
  }
  if (o.max_restarts < 0) {
    throw std::invalid_argument(fmt::format(
        "--max-restarts {}: the number of relaunches cannot be negative", o.max_restarts));
  }
  for (const auto& [name, value] : {std::pair{"--backoff", o.backoff},
                                    {"--silence", o.silence},
                                    {"--startup", o.startup},
                                    {"--progress-floor", o.progress_floor},
                                    {"--probe-interval", o.probe_interval}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      throw std::invalid_argument(
          fmt::format("{} {}: give a finite number of seconds, 0 or more", name, value));
    }
  }
  if (!(o.probe_timeout > 0) || !std::isfinite(o.probe_timeout)) {
    throw std::invalid_argument(
        fmt::format("--probe-timeout {}: give a positive number of seconds", o.probe_timeout));
  }
  if (o.hang_timeout && (!(*o.hang_timeout > 0) || !std::isfinite(*o.hang_timeout))) {
    throw std::invalid_argument(
        fmt::format("--hang-timeout {}: give a positive number of seconds", *o.hang_timeout));
  }
  if (!o.job.empty() && (!valid_node_name(o.job) || o.job.size() > kMaxJobTag)) {
    throw std::invalid_argument(fmt::format(
        "--job '{}': a job tag is 1 to {} letters, digits, '.', '_' or '-', starting with a "
        "letter or digit (a program's sub-jobs add +NAME to it, up to 63 in all)",
        o.job, kMaxJobTag));
  }
}

struct Plan {
  std::vector<std::string> ranklist;
  std::vector<std::string> spares;
  bool local = true;
  std::unique_ptr<Probe> probe;
  std::string slurm_job;  // the Slurm job skt-run runs in, if any
};

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

// The launcher and its own arguments, then, for real nodes, rank r placed on ranklist[r].
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

// Open MPI's shared-memory transport keeps a 4 MiB file per rank in its backing directory
// (/dev/shm: memory), which only a launcher that ends by itself removes. skt-run ends a failed run
// with SIGKILL, so on virtual nodes, where that directory is this host's, every such run left its
// ranks' files behind. Each launch there gets a directory of its own under it instead, removed
// with what it holds once the launch has ended (ranks still mapping a file keep it until they
// end); those that a killed skt-run left are removed by the next one (remove_orphans).
class TransportDir {
 public:
  TransportDir() = default;
  explicit TransportDir(int launch) {
    std::error_code ec;
    if (!std::filesystem::is_directory(base(), ec)) return;
    // Made here, new, 0700 (mkdtemp): never one that another user made in the shared directory
    // beforehand under a name this one could take, which the ranks' transport would then use.
    std::string name = (base() / fmt::format("{}{}.{}.XXXXXX", kPrefix, ::getpid(), launch));
    if (::mkdtemp(name.data()) != nullptr) path_ = name;
  }
  ~TransportDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TransportDir(const TransportDir&) = delete;
  TransportDir& operator=(const TransportDir&) = delete;

  // The variable that gives the ranks' transport this directory; none without one.
  EnvChanges environment() const {
    if (path_.empty()) return {};
    return {{kVariable, path_.string()}};
  }

  // Removes the directories of skt-runs that no longer exist.
  static void remove_orphans() {
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

 private:
  static constexpr const char* kVariable = "OMPI_MCA_btl_vader_backing_directory";
  static constexpr std::string_view kPrefix = "skt-run.";

  // Open MPI's backing directory: the variable's, else its default.
  static std::filesystem::path base() {
    const char* set = std::getenv(kVariable);
    return set != nullptr && *set != '\0' ? set : "/dev/shm";
  }

  std::filesystem::path path_;
};

// Whether a job with this state resumes from its checkpoint (else it starts afresh).
bool resumes(const std::optional<JobState>& loaded) {
  return loaded && loaded->launches > 0 && !loaded->ranklist.empty() &&
         (loaded->status == "running" || loaded->status == "stopped" || loaded->status == "failed");
}

// A resumed job's layout: its last one on the nodes this command gives, which need not be the
// last launch's (Slurm runs a requeued job on whatever nodes are free, and an operator may edit
// --nodes); each move is logged. Throws OutOfSpares, saying so, when too few nodes are given.
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

// What differs between the last launch of a job and this command (command_changed).
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
    argv.insert(argv.end(), o.command.begin(), o.command.end());
    return argv;
  }
  // Virtual nodes of this host: one app context per node, which names it in SKT_NODE. They share
  // the host's cores, so more ranks than cores is expected, not a mistake.
  argv.push_back("--oversubscribe");
  for (const auto& node : nodes_of(plan.ranklist)) {
    const auto count = std::count(plan.ranklist.begin(), plan.ranklist.end(), node);
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

// What skt-shm list shows of a job on the nodes of a launch.
struct SegmentsFound {
  int count = 0;
  // By rank of the launch, the node that holds the rank's segments; empty where none is seen.
  // Nothing when a rank's segments lie on two nodes, or a rank beyond the launch's has some.
  std::optional<std::vector<std::string>> node_of_rank;
};

// The job's segments on the nodes of `plan`, its spares included (skt-shm list on each: through
// the launcher on other hosts, within --probe-timeout); nothing when that cannot be known.
std::optional<SegmentsFound> find_segments(const Options& o, const Plan& plan) {
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) return std::nullopt;
  const std::vector<std::string> list{tool, "list", "--job", o.job};
  Captured r;
  if (plan.local) {
    r = capture(list, {{"SKT_LOG", "off"}});
  } else {
    // A spare that does not answer must not hide the nodes that do: then without the spares.
    auto nodes = nodes_of(plan.ranklist);
    const std::size_t ranked = nodes.size();
    nodes.insert(nodes.end(), plan.spares.begin(), plan.spares.end());
    for (const std::size_t count : {nodes.size(), ranked}) {
      const std::vector<std::string> asked(nodes.begin(), nodes.begin() + count);
      auto argv = launcher_prefix(o, &asked);
      argv.insert(argv.end(), list.begin(), list.end());
      r = capture_each({argv}, o.probe_timeout).front();
      if ((r.code == 0 && !r.timed_out) || count == ranked) break;
    }
  }
  if (r.code != 0 || r.timed_out) return std::nullopt;
  // A line per segment: shmid, key, job (the tag or one of its sub-jobs, skt-hpl's JOB+t0), rank,
  // node; a heading per node, and the launcher's lines, are not.
  SegmentsFound found;
  found.node_of_rank.emplace(plan.ranklist.size());
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto words = split_words(line);
    if (words.size() < 5 || words[0].find_first_not_of("0123456789") != std::string::npos ||
        !skt::job_covers(o.job, words[2])) {
      continue;
    }
    ++found.count;
    // A warm spare's reserve is no rank's: it says nothing of where ranks are.
    if (words.size() > 5 && words[5] == "reserve") continue;
    if (!found.node_of_rank) continue;
    std::size_t rank = 0;
    const auto [end, ec] =
        std::from_chars(words[3].data(), words[3].data() + words[3].size(), rank);
    auto& seen = *found.node_of_rank;
    if (ec != std::errc() || rank >= seen.size() ||
        (!seen[rank].empty() && seen[rank] != words[4])) {
      found.node_of_rank.reset();
    } else {
      seen[rank] = words[4];
    }
  }
  return found;
}

// Removes the job's segments on every node of the ranklist.
// The tags cleaning up the job removes: its own and the sub-jobs its ranks reported, exactly.
std::string exact_tags(const Options& o, const std::vector<std::string>& sub_jobs) {
  std::string tags = o.job;
  for (const auto& sub : sub_jobs)
    tags += "," + sub;
  return tags;
}

void clean_segments(const Options& o, const Plan& plan, const std::vector<std::string>& sub_jobs,
                    Log& log) {
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) {
    log("skt-shm not found: the job's segments are left; remove them with skt-shm clean --job {}",
        o.job);
    return;
  }
  Captured r;
  // The spares' too: the memory reserved there for the job (warm spares).
  auto nodes = nodes_of(plan.ranklist);
  nodes.insert(nodes.end(), plan.spares.begin(), plan.spares.end());
  const std::vector<std::string> clean{tool,  "clean",     "--job",
                                       o.job, "--exactly", exact_tags(o, sub_jobs)};
  if (plan.local) {
    r = capture(clean, {{"SKT_LOG", "off"}});
  } else {
    std::vector<std::string> argv = launcher_prefix(o, &nodes);
    argv.insert(argv.end(), clean.begin(), clean.end());
    r = capture(argv, {{"SKT_LOG", "off"}});
  }
  log("removed the job's segments on {} node(s){}", nodes.size(),
      r.code == 0 ? "" : fmt::format(" (skt-shm exit {}: some may be left)", r.code));
}

// The data sizes of the segments a spare must hold to take one node's ranks at once: those of
// the node whose segments are largest in all (skt-shm list on the job's nodes). Nothing when
// they cannot be seen.
std::optional<std::vector<std::size_t>> segment_sizes_of_a_node(const Options& o, const Plan& plan,
                                                                const std::string& tool) {
  const std::vector<std::string> list{tool, "list", "--job", o.job};
  Captured r;
  if (plan.local) {
    r = capture(list, {{"SKT_LOG", "off"}});
  } else {
    const auto nodes = nodes_of(plan.ranklist);
    auto argv = launcher_prefix(o, &nodes);
    argv.insert(argv.end(), list.begin(), list.end());
    r = capture_each({argv}, o.probe_timeout).front();
  }
  if (r.code != 0 || r.timed_out) return std::nullopt;
  std::map<std::string, std::vector<std::size_t>> by_node;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto words = split_words(line);
    std::size_t bytes = 0;
    if (words.size() < 8 || words[0].find_first_not_of("0123456789") != std::string::npos ||
        !skt::job_covers(o.job, words[2]) || words[5] == "reserve" ||
        std::from_chars(words[7].data(), words[7].data() + words[7].size(), bytes).ec !=
            std::errc()) {
      continue;
    }
    by_node[words[4]].push_back(bytes);
  }
  std::optional<std::vector<std::size_t>> largest;
  std::size_t most = 0;
  for (auto& [node, sizes] : by_node) {
    const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    if (!largest || total > most) {
      most = total;
      largest = std::move(sizes);
    }
  }
  return largest;
}

// A key for the monitor's datagrams, from the system's random source.
std::string new_monitor_key() {
  std::string key(skt::wire::kKeyBytes, '\0');
  if (::getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size()))
    throw std::system_error(errno, std::generic_category(), "getrandom (the monitor's key)");
  return key;
}

// What a stranger's datagram says, fit for a log line.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text)
    out += c >= 32 && c < 127 ? c : '?';
  return out;
}

constexpr const char* kShmemHugePages = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

// The kernel's setting of huge pages for shared memory, when it gives them to nobody ("never",
// "deny"); nothing when it gives them to the library's segments, or cannot be read.
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

// Warm spares: on each of `spares`, memory for the segments of one node's ranks, made and written
// now (skt-shm reserve), so that ranks relaunched there take it over instead of paying for fresh
// memory in their recovery. Returns what to log.
std::string reserve_on_spares(const Options& o, const Plan& plan,
                              const std::vector<std::string>& spares) {
  const auto start = Clock::now();
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) return "warm spares: skt-shm not found; the spares stay cold";
  const auto sizes = segment_sizes_of_a_node(o, plan, tool);
  if (!sizes) return "warm spares: the job's segments could not be listed; the spares stay cold";
  if (sizes->empty()) return "";  // the run has ended and removed them
  std::string bytes;
  for (const std::size_t b : *sizes)
    bytes += fmt::format("{}{}", bytes.empty() ? "" : ",", b);
  std::vector<std::vector<std::string>> commands;
  for (const auto& spare : spares) {
    std::vector<std::string> argv;
    if (!plan.local) {
      const std::vector<std::string> one{spare};
      argv = launcher_prefix(o, &one);
    }
    argv.insert(argv.end(), {tool, "reserve", "--job", o.job, "--bytes", bytes});
    if (plan.local) argv.insert(argv.end(), {"--node", spare});
    if (const char* huge = std::getenv("SKT_HUGE_PAGES"); huge != nullptr && *huge == '1')
      argv.push_back("--huge-pages");
    commands.push_back(std::move(argv));
  }
  const auto results = capture_each(commands, std::max(60.0, 6 * o.probe_timeout));
  std::vector<std::string> failed;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].code != 0 || results[i].timed_out) failed.push_back(spares[i]);
  }
  const double total =
      static_cast<double>(std::accumulate(sizes->begin(), sizes->end(), std::size_t{0}));
  return fmt::format(
      "warm spares: {:.1f} MiB reserved for {} segment{} on each of {} in {:.2f} s{}",
      total / (1 << 20), sizes->size(), sizes->size() == 1 ? "" : "s", fmt::join(spares, ","),
      seconds_since(start),
      failed.empty() ? std::string()
                     : fmt::format(" (failed on {}: those stay cold)", fmt::join(failed, ",")));
}

// Runs skt-drain on the job's drain directory (SKT_DRAIN_DIR in skt-run's environment, which its
// launches inherit): once for a directory every node sees; for a directory per node ({node}, the
// library's placeholder), on every node of the ranklist and the spares. Nothing when no drain
// directory is set, or skt-drain is not found (which `log` is told).
std::optional<std::vector<Captured>> run_drain_tool(const Options& o, const Plan& plan,
                                                    std::vector<std::string> args, Log& log) {
  const char* dir = std::getenv("SKT_DRAIN_DIR");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  const std::string tool = locate_tool("skt-drain");
  if (tool.empty()) {
    log("skt-drain not found: the job's drained epochs in {} are not looked at (skt-drain list "
        "and remove --dir {} --job {} do that)",
        dir, dir, o.job);
    return std::nullopt;
  }
  args.insert(args.begin(), tool);
  args.insert(args.end(), {"--dir", dir, "--job", o.job});
  std::vector<Captured> out;
  if (std::string_view(dir).find("{node}") == std::string_view::npos) {
    out.push_back(capture(args, {{"SKT_LOG", "off"}}));
    return out;
  }
  std::vector<std::string> nodes = nodes_of(plan.ranklist);
  nodes.insert(nodes.end(), plan.spares.begin(), plan.spares.end());
  if (plan.local) {
    for (const auto& node : nodes) {
      std::vector<std::string> argv = args;
      argv.insert(argv.end(), {"--node", node});
      out.push_back(capture(argv, {{"SKT_LOG", "off"}}));
    }
  } else {
    std::vector<std::string> argv = launcher_prefix(o, &nodes);
    argv.insert(argv.end(), args.begin(), args.end());
    out.push_back(capture(argv, {{"SKT_LOG", "off"}}));
  }
  return out;
}

// Removes the job's drained epochs: a job started afresh must not find an earlier run's drains,
// which it would refuse.
void clean_drains(const Options& o, const Plan& plan, const std::vector<std::string>& sub_jobs,
                  Log& log) {
  const auto runs = run_drain_tool(o, plan, {"remove", "--exactly", exact_tags(o, sub_jobs)}, log);
  if (!runs) return;
  const bool failed =
      std::any_of(runs->begin(), runs->end(), [](const Captured& r) { return r.code != 0; });
  log("removed the job's drained epochs in {}{}", std::getenv("SKT_DRAIN_DIR"),
      failed ? " (skt-drain failed: some may be left)" : "");
}

// How many drained epoch directories of the job skt-drain lists (on every node, for a directory
// per node); nothing when that cannot be known.
std::optional<int> drained_epoch_count(const Options& o, const Plan& plan, Log& log) {
  const auto runs = run_drain_tool(o, plan, {"list"}, log);
  if (!runs) return std::nullopt;
  int epochs = 0;
  for (const auto& r : *runs) {
    if (r.code != 0) return std::nullopt;
    // A line per epoch, starting with the tag of the job or of one of its sub-jobs (skt-hpl's
    // JOB+t0); a launcher may add lines of its own.
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
      epochs += skt::job_covers(o.job, line.substr(0, line.find(' '))) ? 1 : 0;
  }
  return epochs;
}

// How one launch went.
struct Outcome {
  int code = 0;
  std::optional<std::string> hung;  // why skt-run ended it as hung
  // It was ended as hung for making no progress (every rank beat), having reached this epoch.
  std::optional<std::uint64_t> stalled_at;
  std::optional<std::string> dead_node;  // a node a probe found dead while it ran
  // Why a run whose work had ended, every context closed, did not end by itself: skt-run ended it
  // because its ranks did not leave MPI_Finalize, or one stopped before it; or its launcher ended
  // with ranks still in MPI_Finalize.
  std::optional<std::string> stuck_after_work;
  bool started = false;     // some rank of the program spoke
  int launcher_signal = 0;  // the signal that ended the launcher, when skt-run did not send it
  std::optional<std::uint64_t> restored;  // the epoch the program restored
  std::optional<double> restored_at;      // when it said so, seconds after the launch
  bool restored_from_storage = false;     // from a drained epoch, memory could not serve
  double cadence = 0;
  std::deque<std::string> last_errors;  // the launcher's last lines on standard error
};

// Whether the launcher's last words on standard error report a process of the program that ended
// (Open MPI's "mpirun noticed that process rank 1 ... exited on signal 9", "Primary job terminated
// normally, but 1 process returned / a non-zero exit code"): then the program ran, even if it never
// spoke to skt-run.
bool launcher_saw_a_process_end(const std::deque<std::string>& last_errors) {
  return std::any_of(last_errors.begin(), last_errors.end(), [](const std::string& line) {
    return line.find("noticed that process rank") != std::string::npos ||
           line.find("process returned") != std::string::npos ||
           line.find("exited on signal") != std::string::npos;
  });
}

// The launcher's reason, from its last words on standard error: the start of its last message
// (Open MPI frames each in lines of dashes and says what went wrong first, then what to try).
std::string launcher_reason(const std::deque<std::string>& last_errors) {
  std::vector<std::vector<std::string>> messages(1);
  for (const auto& line : last_errors) {
    const bool rule = line.size() > 10 && line.find_first_not_of('-') == std::string::npos;
    if (rule) {
      if (!messages.back().empty()) messages.emplace_back();
    } else if (line.find_first_not_of(" \t") != std::string::npos) {
      messages.back().push_back(line);
    }
  }
  if (messages.back().empty()) messages.pop_back();
  std::string out;
  if (messages.empty()) return out;
  const auto& last = messages.back();
  for (std::size_t i = 0; i < std::min<std::size_t>(last.size(), 6); ++i)
    out += "\n    " + last[i];
  if (last.size() > 6) out += fmt::format("\n    (and {} more lines, above)", last.size() - 6);
  return out;
}

// Copies what a run writes to this process's output, line by line for standard error (whose last
// lines say why a launcher failed).
class Passthrough {
 public:
  Passthrough(int fd, int to, std::deque<std::string>* tail) : fd_(fd), to_(to), tail_(tail) {}
  // Returns false at the end of the stream.
  bool read_some() {
    char buffer[8192];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    output::write(to_, std::string_view(buffer, static_cast<std::size_t>(n)));
    if (tail_ != nullptr) {
      pending_.append(buffer, static_cast<std::size_t>(n));
      std::size_t end;
      while ((end = pending_.find('\n')) != std::string::npos) {
        tail_->push_back(pending_.substr(0, end));
        if (tail_->size() > 60) tail_->pop_front();
        pending_.erase(0, end + 1);
      }
    }
    return true;
  }

 private:
  int fd_;
  int to_;
  std::deque<std::string>* tail_;
  std::string pending_;
};

class Supervisor {
 public:
  Supervisor(Options& o, Plan& plan, StateDir& dir, Log& log)
      : o_(o), plan_(plan), dir_(dir), log_(log) {}

  int run();

 private:
  Outcome supervise(Supervised& child, int launch, double cadence);
  void end_run(Supervised& child) const;
  std::string monitor_address() const;
  void save(const std::string& status, const std::string& note);
  // Records, once, that the job has a checkpoint: at once, since skt-run may die before the run
  // ends, and then the next one must still know that another command would restore it.
  void note_checkpointed(const Watchdog& watch);
  // Records a sub-job (TAG+NAME) the job's ranks reported, which cleaning up the job removes.
  void note_sub_job(const std::string& tag);
  void record(const std::function<void()>& write);
  // The words every exit ends with: what is left of the job, and how to resume it (if the same
  // command can) or remove it.
  std::string kept_hint(bool resumable = true) const;
  // How a checkpoint found without state is resumed: the program judges its command, unless
  // --new-command says it is this one's.
  std::string inherited_terms() const;
  // Without skt-run's state, the launch places each rank on the node that holds its segments, as a
  // resume from the state does; false (said) when too few nodes are given for that.
  bool place_by_segments(const SegmentsFound& found);

  Options& o_;
  Plan& plan_;
  StateDir& dir_;
  Log& log_;
  JobState state_;
  Listener listener_;
  std::string monitor_key_;  // signs the ranks' datagrams of the launch (monitor_wire.hpp)
  bool launching_ = false;   // from the first launch on
};

std::string Supervisor::monitor_address() const {
  std::string host = o_.monitor_host;
  if (host.empty()) {
    if (plan_.local) {
      host = "127.0.0.1";
    } else {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      host = name;
    }
  }
  return fmt::format("{}:{}", host, listener_.port());
}

void Supervisor::save(const std::string& status, const std::string& note) {
  state_.status = status;
  state_.note = note;
  state_.ranklist = plan_.ranklist;
  state_.spares = plan_.spares;
  record([&] { dir_.save(state_); });
}

void Supervisor::note_sub_job(const std::string& tag) {
  if (tag == o_.job || !skt::job_covers(o_.job, tag) ||
      !valid_node_name(tag.substr(o_.job.size() + 1))) {
    return;
  }
  if (std::find(state_.sub_jobs.begin(), state_.sub_jobs.end(), tag) != state_.sub_jobs.end()) {
    return;
  }
  state_.sub_jobs.push_back(tag);
  record([&] { dir_.save(state_); });
}

void Supervisor::note_checkpointed(const Watchdog& watch) {
  if (state_.checkpointed || !watch.checkpointed()) return;
  state_.checkpointed = true;
  record([&] { dir_.save(state_); });
}

// Before the first launch a record that cannot be written (a full disk) refuses the job: nothing
// ran. From then on the run matters more than its record, which a resume can do without (it finds
// the job's segments): a warning, and the run goes on.
void Supervisor::record(const std::function<void()>& write) {
  try {
    write();
  } catch (const WriteError& e) {
    if (!launching_) throw;
    log_(
        "warning: {}; going on without it (if skt-run dies, the same command resumes from the "
        "job's segments alone)",
        e.what());
  }
}

std::string Supervisor::inherited_terms() const {
  if (o_.new_command) return "with this command, whatever command wrote it (--new-command)";
  return "if this command, from this directory, wrote it (SKT_RESTART=auto: the program refuses "
         "another command's checkpoint; --new-command resumes it with this one)";
}

std::string Supervisor::kept_hint(bool resumable) const {
  const std::string resume = resumable ? ": the same command resumes it" : "";
  if (plan_.local) {
    const auto found = find_segments(o_, plan_);
    const auto kept = found ? std::optional<int>(found->count) : std::nullopt;
    if (kept && *kept == 0) {
      return fmt::format("no segment of job {} is left (state in {})", o_.job, dir_.path());
    }
    if (kept) {
      return fmt::format(
          "{} segment{} of job {} {} kept{} (state in {}); skt-shm clean --job {} removes {}",
          *kept, *kept == 1 ? "" : "s", o_.job, *kept == 1 ? "is" : "are", resume, dir_.path(),
          o_.job, *kept == 1 ? "it" : "them");
    }
  }
  return fmt::format(
      "the job's segments on its nodes are kept{} (job {}, state in {}); skt-shm clean --job {} "
      "on each node removes them",
      resume, o_.job, dir_.path(), o_.job);
}

bool Supervisor::place_by_segments(const SegmentsFound& found) {
  if (!found.node_of_rank) return true;
  const auto layout = layout_of_segments(*found.node_of_rank, o_.ranks_per_node);
  if (!layout || *layout == plan_.ranklist) return true;
  try {
    resume_plan(*layout, o_, plan_, log_);
  } catch (const OutOfSpares& e) {
    log_("{}; give the nodes that hold the job's segments", e.what());
    return false;
  }
  log_("ranks placed on the nodes that hold their segments: {}", fmt::join(plan_.ranklist, ","));
  return true;
}

void Supervisor::end_run(Supervised& child) const {
  // The launcher's ranks die with it (the library ends a rank whose launcher dies), stopped ones
  // included; its process group goes too.
  ::kill(-child.pid, SIGKILL);
  ::kill(child.pid, SIGKILL);
}

Outcome Supervisor::supervise(Supervised& child, int launch, double cadence) {
  Outcome out;
  const auto launched = Clock::now();
  const auto now = [&] { return seconds_since(launched); };
  WatchLimits limits;
  limits.silence = o_.silence;
  limits.startup = o_.startup;
  limits.progress_floor = o_.progress_floor;
  limits.progress_fixed = o_.hang_timeout;
  Watchdog watch(o_.job, launch, static_cast<int>(plan_.ranklist.size()), limits, cadence, 0.0);
  // What the ranks said since the last time, to the watchdog; and the job's first checkpoint to
  // the state at once.
  // Warm spares once the run has committed a checkpoint (its segments are then all there, at
  // their sizes): beside this loop, as a probe is.
  std::future<std::string> reserving;
  std::size_t reserved_for = 0;  // contexts whose segments the spares hold
  int forged = 0;                // datagrams whose signature did not verify
  const auto hear_ranks = [&] {
    for (const auto& datagram : listener_.receive_all()) {
      const auto line = skt::wire::verified(monitor_key_, datagram);
      if (!line) {
        if (++forged == 1) {
          log_(
              "warning: a datagram not signed by this launch's ranks came to the monitor port "
              "and is ignored (another program, or another user, sent it): '{}'",
              printable(datagram.substr(0, 80)));
        }
        continue;
      }
      const auto h = parse_heard(*line);
      if (!h) continue;
      watch.heard(*h, now());
      note_sub_job(h->job);
    }
    note_checkpointed(watch);
    // Again whenever another of the program's contexts commits its first (skt-hpl's test after
    // its record of the run): the segments a spare must hold grew. What a spare has counts.
    if (!o_.warm_spares || plan_.spares.empty() || reserving.valid() ||
        watch.contexts_committed() <= reserved_for) {
      return;
    }
    reserved_for = watch.contexts_committed();
    // By reference: plan_ changes only once this run is over, and the reserving ends before.
    reserving = std::async(std::launch::async,
                           [this] { return reserve_on_spares(o_, plan_, plan_.spares); });
  };
  Passthrough stdout_copy(child.out.get(), STDOUT_FILENO, nullptr);
  Passthrough stderr_copy(child.err.get(), STDERR_FILENO, &out.last_errors);
  bool out_open = true, err_open = true, killed = false;
  std::optional<Ended> ended;
  std::optional<int> ranks_code;  // the run's exit when skt-run ended a launcher that outlived it
  double stopped_since = -1;      // since when the launcher is stopped, while it is
  double suspended_since = -1;    // since when the Slurm job is suspended, while it is
  double next_resume_check = 0;
  bool slurm_silent = false;  // Slurm did not answer the last question whether it resumed
  double next_probe = o_.probe_interval;
  // The probe in flight while the run is up: it runs beside this loop, which goes on copying the
  // output and watching the ranks however long a node takes to answer (up to --probe-timeout).
  std::future<Probed> probing;
  double reaped_at = 0;
  // Before a run is ended for what its ranks did not say: a suspended Slurm job stopped them.
  const auto suspended_on_purpose = [&](const std::string& why) {
    if (plan_.slurm_job.empty()) return false;
    const auto answer = slurm_job_suspended(plan_.slurm_job, o_.probe_timeout);
    if (!answer.suspended) {
      log_("Slurm did not say whether job {} is suspended ({}): the silence counts as a hang",
           plan_.slurm_job, answer.trouble);
      return false;
    }
    if (!*answer.suspended) return false;
    log_(
        "{}, but Slurm job {} is suspended (scontrol suspend, or preemption): its ranks are "
        "stopped on purpose; waiting for it to resume",
        why, plan_.slurm_job);
    suspended_since = now();
    watch.pardon(now());
    return true;
  };
  while (out_open || err_open || !ended) {
    pollfd fds[4] = {{out_open ? child.out.get() : -1, POLLIN, 0},
                     {err_open ? child.err.get() : -1, POLLIN, 0},
                     {listener_.fd(), POLLIN, 0},
                     {g_signal_pipe[0], POLLIN, 0}};
    const int ready = ::poll(fds, 4, 200);
    if (ready < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
    output::divert_if_broken(STDOUT_FILENO);
    output::divert_if_broken(STDERR_FILENO);
    if ((fds[0].revents & (POLLIN | POLLHUP)) != 0) {
      out_open = stdout_copy.read_some();
    }
    if ((fds[1].revents & (POLLIN | POLLHUP)) != 0) err_open = stderr_copy.read_some();
    if ((fds[2].revents & POLLIN) != 0) hear_ranks();
    if ((fds[3].revents & POLLIN) != 0) {
      char drain[16];
      [[maybe_unused]] const auto n = ::read(g_signal_pipe[0], drain, sizeof drain);
      // Passed on: the launcher ends the run its own way (and the ranks with it).
      if (!ended) ::kill(child.pid, g_signal.load());
    }
    if (!ended) {
      ended = reap(child.pid);
      if (ended) reaped_at = now();
    }
    if (ended) {
      // Whatever is still in the pipes comes within moments; a rank that kept them open must not
      // keep the run alive.
      if (now() - reaped_at > 2.0) break;
      continue;
    }
    if (killed || g_signal != 0) continue;
    if (const auto why = watch.launcher_overdue(now())) {
      ranks_code = watch.exit_code();
      log_(
          "{}; ending it (what the ranks printed and it had not passed on is lost): the run's "
          "exit is the ranks', {}",
          *why, *ranks_code);
      end_run(child);
      killed = true;
      continue;
    }
    if (suspended_since >= 0) {
      // The ranks are stopped on purpose: nothing they do not say is held against them.
      watch.pardon(now());
      if (now() >= next_resume_check) {
        next_resume_check = now() + 1.0;  // Slurm asked once a second, not at every poll
        const auto answer = slurm_job_suspended(plan_.slurm_job, o_.probe_timeout);
        if (!answer.suspended) {
          // A controller restarting or frozen says nothing of the job: it stays suspended until
          // Slurm says otherwise (its ranks, if they run again, are pardoned meanwhile).
          if (!slurm_silent) {
            log_(
                "Slurm did not say whether job {} is still suspended ({}); it stays suspended for "
                "skt-run until Slurm says otherwise",
                plan_.slurm_job, answer.trouble);
          }
        } else if (!*answer.suspended) {
          log_(
              "Slurm job {} resumed, {:.1f} s after skt-run found it suspended; watching its ranks "
              "again",
              plan_.slurm_job, now() - suspended_since);
          suspended_since = -1;
        } else if (slurm_silent) {
          log_("Slurm answers again: job {} is still suspended", plan_.slurm_job);
        }
        slurm_silent = !answer.suspended;
      }
    }
    if (const auto why = watch.stuck_after_work(now())) {
      if (suspended_on_purpose(*why)) continue;
      out.stuck_after_work = *why;
      log_("{}; ending the run (what the ranks printed and the launcher had not passed on is lost)",
           *why);
      end_run(child);
      killed = true;
      continue;
    }
    // A stopped launcher holds up the ranks' output and their MPI_Finalize, and may stay stopped
    // for good (a stray SIGSTOP, a job-control slip): continued, the run goes on where it was.
    if (!is_stopped(child.pid)) {
      stopped_since = -1;
    } else if (stopped_since < 0) {
      stopped_since = now();
    } else if (now() - stopped_since > o_.silence) {
      log_("the launcher (pid {}) has been stopped for {:.1f} s; continuing it (SIGCONT)",
           child.pid, now() - stopped_since);
      ::kill(child.pid, SIGCONT);
      stopped_since = -1;
    }
    if (const double at = now(); const auto why = watch.hung(at)) {
      if (suspended_on_purpose(*why)) continue;
      out.hung = *why;
      out.stalled_at = watch.stalled_at(at);
      log_("the run is hung: {}; ending it", *why);
      end_run(child);
      killed = true;
      continue;
    }
    if (o_.probe_interval > 0 && !probing.valid() && now() >= next_probe) {
      probing = std::async(std::launch::async,
                           [probe = plan_.probe.get(), nodes = nodes_of(plan_.ranklist)] {
                             return probe->dead(nodes);
                           });
    }
    if (reserving.valid() &&
        reserving.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      if (const std::string said = reserving.get(); !said.empty()) log_("{}", said);
    }
    if (probing.valid() && probing.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      next_probe = now() + o_.probe_interval;
      try {
        const Probed probed = probing.get();
        if (!probed.dead.empty()) {
          out.dead_node = probed.describe();
          log_("probe: node {} dead while the run is up; ending it", *out.dead_node);
          end_run(child);
          killed = true;
        }
      } catch (const std::exception& e) {
        log_("probe failed: {}", e.what());
      }
    }
  }
  hear_ranks();  // what came with the launcher's end
  if (reserving.valid()) {
    if (const std::string said = reserving.get(); !said.empty()) log_("{}", said);
  }
  // skt-run ended it (a hang, a dead node, an overdue launcher, which set ranks_code) or passed
  // the operator's signal on.
  const bool ended_by_us = killed || g_signal != 0;
  if (!ended_by_us && ended->code != 0) {
    // A launcher that failed after its ranks' work ended (killed, or interrupted: Open MPI's
    // mpirun then exits 1, ending ranks still in MPI_Finalize) did not fail the program, and a
    // relaunch would do the work again. If every rank reported its exit, their codes are the
    // run's; if some were ended in MPI_Finalize, the run's exit is unknown.
    ranks_code = watch.exit_code();
    if (ranks_code) {
      if (*ranks_code != ended->code) {
        log_(
            "the launcher ended with exit {}, after every rank reported its exit: the run's exit "
            "is the ranks', {}",
            ended->code, *ranks_code);
      }
    } else if (watch.work_ended() && watch.failed_exit() == ended->code) {
      // A rank's own verdict (2, 3, 4), which the launcher passed on after ending the ranks
      // still in MPI_Finalize: the run's exit is known. It used to be taken as unknown (exit 8).
      ranks_code = ended->code;
      log_(
          "a rank exited with {} after its work, and the launcher ended the ranks still in "
          "MPI_Finalize with that code: the run's exit is {}",
          ended->code, ended->code);
    } else if (watch.work_ended()) {
      out.stuck_after_work = fmt::format(
          "the launcher ended with exit {} once every rank had entered MPI_Finalize, every "
          "selfckpt context closed: ranks were ended there, their exit codes unknown",
          ended->code);
      log_("{}", *out.stuck_after_work);
    }
  }
  out.restored = watch.restored();
  out.restored_at = watch.restored_at();
  out.restored_from_storage = watch.restored_from_storage();
  out.code = ranks_code.value_or(ended->code);
  if (!ended_by_us) out.launcher_signal = ended->signal;
  out.started = watch.anyone_started();
  out.cadence = watch.cadence();
  return out;
}

int Supervisor::run() {
  const auto loaded = dir_.load();
  state_ = loaded.value_or(JobState{});
  state_.job = o_.job;
  const bool resuming = resumes(loaded);
  if (loaded && loaded->status == "unrecoverable" && !o_.fresh_if_unrecoverable) {
    log_(
        "the last run of job {} found its checkpoint unrecoverable ({}); start it afresh: the "
        "same command with --fresh-if-unrecoverable, or skt-shm clean --job {} first",
        o_.job, loaded->note, o_.job);
    return 3;
  }
  if (resuming) {
    if (loaded->ranklist.size() != plan_.ranklist.size()) {
      log_(
          "job {} ran {} ranks ({}), this command gives {}: resume it with as many ranks, or "
          "remove its checkpoints (skt-shm clean --job {}) and its state ({})",
          o_.job, loaded->ranklist.size(), dir_.file("state"), plan_.ranklist.size(), o_.job,
          dir_.path());
      return kExitUsage;
    }
    if (command_changed(*loaded, o_.directory, o_.command)) {
      if (!o_.new_command) {
        log_(
            "{}: its checkpoint is of the computation that command made, and restored into "
            "another one it gives a wrong result. Resume it with that command; or start this one "
            "as another job (another --job; or remove this one: skt-shm clean --job {}, then its "
            "state: rm -r {}); or, where the change leaves the computation as it was (an output "
            "file, a progress option), resume it with --new-command",
            command_change(*loaded, o_), o_.job, dir_.path());
        return kExitUsage;
      }
      log_("{}: resuming its checkpoint with this command (--new-command)",
           command_change(*loaded, o_));
    }
    // "running" with the lock free: the skt-run that wrote it died (its run died with it).
    log_(
        "resuming job {} after {} launch{} ({}): ranks on {}, spares: {}; resuming its checkpoint "
        "{}",
        o_.job, loaded->launches, loaded->launches == 1 ? "" : "es",
        loaded->status == "running" ? "the skt-run of the last one died: " + loaded->note
                                    : loaded->note,
        fmt::join(nodes_of(loaded->ranklist), ","),
        loaded->spares.empty() ? "none" : fmt::format("{}", fmt::join(loaded->spares, ",")),
        inherited_terms());
    // What happened to the job's segments since the state was written, no skt-run saw: a commit
    // whose report never arrived (skt-run killed first, a datagram lost), or a run of another
    // computation under mpirun by hand after they were removed. SKT_RESTART=1 would have the
    // program take them whatever command wrote them (a wrong result with exit 0); the program
    // judges instead, until a launch restores them or starts afresh.
    state_.inherited = true;
    try {
      resume_plan(loaded->ranklist, o_, plan_, log_);
    } catch (const OutOfSpares& e) {
      log_("{}; give as many nodes as it ran on", e.what());
      return kExitOutOfSpares;
    }
  } else {
    if (loaded && loaded->status == "unrecoverable") {
      log_(
          "the last run found its checkpoint unrecoverable: removing the job's segments and "
          "starting afresh (--fresh-if-unrecoverable)");
      clean_segments(o_, plan_, state_.sub_jobs, log_);
      clean_drains(o_, plan_, state_.sub_jobs, log_);
    }
    state_ = JobState{};
    state_.job = o_.job;
  }
  state_.directory = o_.directory;
  state_.command = o_.command;
  bool fresh = !resuming;
  if (fresh) {
    // Segments without skt-run's state: the job ran without it (mpirun by hand), or its state
    // directory is lost. The program decides whether they are a checkpoint it can resume; told
    // SKT_RESTART=0 it refused them, and on other hosts, where skt-run did not count them, the way
    // out it named (skt-shm clean) destroyed a checkpoint the same command could resume.
    const auto found = find_segments(o_, plan_);
    const std::string where = plan_.local ? "" : " on each node";
    if (found && found->count > 0) {
      log_(
          "{} segment{} of job {} exist from an earlier run that skt-run has no state of: resuming "
          "from them {} (skt-shm clean --job {}{} first to start afresh)",
          found->count, found->count == 1 ? "" : "s", o_.job, inherited_terms(), o_.job, where);
      if (!place_by_segments(*found)) return kExitOutOfSpares;
    } else if (!found) {
      log_(
          "skt-run has no state of job {} and could not count its segments (skt-shm list{} "
          "failed): resuming from those an earlier run may have left, {}, and else starting "
          "afresh (skt-shm clean --job {}{} first to start afresh regardless)",
          o_.job, where, inherited_terms(), o_.job, where);
    }
    if (!found || found->count > 0) {
      fresh = false;
      state_.inherited = true;
    }
  }
  if (fresh && !(loaded && loaded->status == "unrecoverable")) {
    // The same for drained epochs, which outlive the nodes (a new allocation, other nodes).
    if (const auto found = drained_epoch_count(o_, plan_, log_); found && *found > 0) {
      log_(
          "{} drained epoch{} of job {} exist{} from an earlier run that skt-run has no state of: "
          "resuming from {} {} (skt-drain remove --job {} first to start afresh)",
          *found, *found == 1 ? "" : "s", o_.job, *found == 1 ? "s" : "",
          *found == 1 ? "it" : "them", inherited_terms(), o_.job);
      fresh = false;
      state_.inherited = true;
    }
  }
  log_("job {}: {} ranks on {} ({} per node), spares: {}; probe {}; launch {}; state in {}", o_.job,
       plan_.ranklist.size(), fmt::join(nodes_of(plan_.ranklist), ","), o_.ranks_per_node,
       plan_.spares.empty() ? "none" : fmt::format("{}", fmt::join(plan_.spares, ",")),
       plan_.probe->name(), plan_.local ? "local (virtual nodes)" : "hosts", dir_.path());

  if (plan_.local) {
    TransportDir::remove_orphans();
    if (const auto off = shared_memory_huge_pages_off()) {
      log_(
          "note: transparent huge pages for shared memory are off on this host ({}): a rank "
          "rebuilt after a failure maps every 4 KiB page of its segments anew, which a virtual "
          "machine may charge microseconds each; with 'advise' (echo advise > {}, as root) the "
          "library's segments get huge pages (see docs/operations.md)",
          *off, kShmemHugePages);
    }
  }
  std::optional<Clock::time_point> failed_at;
  for (int attempt = 0;; ++attempt) {
    record([&] { write_ranklist(dir_.file("ranklist"), plan_.ranklist); });
    if (!o_.ranklist_out.empty()) record([&] { write_ranklist(o_.ranklist_out, plan_.ranklist); });
    const auto argv_run = launch_command(o_, plan_);
    // A first launch is one with nothing behind it: the library then refuses old segments.
    const int restart = fresh ? 0 : std::max(state_.launches, 1);
    // SKT_RESTART=1 would tell the program to take a checkpoint of unknown origin as its own,
    // whatever command wrote it (skt-run without its state used to: another computation under the
    // job's tag restored it and gave a wrong result with exit 0).
    const bool judged = state_.inherited && !o_.new_command;
    const std::string restart_text = judged ? "auto" : std::to_string(restart);
    fresh = false;
    // A socket of its own for each launch: what the ranks of an earlier one still send (orphans,
    // or datagrams late in a buffer) cannot reach this launch's watchdog, even when both carry the
    // same launch number (0 under auto, as SKT_RESTART unset says).
    listener_ = Listener(plan_.local && o_.monitor_host.empty());
    // And a key of its own: a datagram it does not sign is not from this launch's ranks.
    monitor_key_ = new_monitor_key();
    ++state_.launches;
    save("running", fmt::format("launch {} under skt-run pid {}", state_.launches, ::getpid()));
    launching_ = true;
    const auto launched = Clock::now();
    const TransportDir transport = plan_.local ? TransportDir(state_.launches) : TransportDir();
    EnvChanges environment{
        {"SKT_JOB", o_.job},
        {"SKT_RESTART", restart_text},
        {"SKT_MONITOR", monitor_address()},
        {"SKT_MONITOR_KEY",
         skt::wire::to_hex(reinterpret_cast<const std::uint8_t*>(monitor_key_.data()),
                           monitor_key_.size())}};
    for (const auto& variable : transport.environment())
      environment.push_back(variable);
    Supervised child;
    try {
      child = launch_supervised(argv_run, environment);
    } catch (const std::exception& e) {
      log_("cannot launch: {}", e.what());
      --state_.launches;
      save("failed", "the launcher could not start");
      return kExitLaunchFailed;
    }
    if (failed_at) {
      log_("relaunched (run {}, SKT_RESTART={}) {:.3f} s after the failure was seen",
           state_.launches, restart_text, seconds_since(*failed_at));
    } else {
      log_("launched (SKT_RESTART={}): {}", restart_text, shell_quoted(argv_run));
    }
    const Outcome out = supervise(child, judged ? 0 : restart, state_.cadence);
    // The program took the checkpoint as its own (restored), or found none: this job's from now.
    if (out.restored) state_.inherited = false;
    state_.cadence = std::max(state_.cadence, out.cadence);
    const auto stalled_before = std::exchange(state_.stalled_at, out.stalled_at);
    if (out.restored && *out.restored == 0 && restart != 0) {
      // Epochs count from 1: the relaunch found no checkpoint (the run before died before its
      // first one) and started afresh.
      log_("the program found no checkpoint and started afresh");
    } else if (out.restored && restart != 0) {
      log_("the program reports restored epoch {}{}{}", *out.restored,
           out.restored_from_storage ? " from storage (SKT_DRAIN_DIR)" : "",
           failed_at && out.restored_at
               ? fmt::format(", {:.3f} s after the failure was seen",
                             std::chrono::duration<double>(launched - *failed_at).count() +
                                 *out.restored_at)
               : std::string());
    }
    const int code = out.code;
    if (g_signal != 0) {
      log_("stopped by signal {} (run exit {}); {}", g_signal.load(), code, kept_hint());
      save("stopped", fmt::format("stopped by signal {}", g_signal.load()));
      return 128 + g_signal;
    }
    if (code == 0 && !out.hung && !out.dead_node) {
      log_("run {} succeeded", state_.launches);
      clean_segments(o_, plan_, state_.sub_jobs, log_);
      clean_drains(o_, plan_, state_.sub_jobs, log_);
      save("done", fmt::format("succeeded after {} launch(es)", state_.launches));
      log_("final ranklist in {}", dir_.file("ranklist"));
      return 0;
    }
    if (out.stuck_after_work) {
      // Every context had ended (one that finishes removes its checkpoint), so a relaunch would do
      // the work again; and whether the program succeeded is its exit code, which nobody saw.
      log_(
          "run {}: the program's work ended (every context closed), but its ranks did not leave "
          "the program by themselves, so its exit code is unknown: see its output; not "
          "relaunching (the work would be done again from the start); {}",
          state_.launches, kept_hint(false));
      save("failed", "stuck after its work: " + *out.stuck_after_work);
      return kExitStuckAfterWork;
    }
    if (code == 3 && o_.fresh_if_unrecoverable && attempt < o_.max_restarts) {
      log_(
          "run {} found its checkpoint unrecoverable (exit 3): removing the job's segments and "
          "starting afresh (--fresh-if-unrecoverable)",
          state_.launches);
      clean_segments(o_, plan_, state_.sub_jobs, log_);
      clean_drains(o_, plan_, state_.sub_jobs, log_);
      state_.checkpointed = false;
      fresh = true;
      failed_at = Clock::now();
      continue;
    }
    if (code == 2 || code == 3 || code == 4) {
      const char* why = code == 2
                            ? "bad usage or configuration, a relaunch that does not match its "
                              "checkpoint, or a resource it lacks (see its message)"
                        : code == 3 ? "unrecoverable (a group lost more than it tolerates)"
                                    : "the result failed verification";
      // A checkpoint found without state and refused as another command's: the same command
      // would be refused again.
      const bool refused_inherited = code == 2 && state_.inherited;
      log_("run {} ended with exit {}: {}; not relaunching; {}{}", state_.launches, code, why,
           kept_hint(code == 2 && !refused_inherited),
           refused_inherited
               ? "; if the program refused the checkpoint as another command's, resume it with "
                 "the command that wrote it, or, where this one leaves the computation as it was "
                 "(an output file, a progress option), with --new-command"
               : "");
      save(code == 3 ? "unrecoverable" : "failed", fmt::format("exit {}: {}", code, why));
      return code;
    }
    if (out.stalled_at && stalled_before == out.stalled_at) {
      // The relaunch restored the checkpoint the run before stalled after, and stalled again
      // before the next: a deadlock of the program, or work longer than the bound, repeats at
      // every relaunch. Relaunching would spend the allocation on the same hang until
      // --max-restarts.
      log_(
          "run {} stalled at epoch {} as the run before it did: it does not get past that point, "
          "and a relaunch would restore the same checkpoint and stall the same way; not "
          "relaunching. A deadlock of the program (see which calls the ranks waited in, above) "
          "is fixed in the program, which then resumes with --new-command; work that takes "
          "longer than the bound without a checkpoint resumes with the same command and a "
          "larger --hang-timeout or --progress-floor; {}",
          state_.launches, *out.stalled_at, kept_hint());
      save("failed", fmt::format("stalled twice at epoch {}: {}", *out.stalled_at, *out.hung));
      return kExitStalledAgain;
    }
    // No rank spoke and the launcher reported no process of the program ending: it never ran. A
    // launcher that refused the launch says why (Open MPI frames its reason in rules), and would
    // refuse again. One killed by a signal that skt-run did not send (the OOM killer, someone's
    // kill), or ending without a word (Open MPI's mpirun exits 1, silent, when SIGTERM or SIGINT
    // reaches it before its ranks start) refused nothing: that is a crash, relaunched.
    const bool never_ran =
        !out.started && !out.hung && !out.dead_node && !launcher_saw_a_process_end(out.last_errors);
    const std::string reason = launcher_reason(out.last_errors);
    const bool refused = never_ran && out.launcher_signal == 0 && !reason.empty();
    failed_at = Clock::now();
    const auto how = [&]() -> std::string {
      if (out.hung) return "was ended as hung";
      if (out.dead_node) return "was ended: a node died";
      if (refused) return "failed to launch";
      const std::string before = never_ran ? " before any rank started" : "";
      if (out.launcher_signal != 0) {
        return fmt::format("failed{}: its launcher was killed by signal {} ({}), not by skt-run",
                           before, out.launcher_signal, ::strsignal(out.launcher_signal));
      }
      if (never_ran) return "failed before any rank started, the launcher silent (interrupted?)";
      return "failed";
    };
    log_("run {} {} (exit {}); probing {} node(s) and {} spare(s) with {}", state_.launches, how(),
         code, nodes_of(plan_.ranklist).size(), plan_.spares.size(), plan_.probe->name());
    auto probed = nodes_of(plan_.ranklist);
    probed.insert(probed.end(), plan_.spares.begin(), plan_.spares.end());
    std::set<std::string> dead;
    try {
      const Probed found = plan_.probe->dead(probed);
      dead = found.dead;
      log_("probed in {:.3f} s: {}", seconds_since(*failed_at),
           dead.empty() ? std::string("every node is alive (a process crash or a hang)")
                        : "dead: " + found.describe());
    } catch (const std::exception& e) {
      log_("probe failed: {}; relaunching on the same nodes", e.what());
    }
    if (refused && dead.empty()) {
      // A launch failure (the launcher's refusal, a host it cannot reach, a program missing on a
      // node) would fail again: not a crash to retry. A dead node is replaced like any other.
      log_(
          "the launcher failed before the program started, and every node is alive; not "
          "relaunching (a launch failure is not a crash); it said:{}",
          reason);
      --state_.launches;
      save(state_.launches > 0 ? "failed" : "new",
           "the launcher failed before the program started");
      return kExitLaunchFailed;
    }
    if (attempt >= o_.max_restarts) {
      log_("--max-restarts {} reached; giving up; {}", o_.max_restarts, kept_hint());
      save("failed", fmt::format("--max-restarts {} reached", o_.max_restarts));
      return kExitRestartBudget;
    }
    if (!dead.empty()) {
      try {
        const Replacement r = replace_dead_nodes(plan_.ranklist, dead, plan_.spares);
        for (const auto& [from, to] : r.replaced)
          log_("replacing node {} by spare {}", from, to);
        plan_.ranklist = r.ranklist;
        plan_.spares = r.spares_left;
      } catch (const OutOfSpares& e) {
        log_("out of spares: {}; giving up; {}", e.what(), kept_hint());
        save("failed", fmt::format("out of spares: {}", e.what()));
        return kExitOutOfSpares;
      }
    }
    save("failed", out.hung ? "ended as hung: " + *out.hung : "the run failed");
    if (o_.backoff > 0) {
      const double wait = o_.backoff * static_cast<double>(1 << std::min(attempt, 20));
      log_("waiting {:.1f} s before relaunching", wait);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "skt-run: runs an MPI program on a list of nodes and keeps it going: when a run fails, or\n"
      "hangs, it replaces dead nodes with spares (healthy ranks stay on their nodes, where their\n"
      "checkpoints are) and relaunches it with the same SKT_JOB, until it succeeds.\n"};
  app.footer(
      "Nodes come from --nodes, --hostfile, or the Slurm allocation (SLURM_JOB_NODELIST); the\n"
      "last --spares of them, or --spare-nodes, are spares. Launch 'local' runs every node as a\n"
      "virtual node of this host (one app context per node, SKT_NODE set, oversubscribed);\n"
      "'hosts' puts rank r on the r-th node of the ranklist (mpirun --host with one entry per\n"
      "rank, --map-by seq), the default inside Slurm or with --hostfile.\n"
      "Every rank gets SKT_JOB, SKT_RESTART, SKT_MONITOR and its key SKT_MONITOR_KEY (new for\n"
      "each launch: what the ranks say is signed with it, and anything else that reaches\n"
      "skt-run's port is ignored), and the SKT_*, OPENBLAS_* and OMP_* variables set here\n"
      "(mpirun -x), however its node starts it. Through SKT_MONITOR the ranks tell skt-run\n"
      "that they live and commit: a run with a rank silent for --silence seconds\n"
      "(stopped, or its node frozen), or without a checkpoint for three times its own interval\n"
      "(at least --progress-floor; or --hang-timeout), is ended and relaunched like a failed one,\n"
      "unless its Slurm job is suspended (then skt-run waits for the resume).\n"
      "A launcher that outlives every rank's exit by --hang-timeout (else --progress-floor) is\n"
      "ended, and the ranks' exit codes are the run's; one stopped (SIGSTOP) for --silence\n"
      "seconds is continued (SIGCONT). Ranks that all reached MPI_Finalize and do not leave it\n"
      "within the same bound (a frozen MPI daemon or node) end the run: relaunched if a context\n"
      "is still open, else exit 8 (the work ended; a relaunch would do it again). So does a rank\n"
      "silent for --silence seconds after its last context ended, before MPI_Finalize.\n"
      "The nodes are probed every --probe-interval seconds while it runs, beside the watchdog.\n"
      "What skt-run knows of a job lives in its state directory (--state-dir; default\n"
      "${XDG_STATE_HOME:-~/.local/state}/skt-run/<job>): the same command resumes a job that was\n"
      "stopped (a signal, --max-restarts, out of spares, skt-run's own death) from its\n"
      "checkpoint, on the nodes it gives now (a requeued Slurm job's new allocation): a rank\n"
      "whose node is no longer given moves to an unused one, as after a node loss. Once the job\n"
      "has a checkpoint, another command, or the same from another directory, is refused (exit\n"
      "2; --new-command resumes with it): the checkpoint is of the computation the last launch\n"
      "made. A resume's first launch gets SKT_RESTART=auto, and so does the first launch of a\n"
      "job without a state whose nodes keep segments of it (skt-shm list on each; each rank is\n"
      "then placed on the node that holds its own): what became of the segments since, no\n"
      "skt-run saw, so the program resumes only a checkpoint of the same command line from the\n"
      "same directory, and refuses another's. One skt-run at a time drives a job; a second one\n"
      "is refused.\n"
      "The job outlives the operator's session: output that cannot be written (a pipe's reader\n"
      "gone, a terminal hung up) goes on in the state directory's 'output'; under nohup, SIGHUP\n"
      "stays ignored (else it stops the job, as SIGINT and SIGTERM do).\n"
      "Exit codes: 0 success (the job's segments removed); 2 bad usage or configuration, here or\n"
      "in the program (its limits and resources too: not retried); 3 the program found its\n"
      "checkpoint unrecoverable; 4 its result failed verification; 5 out of spares (or too\n"
      "few nodes to resume on); 6 --max-restarts reached; 7 the launcher refused the launch,\n"
      "saying why (not retried; one killed or silent is relaunched); 8 its work ended, but its\n"
      "ranks did not leave the program by themselves (stuck in or stopped before MPI_Finalize,\n"
      "or ended in it: killed, or by a failing launcher; its own code unknown; not retried);\n"
      "9 a relaunch stalled (every rank beat, no checkpoint came) at the epoch the run before\n"
      "it stalled at: a deadlock of the program, or work longer than the bound, that every\n"
      "relaunch would repeat; 128+N stopped by signal N.\n"
      "Every exit says what is left of the job and how to remove it.");
  Options o;
  app.add_option("--nodes", o.nodes, "nodes, comma separated (n1,n2,...)");
  app.add_option("--hostfile", o.hostfile, "a file of node names, one per line")
      ->check(CLI::ExistingFile);
  app.add_option("--ranks-per-node", o.ranks_per_node, "ranks on each node (default 1)");
  app.add_option("--spares", o.spares, "the last N nodes are spares");
  app.add_option("--spare-nodes", o.spare_nodes, "spare nodes, comma separated");
  app.add_flag("!--cold-spares", o.warm_spares,
               "do not reserve memory on the spares: by default, once a run has committed its "
               "first checkpoint, each spare gets, made and written ahead of a failure, the "
               "shared memory of one node's ranks (skt-shm reserve), which ranks relaunched "
               "there take over, so that their recovery does not pay for fresh memory; it holds "
               "that memory while the job runs");
  app.add_option("--job", o.job,
                 "job tag, stable across relaunches (default: slurm-<job id> in Slurm, else "
                 "run-<hash of the directory, nodes and command>: the same command here is the "
                 "same job)");
  app.add_option("--launch", o.launch,
                 "auto, local (virtual nodes on this host) or hosts (real nodes)");
  app.add_option("--launcher", o.launcher, "the mpirun to use");
  app.add_option("--launcher-args", o.launcher_args, "extra mpirun arguments, split at spaces");
  app.add_option("--probe", o.probe,
                 "slurm, ping, local or cmd:PROGRAM (default: slurm in Slurm, local for virtual "
                 "nodes, else ping)");
  app.add_option("--registry", o.registry,
                 "the local probe's registry (default: the state directory's registry/; or "
                 "SKT_RUN_REGISTRY)");
  app.add_option("--state-dir", o.state_dir, "where the job's state lives (see below)");
  app.add_option("--max-restarts", o.max_restarts, "relaunches allowed (default 5)");
  app.add_option("--backoff", o.backoff,
                 "seconds before the first relaunch, doubled for each next one");
  app.add_option("--silence", o.silence,
                 "seconds a rank may go without a word before its run counts as hung (and its "
                 "launcher may stay stopped before it is continued)")
      ->capture_default_str();
  app.add_option("--startup", o.startup,
                 "seconds every rank has to start before its run counts as hung")
      ->capture_default_str();
  app.add_option("--progress-floor", o.progress_floor,
                 "the least time without a checkpoint that counts as hung, once the job's cadence "
                 "is known; and the time a launcher may outlive every rank's exit")
      ->capture_default_str();
  app.add_option("--hang-timeout", o.hang_timeout,
                 "a run with no checkpoint for this many seconds is hung, whatever its cadence; "
                 "and the time a launcher may outlive every rank's exit");
  app.add_option("--probe-interval", o.probe_interval,
                 "seconds between probes of the nodes while a run is up (default 5; 0: never)");
  app.add_option("--probe-timeout", o.probe_timeout,
                 "seconds a probe program may take for a node before the node counts as dead "
                 "(it is killed then; the nodes are probed side by side), and squeue to say "
                 "whether a silent Slurm job is suspended")
      ->capture_default_str();
  app.add_option("--monitor-host", o.monitor_host,
                 "the address ranks report to (default: this host's name, 127.0.0.1 for virtual "
                 "nodes)");
  app.add_option("--ranklist-out", o.ranklist_out,
                 "also write the ranklist here (it is always in the state directory)");
  app.add_option("--shm-tool", o.shm_tool,
                 "the skt-shm program (default: next to skt-run, or in PATH)");
  app.add_option("--revive", o.revive,
                 "mark this virtual node alive again in the job's registry (after skt-inject), "
                 "and exit");
  app.add_flag("--dry-run", o.dry_run,
               "print the launch command (for a job with a state, the resume's), and exit");
  app.add_flag("--fresh-if-unrecoverable", o.fresh_if_unrecoverable,
               "when the program finds its checkpoint unrecoverable (exit 3: neither memory nor "
               "storage could serve), remove the job's segments (and its drained epochs in "
               "$SKT_DRAIN_DIR) and start it afresh instead of stopping");
  app.add_flag("--new-command", o.new_command,
               "resume a job whose last launch ran another command, or in another directory "
               "(refused without it: its checkpoint would be restored into another computation); "
               "for changes that leave the computation as it was");
  app.add_option("command", o.command, "the program and its arguments, after --")->expected(-1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  try {
    validate(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return kExitUsage;
  }
  if (!o.revive.empty()) {
    if (o.job.empty() && o.registry.empty() && o.state_dir.empty()) {
      fmt::print(stderr, "skt-run: --revive needs --job (or --state-dir, or --registry)\n");
      return kExitUsage;
    }
    const std::string registry = !o.registry.empty()    ? o.registry
                                 : !o.state_dir.empty() ? o.state_dir + "/registry"
                                                        : default_registry(o.job);
    const bool was_dead = mark_alive(registry, o.revive);
    fmt::print("node {} {} in {}\n", o.revive, was_dead ? "marked alive" : "was not marked dead",
               registry);
    return 0;
  }
  if (o.command.empty()) {
    fmt::print(stderr, "skt-run: no program: give it after --, with its arguments\n");
    return kExitUsage;
  }

  Log log;
  Plan plan;
  try {
    plan = plan_from(o, log);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return kExitUsage;
  }
  if (o.dry_run) {
    // The launch the command would make now: a job with a state resumes on its last layout.
    const auto loaded = read_state(o.state_dir);
    std::string how = "starts afresh";
    if (loaded && loaded->status == "unrecoverable" && !o.fresh_if_unrecoverable) {
      how = "would stop: its checkpoint was found unrecoverable";
    } else if (resumes(loaded) && loaded->ranklist.size() != plan.ranklist.size()) {
      how = fmt::format("would be refused: it ran {} ranks", loaded->ranklist.size());
    } else if (resumes(loaded) && command_changed(*loaded, o.directory, o.command) &&
               !o.new_command) {
      how = fmt::format("would be refused: {}", command_change(*loaded, o));
    } else if (resumes(loaded)) {
      try {
        resume_plan(loaded->ranklist, o, plan, log);
      } catch (const OutOfSpares& e) {
        fmt::print(stderr, "skt-run: {}\n", e.what());
        return kExitOutOfSpares;
      }
      how = fmt::format(
          "resumes after {} launch{}{}", loaded->launches, loaded->launches == 1 ? "" : "es",
          o.new_command ? " (--new-command)" : ", if this command wrote its checkpoint");
    } else if (!plan.local && !(loaded && loaded->status == "unrecoverable")) {
      how =
          "starts afresh, unless its nodes keep segments of an earlier run: skt-run counts them at "
          "launch, and the program resumes them if this command wrote them";
    } else if (const auto found = find_segments(o, plan); found && found->count > 0) {
      how = "resumes the segments skt-run has no state of, if this command wrote them";
    }
    fmt::print("{}\n", shell_quoted(launch_command(o, plan)));
    fmt::print("# job {} ({}), {} ranks on {}, spares: {}, probe {}, state in {}\n", o.job, how,
               plan.ranklist.size(), fmt::join(nodes_of(plan.ranklist), ","),
               plan.spares.empty() ? "none" : fmt::format("{}", fmt::join(plan.spares, ",")),
               plan.probe->name(), o.state_dir);
    return 0;
  }
  if (find_program(o.launcher).empty()) {
    fmt::print(stderr,
               "skt-run: the launcher '{}' is not found (install openmpi-bin or give --launcher)\n",
               o.launcher);
    return kExitLaunchFailed;
  }
  // Only virtual nodes share this host's files; a real node may have the program where this one
  // has not, and if it has not, its launcher says so (exit 7).
  if (plan.local && find_program(o.command[0]).empty()) {
    fmt::print(stderr, "skt-run: the program '{}' is not found\n", o.command[0]);
    return kExitUsage;
  }
  std::unique_ptr<StateDir> dir;
  try {
    dir = std::make_unique<StateDir>(o.state_dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: job {}: {}\n", o.job, e.what());
    return kExitUsage;
  }

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fmt::print(stderr, "skt-run: pipe: {}\n", std::strerror(errno));
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // One ignored already stays so: nohup ignores SIGHUP so that the job outlives the session,
    // and a shell without job control SIGINT for a command started with &.
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaction(sig, &action, nullptr);
  }
  output::divert_failures_to(dir->file("output"));
  Supervisor supervisor(o, plan, *dir, log);
  try {
    return supervisor.run();
  } catch (const WriteError& e) {
    output::write(STDERR_FILENO,
                  fmt::format("skt-run: job {}: {}; nothing was launched: make that place "
                              "writable, or give another (--state-dir, --ranklist-out)\n",
                              o.job, e.what()));
    return kExitUsage;
  }
}

}  // namespace
}  // namespace skt::run

int main(int argc, char** argv) {
  // Started with a standard descriptor closed (`>&-`), skt-run would open its state or a socket
  // there and write its output into it.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
  try {
    return skt::run::run(argc, argv);
  } catch (const std::exception& e) {
    skt::run::output::write(STDERR_FILENO, fmt::format("skt-run: {}\n", e.what()));
    return 1;
  }
}
