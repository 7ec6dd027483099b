#include "daemon/supervisor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "daemon/node_pool.hpp"
#include "daemon/output.hpp"
#include "daemon/ranklist.hpp"
#include "libselfckpt/internal/monitor_wire.hpp"
#include "libselfckpt/internal/names.hpp"

namespace skt::run {
namespace {

// A key for the monitor's datagrams, from the system's random source.
std::string new_monitor_key() {
  std::string key(skt::wire::kKeyBytes, '\0');
  if (::getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size()))
    throw std::system_error(errno, std::generic_category(), "getrandom (the monitor's key)");
  return key;
}

}  // namespace

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

int Supervisor::run() {
  bool fresh = false;
  if (const auto refused = take_up(fresh)) return *refused;
  announce();
  return launch_until_done(fresh);
}

std::optional<int> Supervisor::take_up(bool& fresh) {
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
    if (const auto refused = resume_from_state(*loaded)) return refused;
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
  fresh = !resuming;
  if (fresh) return inherit_without_state(fresh, loaded && loaded->status == "unrecoverable");
  return std::nullopt;
}

std::optional<int> Supervisor::resume_from_state(const JobState& loaded) {
  if (loaded.ranklist.size() != plan_.ranklist.size()) {
    log_(
        "job {} ran {} ranks ({}), this command gives {}: resume it with as many ranks, or "
        "remove its checkpoints (skt-shm clean --job {}) and its state ({})",
        o_.job, loaded.ranklist.size(), dir_.file("state"), plan_.ranklist.size(), o_.job,
        dir_.path());
    return kExitUsage;
  }
  if (command_changed(loaded, o_.directory, o_.command)) {
    if (!o_.new_command) {
      log_(
          "{}: its checkpoint is of the computation that command made, and restored into "
          "another one it gives a wrong result. Resume it with that command; or start this one "
          "as another job (another --job; or remove this one: skt-shm clean --job {}, then its "
          "state: rm -r {}); or, where the change leaves the computation as it was (an output "
          "file, a progress option), resume it with --new-command",
          command_change(loaded, o_), o_.job, dir_.path());
      return kExitUsage;
    }
    log_("{}: resuming its checkpoint with this command (--new-command)",
         command_change(loaded, o_));
  }
  // "running" with the lock free: the skt-run that wrote it died (its run died with it).
  log_(
      "resuming job {} after {} launch{} ({}): ranks on {}, spares: {}; resuming its checkpoint "
      "{}",
      o_.job, loaded.launches, loaded.launches == 1 ? "" : "es",
      loaded.status == "running" ? "the skt-run of the last one died: " + loaded.note : loaded.note,
      fmt::join(nodes_of(loaded.ranklist), ","),
      loaded.spares.empty() ? "none" : fmt::format("{}", fmt::join(loaded.spares, ",")),
      inherited_terms());
  // What happened to the job's segments since the state was written, no skt-run saw: a commit
  // whose report never arrived (skt-run killed first, a datagram lost), or a run of another
  // computation under mpirun by hand after they were removed. SKT_RESTART=1 would have the
  // program take them whatever command wrote them (a wrong result with exit 0); the program
  // judges instead, until a launch restores them or starts afresh.
  state_.inherited = true;
  try {
    resume_plan(loaded.ranklist, o_, plan_, log_);
  } catch (const OutOfSpares& e) {
    log_("{}; give as many nodes as it ran on", e.what());
    return kExitOutOfSpares;
  }
  return leave_out_nodes_still_dead();
}

std::optional<int> Supervisor::leave_out_nodes_still_dead() {
  // The nodes of the resumed layout, and the spares, that an earlier launch found dead and none
  // since saw back: the failure that stopped the job left them in its last ranklist (no spare,
  // or no memory, took their ranks), and launching there again would fail, or hang until the
  // watchdog, before the ranks moved.
  std::vector<std::string> lost;
  std::vector<std::string> candidates = nodes_of(plan_.ranklist);
  candidates.insert(candidates.end(), plan_.spares.begin(), plan_.spares.end());
  for (const auto& node : candidates) {
    const NodeRecord* record = record_of(state_.nodes, node);
    if (record != nullptr && record->standing != Standing::returned) lost.push_back(node);
  }
  if (lost.empty()) return std::nullopt;
  Probed probed;
  try {
    probed = plan_.probe->dead(lost);
  } catch (const std::exception& e) {
    log_("the nodes found dead before ({}) could not be probed: {}; resuming on them as given",
         fmt::join(lost, ","), e.what());
    return std::nullopt;
  }
  log_("node{} {} found dead by an earlier launch, probed before resuming: {}",
       lost.size() == 1 ? "" : "s", fmt::join(lost, ","),
       probed.dead.empty() ? std::string(lost.size() == 1 ? "it answers" : "they answer")
                           : "dead still: " + probed.describe());
  if (probed.dead.empty()) return std::nullopt;
  note_losses(probed.dead);
  JobFacts facts;
  facts.ranklist = plan_.ranklist;
  facts.spares = plan_.spares;
  facts.continue_on_survivors = o_.continue_on_survivors;
  learn_for_doubling_up(probed.dead, facts);
  try {
    take_replacement(place_after_losses(plan_.ranklist, probed.dead, plan_.spares,
                                        o_.continue_on_survivors, facts.group_of_rank, facts.room));
  } catch (const OutOfSpares& e) {
    log_("cannot resume job {}: {}; give other nodes in place of the dead ones", o_.job, e.what());
    return kExitOutOfSpares;
  }
  return std::nullopt;
}

std::optional<int> Supervisor::inherit_without_state(bool& fresh, bool after_unrecoverable) {
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
  if (fresh && !after_unrecoverable) {
    // The same for drained epochs, which outlive the nodes (a new allocation, other nodes).
    if (const auto drained = drained_epoch_count(o_, plan_, log_); drained && *drained > 0) {
      log_(
          "{} drained epoch{} of job {} exist{} from an earlier run that skt-run has no state of: "
          "resuming from {} {} (skt-drain remove --job {} first to start afresh)",
          *drained, *drained == 1 ? "" : "s", o_.job, *drained == 1 ? "s" : "",
          *drained == 1 ? "it" : "them", inherited_terms(), o_.job);
      fresh = false;
      state_.inherited = true;
    }
  }
  return std::nullopt;
}

void Supervisor::announce() {
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
}

int Supervisor::launch_until_done(bool fresh) {
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
    Outcome out = supervise(child, judged ? 0 : restart, state_.cadence);
    // The program took the checkpoint as its own (restored), or found none: this job's from now.
    if (out.restored) state_.inherited = false;
    state_.cadence = std::max(state_.cadence, out.cadence);
    const auto stalled_before = std::exchange(state_.stalled_at, out.stalled_at);
    if (restart != 0) report_restored(out, failed_at, launched);
    const Action action = decide(attempt, stalled_before, out, failed_at);
    if (action.step == Step::start_afresh) failed_at = Clock::now();
    if (const auto code = carry_out(action, out)) return *code;
    if (action.step == Step::start_afresh) fresh = true;
  }
}

Action Supervisor::decide(int attempt, std::optional<std::uint64_t> stalled_before, Outcome& out,
                          std::optional<Clock::time_point>& failed_at) {
  JobFacts facts{attempt,
                 o_.max_restarts,
                 o_.fresh_if_unrecoverable,
                 o_.backoff,
                 stop_signal(),
                 stalled_before,
                 plan_.ranklist,
                 plan_.spares,
                 o_.continue_on_survivors,
                 {},
                 std::nullopt};
  Action action = next_action(facts, out);
  if (action.step != Step::probe) return action;
  failed_at = Clock::now();
  out.dead = probe_after_failure(out, *failed_at);
  note_losses(*out.dead);
  take_back_returned(*out.dead);
  facts.spares = plan_.spares;
  learn_for_doubling_up(*out.dead, facts);
  return next_action(facts, out);
}

void Supervisor::report_restored(const Outcome& out,
                                 const std::optional<Clock::time_point>& failed_at,
                                 Clock::time_point launched) {
  if (!out.restored) return;
  if (*out.restored == 0) {
    // Epochs count from 1: the relaunch found no checkpoint (the run before died before its first
    // one) and started afresh.
    log_("the program found no checkpoint and started afresh");
    return;
  }
  log_("the program reports restored epoch {}{}{}", *out.restored,
       out.restored_from_storage ? " from storage (SKT_DRAIN_DIR)" : "",
       failed_at && out.restored_at
           ? fmt::format(
                 ", {:.3f} s after the failure was seen",
                 std::chrono::duration<double>(launched - *failed_at).count() + *out.restored_at)
           : std::string());
}

std::set<std::string> Supervisor::probe_after_failure(const Outcome& out,
                                                      Clock::time_point failed_at) {
  const bool refused = launcher_refused(out);
  const auto how = [&]() -> std::string {
    if (out.hung) return "was ended as hung";
    if (out.dead_node) return "was ended: a node died";
    if (refused) return "failed to launch";
    const bool silent = never_ran(out);
    const std::string before = silent ? " before any rank started" : "";
    if (out.launcher_signal != 0) {
      return fmt::format("failed{}: its launcher was killed by signal {} ({}), not by skt-run",
                         before, out.launcher_signal, ::strsignal(out.launcher_signal));
    }
    if (silent) return "failed before any rank started, the launcher silent (interrupted?)";
    return "failed";
  };
  log_("run {} {} (exit {}); probing {} node(s) and {} spare(s) with {}", state_.launches, how(),
       out.code, nodes_of(plan_.ranklist).size(), plan_.spares.size(), plan_.probe->name());
  auto probed = nodes_of(plan_.ranklist);
  probed.insert(probed.end(), plan_.spares.begin(), plan_.spares.end());
  try {
    const Probed found = plan_.probe->dead(probed);
    log_("probed in {:.3f} s: {}", seconds_since(failed_at),
         found.dead.empty() ? std::string("every node is alive (a process crash or a hang)")
                            : "dead: " + found.describe());
    return found.dead;
  } catch (const std::exception& e) {
    log_("probe failed: {}; relaunching on the same nodes", e.what());
    return {};
  }
}

void Supervisor::report_refusal(int code) {
  const char* why = code == 2   ? "bad usage or configuration, a relaunch that does not match its "
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
}

void Supervisor::note_losses(const std::set<std::string>& dead) {
  if (dead.empty()) return;
  const std::int64_t now = epoch_seconds();
  record_losses(state_.nodes, dead, now, std::llround(o_.quarantine));
  for (const auto& node : dead) {
    const NodeRecord* record = record_of(state_.nodes, node);
    if (record->standing == Standing::barred && record->lost_at == now) {  // barred by this loss
      log_(
          "node {} failed {} s after it came back, within the quarantine (--quarantine {:g}): "
          "it is not taken back again",
          node, record->lost_at - record->returned_at, o_.quarantine);
    }
  }
}

void Supervisor::take_back_returned(const std::set<std::string>& dead) {
  // A failure asks every node due back again, and says again why one is not taken.
  told_not_taken_.clear();
  const auto due = due_to_return(dead, false);
  if (!due.empty()) take_back(ask_returning(due));
}

std::vector<std::string> Supervisor::due_to_return(const std::set<std::string>& dead,
                                                   bool running) const {
  std::vector<std::string> due;
  for (const auto& node : due_back(state_.nodes, epoch_seconds())) {
    const bool in_job = std::count(plan_.ranklist.begin(), plan_.ranklist.end(), node) > 0 ||
                        std::count(plan_.spares.begin(), plan_.spares.end(), node) > 0;
    const bool refused = running && told_not_taken_.count(node) != 0;
    if (dead.count(node) == 0 && !in_job && !refused) due.push_back(node);
  }
  return due;
}

Supervisor::AskedBack Supervisor::ask_returning(const std::vector<std::string>& due) const {
  AskedBack asked;
  Probed probed;
  try {
    probed = plan_.probe->dead(due);
  } catch (const std::exception& e) {
    asked.trouble = fmt::format("the nodes lost before ({}) could not be probed: {}",
                                fmt::join(due, ","), e.what());
    return asked;
  }
  for (const auto& node : due) {
    Returning r{node, probed.dead.count(node) == 0, {}, 0};
    if (r.answers) r.why_not = take_back_check(o_, plan_, node, r.removed);
    asked.nodes.push_back(std::move(r));
  }
  return asked;
}

bool Supervisor::take_back(const AskedBack& asked) {
  if (!asked.trouble.empty()) log_("{}", asked.trouble);
  bool taken = false;
  for (const Returning& r : asked.nodes) {
    if (!r.answers) continue;  // still dead: lost, as it was
    if (!r.why_not.empty()) {
      // Said once, not at every probe of a running job, until the reason changes.
      if (std::exchange(told_not_taken_[r.node], r.why_not) != r.why_not)
        log_("node {} answers again but is not taken back: {}", r.node, r.why_not);
      continue;
    }
    told_not_taken_.erase(r.node);
    mark_returned(state_.nodes, r.node, epoch_seconds());
    plan_.spares.push_back(r.node);
    taken = true;
    log_("node {} answers again, its quarantine over: back among the spares{}", r.node,
         r.removed == 0 ? std::string()
                        : fmt::format(" ({} stale segment{} of the job removed there)", r.removed,
                                      r.removed == 1 ? "" : "s"));
  }
  return taken;
}

void Supervisor::learn_for_doubling_up(const std::set<std::string>& dead, JobFacts& facts) {
  std::size_t dead_nodes = 0;
  for (const auto& node : nodes_of(plan_.ranklist))
    dead_nodes += dead.count(node);
  const auto live_spares = static_cast<std::size_t>(std::count_if(
      plan_.spares.begin(), plan_.spares.end(), [&](const auto& s) { return dead.count(s) == 0; }));
  if (!o_.continue_on_survivors || dead_nodes <= live_spares) return;
  const auto found = find_segments(o_, plan_, dead);
  if (!found || std::count(found->group_of_rank.begin(), found->group_of_rank.end(), -1) ==
                    static_cast<std::ptrdiff_t>(found->group_of_rank.size())) {
    log_(
        "the groups of the job's ranks could not be read from their checkpoints (skt-shm list): "
        "ranks doubled up are placed by load alone");
  } else {
    facts.group_of_rank = found->group_of_rank;
  }
  // A rank doubled up makes all its segments anew there; the largest rank's seen stands for it.
  const std::uint64_t per_rank =
      found ? *std::max_element(found->bytes_of_rank.begin(), found->bytes_of_rank.end()) : 0;
  std::vector<std::string> live;
  for (const auto& node : nodes_of(plan_.ranklist))
    if (dead.count(node) == 0) live.push_back(node);
  const auto room = room_on_nodes(o_, plan_, live);
  if (per_rank == 0 || room.empty()) {
    log_(
        "the memory of the live nodes could not be checked ({}): ranks doubled up are placed "
        "without it, and a rank whose segments do not fit refuses to start (exit 2)",
        !found          ? "skt-shm list did not answer"
        : per_rank == 0 ? "no segment of the job seen"
                        : "skt-shm room did not answer");
    return;
  }
  facts.room = NodeRoom{room, per_rank};
}

void Supervisor::take_replacement(const Replacement& replacement) {
  for (const auto& [from, to] : replacement.replaced)
    log_("replacing node {} by spare {}", from, to);
  for (const auto& [rank, to] : replacement.doubled_up)
    log_("no spare left: rank {} goes on node {} beside ranks of the job (doubled up)", rank, to);
  if (!replacement.doubled_up.empty() && !replacement.room_left.empty()) {
    std::vector<std::string> left;
    for (const auto& [node, bytes] : replacement.room_left)
      left.push_back(fmt::format("{} {:.1f} GiB", node, static_cast<double>(bytes) / (1 << 30)));
    log_("the memory checked: new segments can still take {} ({})", fmt::join(left, ", "),
         room_source(o_));
  }
  if (!replacement.doubled_up.empty()) {
    if (!replacement.groups_known) {
      log_(
          "the ranks' groups unknown, the ranks doubled up were placed by load alone: a group may "
          "now have members that share a node (its ranks warn of it), whose loss it would not "
          "survive");
    } else if (replacement.groups_sharing_a_node.empty()) {
      log_(
          "every group still has its members on distinct nodes: the job survives what it "
          "survived before, on {} node(s)",
          nodes_of(replacement.ranklist).size());
    } else {
      log_(
          "group(s) {} now have members that share a node: losing that node loses them "
          "together, more than xor or rs with m = 1 tolerates (the job would end with exit 3); "
          "a loss of any other single node is survived",
          fmt::join(replacement.groups_sharing_a_node, ", "));
    }
  }
  plan_.ranklist = replacement.ranklist;
  plan_.spares = replacement.spares_left;
}

void Supervisor::prepare_relaunch(const Action& action, const Outcome& out) {
  take_replacement(action.replacement);
  save("failed", out.hung ? "ended as hung: " + *out.hung : "the run failed");
  if (action.wait > 0) {
    log_("waiting {:.1f} s before relaunching", action.wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(action.wait));
  }
}

std::optional<int> Supervisor::carry_out(const Action& action, const Outcome& out) {
  const int code = out.code;
  switch (action.step) {
    case Step::stop:
      log_("stopped by signal {} (run exit {}); {}", stop_signal(), code, kept_hint());
      save("stopped", fmt::format("stopped by signal {}", stop_signal()));
      return action.exit_code;
    case Step::succeed:
      log_("run {} succeeded", state_.launches);
      clean_segments(o_, plan_, state_.sub_jobs, log_);
      clean_drains(o_, plan_, state_.sub_jobs, log_);
      save("done", fmt::format("succeeded after {} launch(es)", state_.launches));
      log_("final ranklist in {}", dir_.file("ranklist"));
      return action.exit_code;
    case Step::stuck_after_work:
      log_(
          "run {}: the program's work ended (every context closed), but its ranks did not leave "
          "the program by themselves, so its exit code is unknown: see its output; not "
          "relaunching (the work would be done again from the start); {}",
          state_.launches, kept_hint(false));
      save("failed", "stuck after its work: " + *out.stuck_after_work);
      return action.exit_code;
    case Step::start_afresh:
      log_(
          "run {} found its checkpoint unrecoverable (exit 3): removing the job's segments and "
          "starting afresh (--fresh-if-unrecoverable)",
          state_.launches);
      clean_segments(o_, plan_, state_.sub_jobs, log_);
      clean_drains(o_, plan_, state_.sub_jobs, log_);
      state_.checkpointed = false;
      return std::nullopt;
    case Step::program_refused:
      report_refusal(code);
      return action.exit_code;
    case Step::stalled_again:
      log_(
          "run {} stalled at epoch {} as the run before it did: it does not get past that point, "
          "and a relaunch would restore the same checkpoint and stall the same way; not "
          "relaunching. A deadlock of the program (see which calls the ranks waited in, above) "
          "is fixed in the program, which then resumes with --new-command; work that takes "
          "longer than the bound without a checkpoint resumes with the same command and a "
          "larger --hang-timeout or --progress-floor; {}",
          state_.launches, *out.stalled_at, kept_hint());
      save("failed", fmt::format("stalled twice at epoch {}: {}", *out.stalled_at, *out.hung));
      return action.exit_code;
    case Step::launch_failed:
      log_(
          "the launcher failed before the program started, and every node is alive; not "
          "relaunching (a launch failure is not a crash); it said:{}",
          launcher_reason(out.last_errors));
      --state_.launches;
      save(state_.launches > 0 ? "failed" : "new",
           "the launcher failed before the program started");
      return action.exit_code;
    case Step::restart_budget:
      log_("--max-restarts {} reached; giving up; {}", o_.max_restarts, kept_hint());
      save("failed", fmt::format("--max-restarts {} reached", o_.max_restarts));
      return action.exit_code;
    case Step::out_of_spares:
      log_("out of spares: {}; giving up; {}", action.why, kept_hint());
      save("failed", fmt::format("out of spares: {}", action.why));
      return action.exit_code;
    case Step::probe:
      break;  // next_action asks for the probe only before it has run
    case Step::relaunch:
      prepare_relaunch(action, out);
      return std::nullopt;
  }
  throw std::logic_error("skt-run: an action without its step");
}

}  // namespace skt::run
