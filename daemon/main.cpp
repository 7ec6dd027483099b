// skt-run: launches an MPI program on a ranklist, and when a run fails, probes the nodes, swaps
// each dead node for a spare (healthy ranks stay where their memory is) and relaunches, until the
// program succeeds or cannot go on.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <thread>

#include "daemon/probe.hpp"
#include "daemon/process.hpp"
#include "daemon/ranklist.hpp"

extern char** environ;

namespace skt::run {
namespace {

// skt-run's own exit codes, beyond the program's 0, 2, 3 and 4 which it passes on.
constexpr int kExitOutOfSpares = 5;
constexpr int kExitRestartBudget = 6;
constexpr int kExitLaunchFailed = 7;

std::atomic<pid_t> g_child{-1};
std::atomic<int> g_signal{0};

extern "C" void forward_signal(int sig) {
  g_signal = sig;
  const pid_t child = g_child;
  if (child > 0) ::kill(child, sig);
}

using Clock = std::chrono::steady_clock;

class Log {
 public:
  template <class... Args>
  void operator()(fmt::format_string<Args...> format, Args&&... args) {
    const auto now = std::chrono::system_clock::now();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    fmt::print(stderr, "[skt-run {:%H:%M:%S}.{:03d} +{:.3f}s] {}\n",
               fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms, seconds_since(start_),
               fmt::format(format, std::forward<Args>(args)...));
    std::fflush(stderr);
  }
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
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
  std::string registry = default_registry();
  int max_restarts = 5;
  double backoff = 0;
  std::string ranklist_out;
  std::string shm_tool;
  bool dry_run = false;
  bool fresh_if_unrecoverable = false;
  std::vector<std::string> command;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> split_words(const std::string& text) {
  std::stringstream in(text);
  std::vector<std::string> out;
  std::string w;
  while (in >> w)
    out.push_back(w);
  return out;
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

std::string fresh_job_tag() {
  const auto t = std::chrono::system_clock::now().time_since_epoch();
  return fmt::format("skt-{:x}-{:x}", std::chrono::duration_cast<std::chrono::seconds>(t).count(),
                     ::getpid());
}

// skt-shm: next to this program (installed), in the build tree's tools/, or in PATH.
std::string locate_shm_tool() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& candidate :
         {self.parent_path() / "skt-shm", self.parent_path() / ".." / "tools" / "skt-shm"}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal();
    }
  }
  return find_program("skt-shm");
}

struct Plan {
  std::vector<std::string> ranklist;
  std::vector<std::string> spares;
  bool local = true;
  std::unique_ptr<Probe> probe;
};

Plan plan_from(Options& o, Log& log) {
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
    if (*o.spares < 0 || *o.spares >= static_cast<int>(all.size())) {
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
  if (o.launch != "auto" && o.launch != "local" && o.launch != "rankfile") {
    throw std::invalid_argument("--launch '" + o.launch + "': expected auto, local or rankfile");
  }
  const std::string probe = o.probe == "auto" ? (in_slurm     ? "slurm"
                                                 : plan.local ? "local"
                                                              : "ping")
                                              : o.probe;
  plan.probe = make_probe(probe, o.registry);
  if (o.job.empty()) {
    const char* id = std::getenv("SLURM_JOB_ID");
    o.job = id != nullptr ? std::string("slurm-") + id : fresh_job_tag();
  }
  if (!valid_node_name(o.job))
    throw std::invalid_argument("--job '" + o.job + "': letters, digits, '.', '_', '-' only");
  if (o.ranklist_out.empty()) o.ranklist_out = "skt-run-" + o.job + ".ranklist";
  return plan;
}

// Settings the program reads, forwarded by name to every rank on other hosts.
std::vector<std::string> forwarded_variables() {
  std::vector<std::string> out;
  for (char** e = ::environ; *e != nullptr; ++e) {
    const std::string name = std::string(*e).substr(0, std::string(*e).find('='));
    if (name.rfind("SKT_", 0) == 0 || name.rfind("OPENBLAS_", 0) == 0 ||
        name.rfind("OMP_", 0) == 0) {
      out.push_back(name);
    }
  }
  return out;
}

std::vector<std::string> launch_command(const Options& o, const Plan& plan,
                                        const std::string& rankfile) {
  std::vector<std::string> argv{o.launcher};
  for (const auto& a : split_words(o.launcher_args))
    argv.push_back(a);
  if (plan.local) {
    // Virtual nodes of this host: one app context per node, which names it in SKT_NODE.
    for (const auto& node : nodes_of(plan.ranklist)) {
      const auto count = std::count(plan.ranklist.begin(), plan.ranklist.end(), node);
      argv.insert(argv.end(), {"-n", std::to_string(count), "env", "SKT_NODE=" + node});
      argv.insert(argv.end(), o.command.begin(), o.command.end());
      argv.push_back(":");
    }
    argv.pop_back();
    return argv;
  }
  // --host as well: under Slurm, mpirun would otherwise start its daemons on every node of the
  // allocation, the dead ones included, and fail.
  std::vector<std::string> hosts;
  for (const auto& node : nodes_of(plan.ranklist)) {
    hosts.push_back(
        fmt::format("{}:{}", node, std::count(plan.ranklist.begin(), plan.ranklist.end(), node)));
  }
  argv.insert(argv.end(), {"--host", fmt::format("{}", fmt::join(hosts, ",")), "--rankfile",
                           rankfile, "-n", std::to_string(plan.ranklist.size())});
  for (const auto& name : forwarded_variables())
    argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

void write_ranklist(const std::string& path, const std::vector<std::string>& ranklist) {
  std::ofstream out(path);
  for (std::size_t r = 0; r < ranklist.size(); ++r)
    out << r << ' ' << ranklist[r] << '\n';
}

// Removes the job's segments on every node of the ranklist.
void clean_segments(const Options& o, const Plan& plan, const std::string& dir, Log& log) {
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) {
    log("skt-shm not found: the job's segments are left; remove them with skt-shm clean --job {}",
        o.job);
    return;
  }
  Captured r;
  if (plan.local) {
    r = capture({tool, "clean", "--job", o.job}, {{"SKT_LOG", "off"}});
  } else {
    const auto nodes = nodes_of(plan.ranklist);
    const std::string file = dir + "/clean.rankfile";
    std::ofstream(file) << rankfile_text(nodes);
    std::vector<std::string> argv{o.launcher};
    for (const auto& a : split_words(o.launcher_args))
      argv.push_back(a);
    argv.insert(argv.end(), {"--host", fmt::format("{}", fmt::join(nodes, ",")), "--rankfile", file,
                             "-n", std::to_string(nodes.size()), tool, "clean", "--job", o.job});
    r = capture(argv, {{"SKT_LOG", "off"}});
  }
  log("removed the job's segments on {} node(s){}", nodes_of(plan.ranklist).size(),
      r.code == 0 ? "" : fmt::format(" (skt-shm exit {}: some may be left)", r.code));
}

// Passes the program's output through, noting its first line and the epoch it says it restored.
struct RunOutput {
  std::optional<double> first_output;  // seconds after the launch
  std::optional<long> restored_epoch;
};

RunOutput pass_through(int fd, Clock::time_point launched) {
  RunOutput seen;
  static const std::regex epoch(R"((restored|recovered) epoch (\d+))");
  std::string pending;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!seen.first_output) seen.first_output = Log::seconds_since(launched);
    std::fwrite(buffer, 1, static_cast<std::size_t>(n), stdout);
    std::fflush(stdout);
    pending.append(buffer, static_cast<std::size_t>(n));
    std::size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      std::smatch m;
      const std::string line = pending.substr(0, end);
      if (std::regex_search(line, m, epoch)) seen.restored_epoch = std::stol(m[2]);
      pending.erase(0, end + 1);
    }
  }
  return seen;
}

int run(int argc, char** argv) {
  CLI::App app{
      "skt-run: runs an MPI program on a list of nodes and, when a run fails, replaces dead\n"
      "nodes with spares (healthy ranks stay on their nodes, where their checkpoints are)\n"
      "and relaunches it with the same SKT_JOB, until it succeeds.\n"};
  app.footer(
      "Nodes come from --nodes, --hostfile, or the Slurm allocation (SLURM_JOB_NODELIST); the "
      "last\n"
      "--spares of them, or --spare-nodes, are spares. Launch 'local' runs every node as a "
      "virtual\n"
      "node of this host (one app context per node, SKT_NODE set); 'rankfile' places ranks on "
      "real\n"
      "nodes with an Open MPI rankfile (default inside Slurm or with --hostfile). Each run gets\n"
      "SKT_JOB and SKT_RESTART (0, then the relaunch count).\n"
      "Exit codes: 0 success (the job's segments removed); 2 bad usage, here or in the program;\n"
      "3 the program found its checkpoint unrecoverable; 4 its result failed verification;\n"
      "5 out of spares; 6 --max-restarts reached; 7 the launcher could not start;\n"
      "128+N stopped by signal N (the checkpoints are kept: relaunch with --job TAG).");
  Options o;
  app.add_option("--nodes", o.nodes, "nodes, comma separated (n1,n2,...)");
  app.add_option("--hostfile", o.hostfile, "a file of node names, one per line")
      ->check(CLI::ExistingFile);
  app.add_option("--ranks-per-node", o.ranks_per_node, "ranks on each node")
      ->check(CLI::PositiveNumber);
  app.add_option("--spares", o.spares, "the last N nodes are spares");
  app.add_option("--spare-nodes", o.spare_nodes, "spare nodes, comma separated");
  app.add_option("--job", o.job,
                 "job tag, stable across relaunches (default: slurm-<job id>, else fresh)");
  app.add_option("--launch", o.launch, "auto, local (virtual nodes on this host) or rankfile");
  app.add_option("--launcher", o.launcher, "the mpirun to use");
  app.add_option("--launcher-args", o.launcher_args, "extra mpirun arguments, split at spaces");
  app.add_option("--probe", o.probe,
                 "slurm, ping, local or cmd:PROGRAM (default: slurm in Slurm, else local)");
  app.add_option("--registry", o.registry,
                 "the local probe's registry directory (SKT_RUN_REGISTRY)");
  app.add_option("--max-restarts", o.max_restarts, "relaunches allowed")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--backoff", o.backoff,
                 "seconds before the first relaunch, doubled for each next one")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ranklist-out", o.ranklist_out,
                 "where the ranklist is written (default skt-run-<job>.ranklist)");
  app.add_option("--shm-tool", o.shm_tool,
                 "the skt-shm program (default: next to skt-run, or in PATH)");
  app.add_flag("--dry-run", o.dry_run, "print the launch command and the rankfile, and exit");
  app.add_flag("--fresh-if-unrecoverable", o.fresh_if_unrecoverable,
               "when the program finds its checkpoint unrecoverable (exit 3), remove the job's "
               "segments and start it afresh instead of stopping");
  app.add_option("command", o.command, "the program and its arguments, after --")
      ->required()
      ->expected(-1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  Log log;
  Plan plan;
  try {
    plan = plan_from(o, log);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return 2;
  }
  if (find_program(o.launcher).empty()) {
    fmt::print(stderr,
               "skt-run: the launcher '{}' is not found (install openmpi-bin or give --launcher)\n",
               o.launcher);
    return kExitLaunchFailed;
  }
  if (find_program(o.command[0]).empty()) {
    fmt::print(stderr, "skt-run: the program '{}' is not found\n", o.command[0]);
    return 2;
  }
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("skt-run-" + o.job + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  const std::string rankfile = dir + "/rankfile";

  if (o.dry_run) {
    fmt::print("{}\n", shell_quoted(launch_command(o, plan, rankfile)));
    if (!plan.local) fmt::print("# {}:\n{}", rankfile, rankfile_text(plan.ranklist));
    fmt::print("# job {}, {} ranks on {}, spares: {}, probe {}\n", o.job, plan.ranklist.size(),
               fmt::join(nodes_of(plan.ranklist), ","),
               plan.spares.empty() ? "none" : fmt::format("{}", fmt::join(plan.spares, ",")),
               plan.probe->name());
    return 0;
  }

  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  log("job {}: {} ranks on {} ({} per node), spares: {}; probe {}; launch {}", o.job,
      plan.ranklist.size(), fmt::join(nodes_of(plan.ranklist), ","), o.ranks_per_node,
      plan.spares.empty() ? "none" : fmt::format("{}", fmt::join(plan.spares, ",")),
      plan.probe->name(), plan.local ? "local (virtual nodes)" : "rankfile");
  std::optional<Clock::time_point> failed_at;
  bool fresh = false;  // the next launch starts afresh: SKT_RESTART=0
  for (int attempt = 0;; ++attempt) {
    write_ranklist(o.ranklist_out, plan.ranklist);
    if (!plan.local) std::ofstream(rankfile) << rankfile_text(plan.ranklist);
    const auto argv_run = launch_command(o, plan, rankfile);
    const auto launched = Clock::now();
    Child child;
    try {
      child =
          spawn(argv_run,
                {{"SKT_JOB", o.job}, {"SKT_RESTART", fresh ? "0" : std::to_string(attempt)}}, true);
      fresh = false;
    } catch (const std::exception& e) {
      log("cannot launch: {}", e.what());
      return kExitLaunchFailed;
    }
    g_child = child.pid;
    if (g_signal != 0) ::kill(child.pid, g_signal);
    if (failed_at) {
      log("relaunched (run {}) {:.3f} s after the failure was seen", attempt + 1,
          Log::seconds_since(*failed_at));
    } else {
      log("launched: {}", shell_quoted(argv_run));
    }
    const RunOutput seen = pass_through(child.out.get(), launched);
    const int code = wait_exit(child.pid);
    g_child = -1;
    if (failed_at && seen.first_output) {
      log("the relaunched program ran {:.3f} s after the failure was seen (its first output)",
          std::chrono::duration<double>(launched - *failed_at).count() + *seen.first_output);
    }
    if (seen.restored_epoch) log("the program reports restored epoch {}", *seen.restored_epoch);
    if (g_signal != 0) {
      log("stopped by signal {} (run exit {}); the job's checkpoints are kept: relaunch with --job "
          "{}",
          g_signal.load(), code, o.job);
      return 128 + g_signal;
    }
    if (code == 0) {
      log("run {} succeeded", attempt + 1);
      clean_segments(o, plan, dir, log);
      log("final ranklist in {}", o.ranklist_out);
      return 0;
    }
    if (code == 3 && o.fresh_if_unrecoverable && attempt < o.max_restarts) {
      log("run {} found its checkpoint unrecoverable (exit 3): removing the job's segments and "
          "starting afresh (--fresh-if-unrecoverable)",
          attempt + 1);
      clean_segments(o, plan, dir, log);
      fresh = true;
      failed_at = Clock::now();
      continue;
    }
    if (code == 2 || code == 3 || code == 4) {
      log("run {} ended with exit {}: {}; not relaunching", attempt + 1, code,
          code == 2 ? "bad usage or configuration, or a relaunch that does not match its checkpoint"
          : code == 3 ? "unrecoverable (a group lost more members than it tolerates)"
                      : "the result failed verification");
      return code;
    }
    failed_at = Clock::now();
    log("run {} failed (exit {}); probing {} node(s) and {} spare(s) with {}", attempt + 1, code,
        nodes_of(plan.ranklist).size(), plan.spares.size(), plan.probe->name());
    if (attempt >= o.max_restarts) {
      log("--max-restarts {} reached; giving up (the job's checkpoints are kept)", o.max_restarts);
      return kExitRestartBudget;
    }
    auto probed = nodes_of(plan.ranklist);
    probed.insert(probed.end(), plan.spares.begin(), plan.spares.end());
    std::set<std::string> dead;
    try {
      dead = plan.probe->dead(probed);
      log("probed in {:.3f} s: {}", Log::seconds_since(*failed_at),
          dead.empty() ? std::string("every node is alive (a process crash)")
                       : fmt::format("dead: {}", fmt::join(dead, ",")));
    } catch (const std::exception& e) {
      log("probe failed: {}; relaunching on the same nodes", e.what());
    }
    if (!dead.empty()) {
      try {
        const Replacement r = replace_dead_nodes(plan.ranklist, dead, plan.spares);
        for (const auto& [from, to] : r.replaced)
          log("replacing node {} by spare {}", from, to);
        plan.ranklist = r.ranklist;
        plan.spares = r.spares_left;
      } catch (const OutOfSpares& e) {
        log("out of spares: {}; giving up (the job's checkpoints are kept)", e.what());
        write_ranklist(o.ranklist_out, plan.ranklist);
        return kExitOutOfSpares;
      }
    }
    if (o.backoff > 0) {
      const double wait = o.backoff * static_cast<double>(1 << std::min(attempt, 20));
      log("waiting {:.1f} s before relaunching", wait);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }
}

}  // namespace
}  // namespace skt::run

int main(int argc, char** argv) {
  try {
    return skt::run::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-run: {}\n", e.what());
    return 1;
  }
}
