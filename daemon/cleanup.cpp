#include "daemon/cleanup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <sstream>
#include <string_view>

#include "daemon/process.hpp"
#include "daemon/ranklist.hpp"
#include "libselfckpt/internal/names.hpp"

namespace skt::run {
namespace {

std::string locate_shm_tool() {
  return locate_tool("skt-shm");
}

// The tags cleaning up the job removes: its own and the sub-jobs its ranks reported, exactly.
std::string exact_tags(const Options& o, const std::vector<std::string>& sub_jobs) {
  std::string tags = o.job;
  for (const auto& sub : sub_jobs)
    tags += "," + sub;
  return tags;
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

// An skt-shm command `args` run for `node`: through the launcher on that host, or here for a
// virtual node (--node).
std::vector<std::string> on_node(const Options& o, const Plan& plan, const std::string& node,
                                 std::vector<std::string> args) {
  if (plan.local) {
    args.insert(args.end(), {"--node", node});
    return args;
  }
  const std::vector<std::string> one{node};
  std::vector<std::string> argv = launcher_prefix(o, &one);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A checkpoint segment's line ends with its group: "group G ranks R,R,...", the job's ranks in
// it (skt-shm list).
void read_group(const std::vector<std::string>& words, std::vector<int>& group_of_rank) {
  const auto at = std::find(words.begin(), words.end(), "group");
  if (words.end() - at < 4 || at[2] != "ranks") return;
  int group = -1;
  if (std::from_chars(at[1].data(), at[1].data() + at[1].size(), group).ec != std::errc()) return;
  std::string members = at[3];
  std::replace(members.begin(), members.end(), ',', ' ');
  std::istringstream in(members);
  for (std::size_t rank = 0; in >> rank;) {
    if (rank < group_of_rank.size()) group_of_rank[rank] = group;
  }
}

}  // namespace

std::optional<SegmentsFound> find_segments(const Options& o, const Plan& plan,
                                           const std::set<std::string>& leave_out) {
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) return std::nullopt;
  const std::vector<std::string> list{tool, "list", "--job", o.job};
  Captured r;
  if (plan.local) {
    r = capture(list, {{"SKT_LOG", "off"}});
  } else {
    // A spare that does not answer must not hide the nodes that do: then without the spares.
    auto nodes = nodes_of(plan.ranklist);
    std::erase_if(nodes, [&](const std::string& node) { return leave_out.count(node) != 0; });
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
  found.group_of_rank.assign(plan.ranklist.size(), -1);
  found.bytes_of_rank.assign(plan.ranklist.size(), 0);
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
    if (words[2] == o.job) read_group(words, found.group_of_rank);
    std::size_t rank = 0;
    const auto [end, ec] =
        std::from_chars(words[3].data(), words[3].data() + words[3].size(), rank);
    std::uint64_t bytes = 0;
    if (ec == std::errc() && rank < found.bytes_of_rank.size() && words.size() > 7 &&
        std::from_chars(words[7].data(), words[7].data() + words[7].size(), bytes).ec ==
            std::errc()) {
      found.bytes_of_rank[rank] += bytes;
    }
    if (!found.node_of_rank) continue;
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

std::map<std::string, std::uint64_t> room_on_nodes(const Options& o, const Plan& plan,
                                                   const std::vector<std::string>& nodes) {
  std::map<std::string, std::uint64_t> room;
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) return room;
  const auto keep_free = static_cast<std::uint64_t>(o.keep_free_mib * (1 << 20));
  std::vector<std::vector<std::string>> commands;
  for (const auto& node : nodes)
    commands.push_back(on_node(o, plan, node, {tool, "room"}));
  const auto answers = capture_each(commands, o.probe_timeout);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::uint64_t bytes = 0;
    // "BYTES bytes new segments can take on this node (...)", after the launcher's lines.
    std::istringstream lines(answers[i].out);
    bool said = false;
    for (std::string line; std::getline(lines, line);) {
      if (line.find(" bytes new segments can take") != std::string::npos)
        said = std::sscanf(line.c_str(), "%" SCNu64, &bytes) == 1;
    }
    if (answers[i].code == 0 && !answers[i].timed_out && said)
      room[nodes[i]] = bytes > keep_free ? bytes - keep_free : 0;
  }
  return room;
}

std::string room_source(const Options& o) {
  return o.keep_free_mib > 0
             ? fmt::format("skt-shm room, less --keep-free {:g} MiB", o.keep_free_mib)
             : std::string("skt-shm room");
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

namespace {

// Empty when the node has the memory one node's segments of the job take (those of the largest,
// where the job has any yet), beside --keep-free; else why not.
std::string room_for_a_node_of_the_job(const Options& o, const Plan& plan, const std::string& node,
                                       const std::string& tool) {
  const auto sizes = segment_sizes_of_a_node(o, plan, tool);
  if (!sizes || sizes->empty()) return "";
  const auto need = std::accumulate(sizes->begin(), sizes->end(), std::uint64_t{0});
  const auto room = room_on_nodes(o, plan, {node});
  if (room.count(node) == 0) return "skt-shm room there said nothing within --probe-timeout";
  if (room.at(node) >= need) return "";
  constexpr double kMiB = 1 << 20;
  return fmt::format(
      "new segments can take {:.1f} MiB there ({}), less than the {:.1f} MiB of one node's "
      "segments of the job; it is asked again at the next failure",
      static_cast<double>(room.at(node)) / kMiB, room_source(o), static_cast<double>(need) / kMiB);
}

}  // namespace

std::string take_back_check(const Options& o, const Plan& plan, const std::string& node,
                            int& removed) {
  removed = 0;
  const std::string tool = o.shm_tool.empty() ? locate_shm_tool() : o.shm_tool;
  if (tool.empty()) return "skt-shm not found, to remove what the job left there";
  const Captured r =
      capture_each({on_node(o, plan, node, {tool, "clean", "--job", o.job})}, o.probe_timeout)
          .front();
  if (r.timed_out) return "the launcher did not start skt-shm there within --probe-timeout";
  std::istringstream lines(r.out);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
    int n = 0;
    if (std::sscanf(line.c_str(), "%d segment", &n) == 1) removed = n;
  }
  if (r.code != 0)
    return fmt::format("skt-shm clean --job {} there: exit {}, {}", o.job, r.code, last);
  // The memory a spare must give the job's ranks: another job's segments there would take it.
  const Captured listed =
      capture_each({on_node(o, plan, node, {tool, "list"})}, o.probe_timeout).front();
  if (listed.timed_out || listed.code != 0) {
    return fmt::format("skt-shm list there: {}",
                       listed.timed_out ? std::string("no answer within --probe-timeout")
                                        : fmt::format("exit {}", listed.code));
  }
  const auto others = other_jobs_segments(o.job, listed.out);
  if (others.empty()) return room_for_a_node_of_the_job(o, plan, node, tool);
  std::vector<std::string> named;
  std::string first;
  for (const auto& [job, bytes] : others) {
    named.push_back(fmt::format("{} ({:.1f} MiB)", job, static_cast<double>(bytes) / 1048576.0));
    if (first.empty()) first = job;
  }
  return fmt::format(
      "it holds segments of another job, {}: the memory the job's ranks need there is taken. It "
      "stays out of the spares until they are removed (skt-shm clean --job {} --node {}, on it), "
      "and is asked again at the next failure",
      fmt::join(named, ", "), first, node);
}

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
    std::vector<std::string> args{tool, "reserve", "--job", o.job, "--bytes", bytes};
    if (const char* huge = std::getenv("SKT_HUGE_PAGES"); huge != nullptr && *huge == '1')
      args.push_back("--huge-pages");
    commands.push_back(on_node(o, plan, spare, std::move(args)));
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

void clean_drains(const Options& o, const Plan& plan, const std::vector<std::string>& sub_jobs,
                  Log& log) {
  const auto runs = run_drain_tool(o, plan, {"remove", "--exactly", exact_tags(o, sub_jobs)}, log);
  if (!runs) return;
  const bool failed =
      std::any_of(runs->begin(), runs->end(), [](const Captured& r) { return r.code != 0; });
  log("removed the job's drained epochs in {}{}", std::getenv("SKT_DRAIN_DIR"),
      failed ? " (skt-drain failed: some may be left)" : "");
}

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

}  // namespace skt::run
