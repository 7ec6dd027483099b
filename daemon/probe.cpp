#include "daemon/probe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "daemon/process.hpp"
#include "daemon/state.hpp"

namespace skt::run {

namespace {

class SlurmProbe : public Probe {
 public:
  explicit SlurmProbe(double timeout) : timeout_(timeout) {}
  Probed dead(const std::vector<std::string>& nodes) override {
    const auto result = capture_each({{"scontrol", "show", "node", "-o"}}, timeout_).front();
    if (result.timed_out) {
      throw std::runtime_error(
          fmt::format("scontrol show node did not answer within {} s (--probe-timeout)", timeout_));
    }
    if (result.code != 0) {
      throw std::runtime_error(fmt::format("scontrol show node failed (exit {})", result.code));
    }
    const auto states = parse_slurm_states(result.out);
    Probed out;
    for (const auto& node : nodes) {
      const auto it = states.find(node);
      // A node Slurm no longer knows is as good as dead.
      if (it == states.end() || slurm_state_is_dead(it->second)) out.dead.insert(node);
    }
    return out;
  }
  std::string name() const override { return "slurm"; }

 private:
  double timeout_;
};

// Any program that answers for one node with its exit code (0: healthy), asked of every node at
// once. A node it does not answer for within the timeout is dead, as one that does not answer a
// ping.
class CommandProbe : public Probe {
 public:
  CommandProbe(std::vector<std::string> prefix, std::string name, double timeout)
      : prefix_(std::move(prefix)), name_(std::move(name)), timeout_(timeout) {}
  Probed dead(const std::vector<std::string>& nodes) override {
    std::vector<std::vector<std::string>> commands;
    for (const auto& node : nodes) {
      commands.push_back(prefix_);
      commands.back().push_back(node);
    }
    const auto answers = capture_each(commands, timeout_);
    Probed out;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (answers[i].code != 0) out.dead.insert(nodes[i]);
      if (answers[i].timed_out) {
        out.why[nodes[i]] =
            fmt::format("its probe did not answer within {} s, --probe-timeout", timeout_);
      }
    }
    return out;
  }
  std::string name() const override { return name_; }

 private:
  std::vector<std::string> prefix_;
  std::string name_;
  double timeout_;
};

class LocalProbe : public Probe {
 public:
  explicit LocalProbe(std::string registry) : registry_(std::move(registry)) {}
  Probed dead(const std::vector<std::string>& nodes) override {
    Probed out;
    for (const auto& node : nodes) {
      if (std::filesystem::exists(std::filesystem::path(registry_) / (node + ".dead")))
        out.dead.insert(node);
    }
    return out;
  }
  std::string name() const override { return "local (" + registry_ + ")"; }

 private:
  std::string registry_;
};

}  // namespace

std::string Probed::describe() const {
  std::vector<std::string> named;
  for (const auto& node : dead) {
    const auto it = why.find(node);
    named.push_back(it == why.end() ? node : fmt::format("{} ({})", node, it->second));
  }
  return fmt::format("{}", fmt::join(named, ","));
}

std::unique_ptr<Probe> make_probe(const std::string& spec, const std::string& registry,
                                  double timeout) {
  if (spec == "slurm") return std::make_unique<SlurmProbe>(timeout);
  if (spec == "local") return std::make_unique<LocalProbe>(registry);
  if (spec == "ping") {
    if (find_program("ping").empty()) {
      throw std::invalid_argument("--probe ping: 'ping' is not installed (Debian: iputils-ping)");
    }
    return std::make_unique<CommandProbe>(std::vector<std::string>{"ping", "-c", "1", "-W", "1"},
                                          "ping", timeout);
  }
  if (spec.rfind("cmd:", 0) == 0 && spec.size() > 4) {
    const std::string program = spec.substr(4);
    if (find_program(program).empty()) {
      throw std::invalid_argument("--probe " + spec + ": '" + program +
                                  "' is not an executable program");
    }
    return std::make_unique<CommandProbe>(std::vector<std::string>{program}, spec, timeout);
  }
  throw std::invalid_argument("--probe '" + spec + "': expected slurm, ping, local or cmd:PROGRAM");
}

SuspendedAnswer slurm_job_suspended(const std::string& id, double timeout) {
  const auto result =
      capture_each({{"squeue", "--noheader", "--jobs", id, "--format", "%T"}}, timeout).front();
  if (result.timed_out) {
    return {std::nullopt,
            fmt::format("squeue did not answer within {} s, --probe-timeout", timeout)};
  }
  if (result.code != 0) return {std::nullopt, fmt::format("squeue failed, exit {}", result.code)};
  std::stringstream words(result.out);
  std::string state;
  words >> state;
  return {state == "SUSPENDED", {}};
}

std::map<std::string, std::set<std::string>> parse_slurm_states(const std::string& text) {
  std::map<std::string, std::set<std::string>> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream words(line);
    std::string word, node, state;
    while (words >> word) {
      if (word.rfind("NodeName=", 0) == 0) node = word.substr(9);
      if (word.rfind("State=", 0) == 0) state = word.substr(6);
    }
    if (node.empty()) continue;
    std::set<std::string> parts;
    // "IDLE+DRAIN", "DOWN*": flags joined by '+', '*' for not responding.
    if (!state.empty() && state.back() == '*') {
      parts.insert("NOT_RESPONDING");
      state.pop_back();
    }
    std::stringstream flags(state);
    std::string flag;
    while (std::getline(flags, flag, '+')) {
      if (!flag.empty()) parts.insert(flag);
    }
    out[node] = parts;
  }
  return out;
}

bool slurm_state_is_dead(const std::set<std::string>& state) {
  for (const char* bad :
       {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING"}) {
    if (state.count(bad) != 0) return true;
  }
  return false;
}

std::string default_registry(const std::string& job) {
  if (const char* r = std::getenv("SKT_RUN_REGISTRY")) return r;
  return default_state_dir(job) + "/registry";
}

bool mark_alive(const std::string& registry, const std::string& node) {
  std::error_code ec;
  return std::filesystem::remove(std::filesystem::path(registry) / (node + ".dead"), ec);
}

void mark_dead(const std::string& registry, const std::string& node) {
  std::filesystem::create_directories(registry);
  std::ofstream(std::filesystem::path(registry) / (node + ".dead")) << "dead\n";
}

}  // namespace skt::run
