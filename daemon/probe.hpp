// Health probes: which of a set of nodes are dead, asked of Slurm, of the network, of the local
// virtual-node registry, or of any program.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace skt::run {

// What a probe found: the dead nodes, and why for those it has more to say of than that.
struct Probed {
  std::set<std::string> dead;
  std::map<std::string, std::string> why;  // node -> reason, for some of the dead
  // "n2 (its probe did not answer within 10 s),n4"
  std::string describe() const;
};

class Probe {
 public:
  virtual ~Probe() = default;
  // Bounded in time (see make_probe); safe to call from another thread than skt-run's loop.
  virtual Probed dead(const std::vector<std::string>& nodes) = 0;
  virtual std::string name() const = 0;
};

// `spec`: slurm, ping, local, or cmd:PROGRAM. `registry` is the local probe's directory. A probe
// program still running `timeout` seconds after it started is killed: its node counts as dead
// (scontrol's silence fails the probe).
std::unique_ptr<Probe> make_probe(const std::string& spec, const std::string& registry,
                                  double timeout);

// `scontrol show node -o` output: node name → its state words (IDLE, DOWN, DRAIN, ...).
std::map<std::string, std::set<std::string>> parse_slurm_states(const std::string& text);

// DOWN, DRAIN (and DRAINED/DRAINING), FAIL (and FAILING) and NOT_RESPONDING are dead.
bool slurm_state_is_dead(const std::set<std::string>& state);

// Whether Slurm job `id` is suspended (scontrol suspend, or preemption by suspension): its
// processes are stopped on purpose, for as long as it takes. Slurm may not say (its controller
// restarting or frozen): then `suspended` is empty and `trouble` says why. Bounded by `timeout`.
struct SuspendedAnswer {
  std::optional<bool> suspended;
  std::string trouble;
};
SuspendedAnswer slurm_job_suspended(const std::string& id, double timeout);

// The local registry of a job: a directory where a file NODE.dead marks a virtual node as dead.
// Its default is the job's state directory's "registry" (SKT_RUN_REGISTRY overrides it).
std::string default_registry(const std::string& job);
void mark_dead(const std::string& registry, const std::string& node);
// Returns whether the node was marked dead.
bool mark_alive(const std::string& registry, const std::string& node);

}  // namespace skt::run
