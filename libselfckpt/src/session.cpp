#include "libselfckpt/src/session.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include "libselfckpt/src/logind.hpp"
#include "libselfckpt/src/policy.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

// Seconds on a steady clock, for durations.
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Whether this process has not yet said `message`. A program that opens several contexts over the
// same ranks (skt-hpl: one for its record of the run, one for each test) would otherwise be told
// the same thing by each.
bool first_time_in_process(const std::string& message) {
  static std::mutex lock;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> guard(lock);
  return said.insert(message).second;
}

constexpr std::size_t kNodeBytes = 64;

// A recovery's phases on one rank, for its log line.
std::string describe_phases(const skt_recovery& r) {
  constexpr double kMiB = 1 << 20;
  return fmt::format(
      "attach or create {:.3f} s, join {:.3f} s, verify {:.3f} s ({:.1f} MiB), fetch {:.3f} s, "
      "decode {:.3f} s ({:.1f} MiB rebuilt), restore {:.3f} s ({:.1f} MiB), agree {:.3f} s",
      r.attach, r.join, r.verify, static_cast<double>(r.verified_bytes) / kMiB, r.fetch, r.decode,
      static_cast<double>(r.rebuilt_bytes) / kMiB, r.restore,
      static_cast<double>(r.restored_bytes) / kMiB, r.agree);
}

std::string getenv_string(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// A rank dies with the process that started it (mpirun, or a launcher's daemon): a rank outliving
// its launcher would go on writing into the segments that the next launch takes over.
void die_with_launcher() {
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) raise(SIGKILL);  // the launcher died just before
}

// What makes a run of a program the computation it is, besides its input files: its arguments (as
// the kernel keeps them, NUL-separated) and its working directory, which its relative paths read.
struct Command {
  std::string shown;  // for messages: the words joined by spaces, and the directory
  std::uint64_t print = 0;
};

Command this_command() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string words((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::error_code error;
  const std::string directory = std::filesystem::current_path(error).string();
  const std::string both = words + '\0' + directory;
  std::string shown = words;
  if (!shown.empty() && shown.back() == '\0') shown.pop_back();
  std::replace(shown.begin(), shown.end(), '\0', ' ');
  return {fmt::format("`{}` in {}", shown, directory), crc64(both.data(), both.size())};
}

// The job tags of this process's open contexts. Two open at once under one tag would take the same
// segments: the second would wait for the first to let go of them, as for an earlier launch's.
std::mutex g_open_jobs_mutex;
std::set<std::string> g_open_jobs;

// This process's hold on `job` while a context is open under it; nothing if one already is.
const std::string* hold_job(const std::string& job) {
  const std::lock_guard lock(g_open_jobs_mutex);
  const auto [it, added] = g_open_jobs.insert(job);
  return added ? &*it : nullptr;
}

}  // namespace

void Session::ReleaseJob::operator()(const std::string* job) const {
  const std::lock_guard lock(g_open_jobs_mutex);
  g_open_jobs.erase(*job);
}

std::size_t Session::stage_entry_bytes(std::size_t bytes) const {
  // Under sum, each byte is staged as a double holding its value, so that rebuilding the sum of
  // such rows is exact.
  const std::size_t staged = config_.scheme == enc::Scheme::sum ? bytes * sizeof(double) : bytes;
  return (staged + 63) / 64 * 64;
}

std::size_t Session::staged_bytes() const {
  std::size_t bytes = 0;
  for (const auto& p : privates_)
    bytes += stage_entry_bytes(p.bytes);
  return bytes;
}

std::vector<RegionEntry> Session::entries() const {
  std::vector<RegionEntry> out;
  std::uint64_t at = 0;
  for (const auto& p : privates_) {
    out.push_back({p.name, true, at, p.bytes});
    at += stage_entry_bytes(p.bytes);
  }
  for (auto e : arena_->entries())
    out.push_back(std::move(e));
  return out;
}

Session::Session(MPI_Comm comm, const std::string& config_path) {
  if (!mpi_initialized()) {
    throw Error(SKT_ERR_STATE, "skt_init: MPI is not initialised; call MPI_Init first");
  }
  die_with_launcher();
  comm_ = Comm::duplicate(comm);
  rank_ = comm_.rank();
  nranks_ = comm_.size();
  effects_ = std::make_unique<MpiEffects>(comm_.get(), nodes_, config_.node, nullptr);
  effects_->agree([&] {
    config_ = load_config(config_path, skt_environment());
    if (config_.node.empty()) config_.node = default_node_name();
  });
  if (config_.job.empty()) {
    const std::string slurm_job = getenv_string("SLURM_JOB_ID");
    if (!slurm_job.empty() && valid_name("slurm-" + slurm_job)) config_.job = "slurm-" + slurm_job;
  }
  // No stable name: segments cannot be found by a relaunch, so they are always removed. Every rank
  // takes part in the broadcast of rank 0's stand-in, named or not: ranks that disagree on having
  // a name (SKT_JOB given to some only) then meet the settings check below, not a collective the
  // others never enter.
  std::array<char, kNodeBytes> tag{};
  int leader = 0;  // rank 0's rank in MPI_COMM_WORLD
  if (rank_ == 0) {
    leader = world_rank();
    // Random, not the time: MPI_Wtime counts from MPI_Init here (the tag read tmp-<pid>-0), and
    // rank 0 of two jobs on other nodes, or in containers, may share a pid.
    std::random_device entropy;
    const auto text = fmt::format("tmp-{:x}-{:08x}{:08x}", getpid(), entropy(), entropy());
    std::memcpy(tag.data(), text.data(), std::min(text.size(), tag.size() - 1));
  }
  tag = effects_->broadcast_value(tag);
  leader = effects_->broadcast_value(leader);
  if (config_.job.empty()) {
    config_.job = tag.data();
    ephemeral_job_ = true;
  }
  effects_->agree([&] {
    const auto job = context_job_tag(config_.job, ephemeral_job_ ? 0 : leader);
    if (!job) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("job tag '{}' is too long for this context: one whose rank 0 is "
                              "rank {} of MPI_COMM_WORLD adds '{}w{}' to it, and a tag has at most "
                              "63 characters; give SKT_JOB a shorter tag",
                              config_.job, leader,
                              config_.job.find('+') == std::string::npos ? '+' : '.', leader));
    }
    config_.job = *job;
  });
  log_ = std::make_unique<Logger>(config_.log_level, rank_, config_.node);
  if (rank_ == 0 && !config_.ignored_variables.empty()) {
    const std::string said = fmt::format(
        "{} {} no selfckpt setting and {} ignored (the settings: skt-run --help, or "
        "docs/configuration.md)",
        fmt::join(config_.ignored_variables, ", "),
        config_.ignored_variables.size() == 1 ? "is" : "are",
        config_.ignored_variables.size() == 1 ? "is" : "are");
    if (first_time_in_process(said)) log_->warn("{}", said);
  }
  effects_->agree([&] {
    if (!config_.monitor.empty()) {
      monitor_ =
          std::make_unique<Monitor>(*parse_monitor_address(config_.monitor), config_.monitor_key,
                                    config_.job, rank_, config_.restart.value_or(0), world_rank());
    }
  });
  fault_ = std::make_unique<FaultInjector>(config_.fault, rank_, config_.restart.value_or(0),
                                           log_.get());
  effects_->set_fault(fault_.get());
  if (rank_ == 0) {
    // Later runs draw larger ids: the clock in the high bits, chance in the low ones. A run that
    // starts the job afresh makes its id the job's lineage, newer than that of any earlier start.
    std::random_device entropy;
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    run_id_ =
        (static_cast<std::uint64_t>(now.count()) & ~std::uint64_t{0xffff}) | (entropy() & 0xffffu);
  }
  run_id_ = effects_->broadcast_value(run_id_);

  // Settings every rank must share, compared with rank 0's.
  const std::string shared = config_.shared_settings();
  const std::string reference = effects_->broadcast_string(shared);
  effects_->agree([&] {
    if (shared != reference) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("configuration differs between ranks: this rank has [{}], rank 0 "
                              "has [{}]; every rank must use the same settings (mpirun -x "
                              "NAME=value before the first of several programs reaches only "
                              "that one's ranks: export NAME and give -x NAME)",
                              shared, reference));
    }
  });
  effects_->agree([&] {
    open_job_.reset(hold_job(config_.job));
    if (!open_job_) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("a context of job '{}' is open in this process (skt_init without "
                              "skt_finalize yet): contexts open at the same time need a job tag "
                              "each, or they would take the same segments; set SKT_JOB to one of "
                              "its own, such as {}+NAME, before this skt_init",
                              config_.job, config_.job.substr(0, config_.job.find('+'))));
    }
  });
  config_.drain_dir = expand_node(config_.drain_dir, config_.node);

  std::array<char, kNodeBytes> mine{};
  std::memcpy(mine.data(), config_.node.data(), std::min(config_.node.size(), kNodeBytes - 1));
  for (const auto& node : effects_->gather_values(mine))
    nodes_.emplace_back(node.data());

  if (ephemeral_job_) {
    log_->job(
        "no job tag (SKT_JOB, or a Slurm job id) is set: using '{}'; a relaunch will not "
        "find this run's checkpoints",
        config_.job);
  } else {
    warn_of_logind_removal();
  }
  log_->job("initialised job '{}' on {} ranks: {}", config_.job, nranks_, shared);
}

void Session::warn_of_logind_removal() const {
  const int exposed = effects_->all_sum(session_removing_ipc(read_login_facts()) ? 1 : 0);
  if (exposed == 0 || rank_ != 0) return;
  log_->warn(
      "{} of the job's {} ranks run in a login session (a launch over ssh), and systemd-logind "
      "removes the shared-memory segments of uid {} that no process holds when the user's last "
      "login session on a node ends (RemoveIPC, yes by default): a checkpoint that a crash leaves "
      "would go when the launch's session on its node ends, and the relaunch would find that "
      "node's memory lost. Ask for RemoveIPC=no in /etc/systemd/logind.conf, or run 'loginctl "
      "enable-linger', or launch through the batch system",
      exposed, nranks_, getuid());
}

Session::~Session() = default;

void Session::enter(CollectiveCall call) {
  const auto mine = static_cast<std::int32_t>(call);
  std::vector<std::int32_t> calls;
  // The supervisor learns from the beats which call this rank waits in, should the run stop
  // getting on: the one thing that tells a deadlock of the program from a slow rank.
  if (monitor_) monitor_->waiting_in(call_name(call));
  try {
    const auto gathered = effects_->gather_reporting(
        std::as_bytes(std::span(&mine, 1)), config_.wait_warning_seconds, [&](double waited) {
          log_->warn(
              "this rank has waited {:.1f} s in {} for the other ranks of the context to call it "
              "too: one may still be computing, or be stopped or stuck; or the program calls it "
              "on some ranks only: {}",
              waited, call_name(call), kDecisionsOfTheirOwn);
        });
    for (const auto& theirs : gathered) {
      std::int32_t called = 0;
      std::memcpy(&called, theirs.data(), sizeof called);
      calls.push_back(called);
    }
  } catch (...) {
    if (monitor_) monitor_->waiting_in(nullptr);
    throw;
  }
  if (monitor_) monitor_->waiting_in(nullptr);
  const auto out_of_step = calls_out_of_step(calls);
  if (!out_of_step) return;
  throw AgreedError(
      SKT_ERR_STATE,
      fmt::format("the ranks made different selfckpt calls at epoch {}: {}. Every rank of a "
                  "context makes the same collective calls in the same order (skt_recover, "
                  "skt_checkpoint, skt_checkpoint_dirty, skt_need_checkpoint, skt_finalize with "
                  "discard); {}. None of these calls did anything{}",
                  epoch_, *out_of_step, kDecisionsOfTheirOwn,
                  epoch_ > 0 ? fmt::format(": checkpoint {} stands", epoch_) : ""));
}

void Session::require_recovered(const char* call) const {
  if (!recovered_) {
    throw Error(SKT_ERR_STATE,
                fmt::format("{} before skt_recover: declare the regions, then call skt_recover "
                            "once, then checkpoint",
                            call));
  }
}

SegmentIdentity Session::identity_of(int rank, SegmentKind kind) const {
  return SegmentIdentity{
      static_cast<std::uint32_t>(geteuid()), config_.job, config_.node, rank, kind,
      std::string(kind_name(kind))};
}

void Session::check_not_stale(SegmentKind kind) const {
  if (config_.restart && *config_.restart == 0) {
    throw Error(SKT_ERR_STALE,
                fmt::format("the {} segment of job '{}' exists from an earlier run, but "
                            "SKT_RESTART=0 says this is a first launch; remove the old segments "
                            "with 'skt-shm clean --job {}' or use a new job tag",
                            kind_name(kind), config_.job, config_.job));
  }
}

Arena& Session::arena() {
  if (!arena_) {
    const auto make = [&](bool find_existing) {
      return std::make_unique<Arena>(Arena::Options{identity(SegmentKind::workspace), nranks_,
                                                    config_.huge_pages, find_existing,
                                                    config_.attach_wait_seconds});
    };
    try {
      arena_ = make(!ephemeral_job_);
      if (arena_->found()) check_not_stale(SegmentKind::workspace);
    } catch (const Error&) {
      // What this rank found refuses the launch (another number of ranks, a first launch over old
      // segments, segments still attached), but other ranks may have found nothing and go on to
      // create theirs. The refusal is said at skt_recover, by every rank together, so that each
      // removes what it created; until then the program's regions live in a new arena, and what
      // was found is left as it was.
      refusal_ = std::current_exception();
      arena_.reset();
      arena_ = make(false);
    }
  }
  return *arena_;
}

void Session::check_declaration(const char* call, const std::string& name) const {
  if (recovered_) {
    throw Error(SKT_ERR_STATE,
                fmt::format("{}('{}') after skt_recover: declare every region and protected object "
                            "before recovering; the set is fixed from then on",
                            call, name));
  }
  if (!valid_name(name)) {
    throw Error(SKT_ERR_ARG, fmt::format("{}: name '{}' is not 1 to 63 of A-Z a-z 0-9 . _ - "
                                         "starting with a letter or digit",
                                         call, name));
  }
}

void* Session::alloc(const std::string& name, std::size_t bytes) {
  check_declaration("skt_alloc", name);
  if (bytes == 0) throw Error(SKT_ERR_ARG, fmt::format("region '{}' has zero bytes", name));
  if (config_.scheme == enc::Scheme::sum && bytes % sizeof(double) != 0) {
    throw Error(SKT_ERR_ARG,
                fmt::format("region '{}' has {} bytes, not a multiple of 8: the sum scheme "
                            "protects doubles only; use SKT_SCHEME=xor or rs for other data",
                            name, bytes));
  }
  Arena& a = arena();
  // Half the address space or more is a count gone negative or n * sizeof(double) wrapped: a
  // mistake, whose every offset would wrap too. Below that, beyond the addresses the workspace
  // has, it is memory this node does not have (an HPL sweep's largest N skips on it).
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) {
    throw Error(SKT_ERR_ARG,
                fmt::format("region '{}' of {} bytes: a size computed from a negative count, or "
                            "one that wrapped around?",
                            name, bytes));
  }
  if (bytes > a.reserved_bytes()) {
    throw Error(SKT_ERR_NOMEM,
                fmt::format("region '{}' of {} bytes is larger than the {} bytes of addresses a "
                            "workspace has on this node (twice its memory and 64 GiB)",
                            name, bytes, a.reserved_bytes()));
  }
  const auto live = a.entries();
  if (std::any_of(live.begin(), live.end(), [&](const RegionEntry& e) { return e.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("region '{}' is already allocated", name));
  }
  std::byte* p = a.allocate(name, bytes);
  const bool found = a.recorded(name);
  if (found) found_names_.insert(name);
  log_->debug("region '{}' of {} bytes{}", name, bytes,
              found ? ", from the workspace of an earlier launch" : "");
  return p;
}

void Session::protect(const std::string& name, void* ptr, std::size_t bytes) {
  check_declaration("skt_protect", name);
  if (ptr == nullptr || bytes == 0) {
    throw Error(SKT_ERR_ARG, fmt::format("private object '{}' needs a pointer and a size", name));
  }
  // Staged into the workspace at every checkpoint (as doubles under sum): as for a region.
  if (bytes > arena().reserved_bytes() / sizeof(double)) {
    throw Error(SKT_ERR_ARG,
                fmt::format("private object '{}' of {} bytes is larger than a workspace can stage "
                            "on this node: a size computed from a negative count, or one that "
                            "wrapped around?",
                            name, bytes));
  }
  if (std::any_of(privates_.begin(), privates_.end(),
                  [&](const PrivateObject& r) { return r.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("private object '{}' is already registered", name));
  }
  privates_.push_back({name, static_cast<std::byte*>(ptr), bytes});
}

std::string Session::next_unnamed() const {
  const auto it = unnamed_counts_.find(scope_);
  return fmt::format("{}.{}", scope_, it == unnamed_counts_.end() ? 0 : it->second);
}

void* Session::allocate_next(std::size_t bytes) {
  const std::string name = next_unnamed();
  void* p = alloc(name, bytes);
  ++unnamed_counts_[scope_];
  return p;
}

void Session::mark_static(const void* ptr) {
  const RegionEntry* region = arena().region_at(static_cast<const std::byte*>(ptr));
  if (region == nullptr) {
    throw Error(SKT_ERR_ARG,
                "skt_mark_static: the pointer is not the start of a region of this context (give "
                "what skt_alloc or skt_malloc returned)");
  }
  if (static_settled_.count(region->name) == 0) static_marked_.insert(region->name);
}

void Session::set_scope(const std::string& scope) {
  if (!valid_name(scope) || scope.find('.') != std::string::npos) {
    throw Error(SKT_ERR_ARG, fmt::format("skt_malloc_scope: '{}' is not 1 to 63 of A-Z a-z 0-9 _ - "
                                         "starting with a letter or digit",
                                         scope));
  }
  scope_ = scope;
}

void* Session::reallocate(void* ptr, std::size_t bytes) {
  const RegionEntry* old = arena_ ? arena_->region_at(static_cast<std::byte*>(ptr)) : nullptr;
  if (old == nullptr || released_.count(ptr) != 0) {
    throw Error(SKT_ERR_ARG, "skt_realloc: the pointer is not a region of this context");
  }
  const std::size_t old_bytes = old->bytes;
  const std::string fresh_name = next_unnamed();
  void* fresh = allocate_next(bytes);
  // On a relaunch the new region comes back from the workspace, holding data skt_recover needs:
  // it is left alone.
  if (found_names_.count(fresh_name) == 0) std::memcpy(fresh, ptr, std::min(old_bytes, bytes));
  release(ptr);
  return fresh;
}

bool Session::release(void* ptr) {
  if (!arena_ || arena_->region_at(static_cast<std::byte*>(ptr)) == nullptr) return false;
  if (recovered_) {
    released_.insert(ptr);  // still part of the workspace until finalize
    return true;
  }
  return arena_->release(static_cast<std::byte*>(ptr));
}

bool Session::another_command(std::uint64_t recorded) const {
  return !config_.restart && recorded != 0 && recorded != this_command().print;
}

void Session::refuse_another_command(std::uint64_t recorded, const std::string& removal) const {
  if (another_command(recorded)) throw another_command_error(removal);
}

Error Session::another_command_error(const std::string& removal) const {
  const Command command = this_command();
  return Error(
      SKT_ERR_MISMATCH,
      fmt::format("job '{}' has a checkpoint written by another command, or from another "
                  "directory, than this one ({}): restored into another computation it "
                  "gives a wrong result, and SKT_RESTART is unset (or auto), so nothing "
                  "says that this is a relaunch of that run. To resume it with this command, "
                  "relaunch with SKT_RESTART=1 (in a batch script: "
                  "SKT_RESTART=${{SLURM_RESTART_COUNT:-0}}); to run this command as a job "
                  "of its own, give it another SKT_JOB, or remove the checkpoint ({})",
                  config_.job, command.shown, removal));
}

Finding Session::inspect_checkpoint() {
  Finding f;
  const std::vector<RegionEntry> all = entries();
  const std::size_t stage_bytes = staged_bytes();
  const StreamLayout declared =
      StreamLayout::plan(all, stage_bytes, arena_->regions_bytes(), config_.chunk_bytes);
  f.layout_hash = declared.hash;
  f.stage_bytes = stage_bytes;
  f.regions_bytes = arena_->regions_bytes();
  if (ephemeral_job_) return f;
  FindResult result = find_segment(identity(SegmentKind::checkpoint), config_.attach_wait_seconds);
  for (const auto& why : result.skipped)
    log_->debug("left a segment alone: {}", why);
  if (!result.segment) return f;
  check_not_stale(SegmentKind::checkpoint);
  checkpoint_ = std::move(*result.segment);
  const SegmentHeader& header = checkpoint_.header();
  if (header.nranks != nranks_) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the checkpoint of job '{}' was written by {} ranks, this run has {}; "
                            "relaunch with the same number of ranks or remove the job's segments "
                            "(skt-shm clean --job {})",
                            config_.job, header.nranks, nranks_, config_.job));
  }
  CheckpointInfo info;
  if (!decode_checkpoint_info(checkpoint_.base(), &info)) {
    log_->warn(
        "this rank's checkpoint description is unreadable (a CRC mismatch: corrupted, or never "
        "written by a launch stopped while it created the segment): treated as lost");
    return f;
  }
  const bool same_settings =
      info.mode == static_cast<std::uint32_t>(config_.mode) &&
      info.scheme == static_cast<std::uint32_t>(config_.scheme) &&
      info.requested_group_size == static_cast<std::uint32_t>(config_.group_size) &&
      (info.group_size == 1 || info.parity == static_cast<std::uint32_t>(config_.parity)) &&
      info.chunk_bytes == config_.chunk_bytes;
  if (!same_settings) {
    throw Error(
        SKT_ERR_MISMATCH,
        fmt::format("the checkpoint of job '{}' was written with mode {}, group size {}, "
                    "scheme {}, parity {}, chunk size {}; the configuration now says mode "
                    "{}, group size {}, scheme {}, parity {}, chunk size {}. Relaunch with "
                    "the same settings, or remove the job's segments (skt-shm clean --job "
                    "{}) to start afresh",
                    config_.job, mode_name(static_cast<Mode>(info.mode)), info.requested_group_size,
                    enc::scheme_name(static_cast<enc::Scheme>(info.scheme)), info.parity,
                    info.chunk_bytes, mode_name(config_.mode), config_.group_size,
                    enc::scheme_name(config_.scheme), config_.parity, config_.chunk_bytes,
                    config_.job));
  }
  if (info.layout_hash != declared.hash) {
    throw Error(
        SKT_ERR_MISMATCH,
        fmt::format("the regions declared now ({} bytes in {} regions and private "
                    "objects) differ from those of the checkpoint ({} bytes); a relaunch "
                    "must declare the same regions, with the same names and sizes, and "
                    "protect the same private objects",
                    declared.workspace_bytes(), all.size(), info.stage_bytes + info.regions_bytes));
  }
  // Judged once every rank's finding is in (restore): whether the segments hold a checkpoint.
  f.other_command = another_command(info.command) ? 1 : 0;
  const auto state = read_control(checkpoint_.base());
  if (!state) {
    log_->warn("this rank's control block is unreadable: treated as lost");
    return f;
  }
  if (!arena_->found()) {
    log_->warn(
        "the checkpoint segment survived but the workspace did not: this rank is treated as lost");
    return f;
  }
  f.valid = 1;
  f.state = *state;
  f.groups = static_cast<std::int32_t>(info.groups);
  f.group = static_cast<std::int32_t>(info.group);
  f.member = static_cast<std::int32_t>(info.member);
  f.group_size = static_cast<std::int32_t>(info.group_size);
  f.lineage = info.lineage;
  for (std::uint32_t i = 0; i < info.group_size; ++i) {
    f.members[i] = info.members[i];
    f.recorded_layouts[i] = info.member_layouts[i];
  }
  info_ = info;
  return f;
}

std::vector<Misplaced> Session::gather_misplaced() {
  std::vector<Misplaced> mine;
  const auto here = static_cast<std::size_t>(rank_);
  const bool first_on_node =
      std::find(nodes_.begin(), nodes_.end(), nodes_[here]) - nodes_.begin() == rank_;
  if (!ephemeral_job_ && first_on_node) {
    effects_->agree([&] {
      std::vector<SegmentIdentity> elsewhere;
      for (int r = 0; r < nranks_; ++r) {
        if (nodes_[static_cast<std::size_t>(r)] != nodes_[here])
          elsewhere.push_back(identity_of(r, SegmentKind::checkpoint));
      }
      for (const SegmentListing& s : list_segments_of(elsewhere)) {
        if (s.header.nranks != nranks_) continue;
        Misplaced m{.rank = s.header.identity.rank, .holder = rank_};
        if (const auto seen = Segment::attach(s.shmid, true)) {
          CheckpointInfo info;
          const auto state = read_control(seen->base());
          if (state && state->finished < 0 && decode_checkpoint_info(seen->base(), &info)) {
            m.newest = std::max(state->committed, state->agreed);
            m.committed = state->committed;
            m.lineage = info.lineage;
          }
        }
        mine.push_back(m);
      }
    });
  } else {
    effects_->agree([] {});
  }
  const auto gathered = effects_->gather(
      std::span(reinterpret_cast<const std::byte*>(mine.data()), mine.size() * sizeof(Misplaced)));
  std::vector<Misplaced> all;
  for (const auto& bytes : gathered) {
    if (bytes.empty()) continue;  // memcpy from an empty vector's null data is undefined
    const std::size_t from = all.size();
    all.resize(from + bytes.size() / sizeof(Misplaced));
    std::memcpy(all.data() + from, bytes.data(), bytes.size());
  }
  return all;
}

void Session::remove_misplaced(std::span<const Misplaced> misplaced) {
  if (rank_ == 0 && !misplaced.empty()) {
    std::string list;
    for (const auto& m : misplaced) {
      list += fmt::format("{}node {} held rank {}'s (on node {} now)", list.empty() ? "" : "; ",
                          nodes_[static_cast<std::size_t>(m.holder)], m.rank,
                          nodes_[static_cast<std::size_t>(m.rank)]);
    }
    log_->warn(
        "segments of job '{}' were left on nodes where this launch runs other ranks: {}. A rank "
        "restores only from its own node, so they were of no use, and are removed",
        config_.job, list);
  }
  std::vector<SegmentIdentity> mine;  // one scan of the node's segments for all of them
  for (const auto& m : misplaced) {
    if (m.holder != rank_) continue;
    mine.push_back(identity_of(m.rank, SegmentKind::workspace));
    mine.push_back(identity_of(m.rank, SegmentKind::checkpoint));
  }
  if (mine.empty()) return;
  for (const SegmentListing& s : list_segments_of(mine)) {
    if (s.header.nranks == nranks_) remove_segment(s.shmid);
  }
}

std::pair<StreamLayout, CheckpointAreas> Session::plan_store(const GroupShape& shape) const {
  const int size = static_cast<int>(shape.ranks.size());
  StreamLayout layout =
      StreamLayout::plan(entries(), staged_bytes(), arena_->regions_bytes(), config_.chunk_bytes,
                         stage_period(config_.scheme, size, config_.parity));
  CheckpointAreas areas =
      checkpoint_areas(layout, shape.geometry, copies(), config_.mode == Mode::self);
  return {std::move(layout), areas};
}

Session::MemoryDemand Session::memory_demand(std::uint64_t mine) {
  MemoryDemand demand;
  // Each rank's need and the cgroups holding it: the ranks sharing a cgroup share its limit.
  constexpr std::size_t kMostLimits = 8;
  std::vector<MemoryLimit> limits = own_memory_limits();
  if (limits.size() > kMostLimits) limits.resize(kMostLimits);
  // Then this rank's segments, which the machine's count of other jobs' segments leaves out.
  constexpr std::size_t kSegments = kMostLimits + 2;
  std::array<std::uint64_t, kSegments + 2> own{};
  own[0] = mine;
  own[1] = limits.size();
  for (std::size_t i = 0; i < limits.size(); ++i)
    own[i + 2] = limits[i].id;
  own[kSegments] = static_cast<std::uint64_t>(arena_->segment_id());
  own[kSegments + 1] = static_cast<std::uint64_t>(checkpoint_.id());
  const auto gathered = effects_->gather_on_machine(std::as_bytes(std::span(own)));
  const auto ranks = static_cast<int>(gathered.size());
  std::vector<std::uint64_t> all(own.size() * gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r)
    std::memcpy(all.data() + r * own.size(), gathered[r].data(), sizeof own);
  std::vector<int> ours;
  for (int r = 0; r < ranks; ++r) {
    const std::uint64_t* other = all.data() + static_cast<std::size_t>(r) * own.size();
    demand.machine += other[0];
    ours.push_back(static_cast<int>(other[kSegments]));
    ours.push_back(static_cast<int>(other[kSegments + 1]));
  }
  // Read once every rank of the job here has its workspace segment (the gather above).
  demand.elsewhere = promised_to_others(shared_segments(), ours, reserved_huge_page_bytes());
  for (MemoryLimit& limit : limits) {
    std::uint64_t need = 0;
    for (int r = 0; r < ranks; ++r) {
      const std::uint64_t* other = all.data() + static_cast<std::size_t>(r) * own.size();
      for (std::uint64_t i = 0; i < other[1]; ++i)
        if (other[i + 2] == limit.id) need += other[0];
    }
    demand.cgroups.emplace_back(std::move(limit), need);
  }
  return demand;
}

void Session::refuse_beyond_memory(const MemoryDemand& demand) const {
  // Reserved huge pages are counted apart from MemAvailable and from a cgroup's memory, and
  // shmget refuses a segment they cannot back.
  if (demand.machine == 0 || config_.huge_pages) return;
  constexpr double kGiB = 1 << 30;
  auto gib = [](std::uint64_t bytes) { return static_cast<double>(bytes) / kGiB; };
  auto taking = [&](std::uint64_t bytes) {
    return fmt::format(
        "about to take {:.1f} GiB more (their checkpoint segments in {} mode and the pages of "
        "their workspaces not yet written)",
        gib(bytes), mode_name(config_.mode));
  };
  const std::string advice =
      "the kernel would kill a process midway. Give the job a smaller workspace or fewer ranks "
      "per machine, or keep less with another SKT_MODE or larger groups (SKT_GROUP_SIZE)";
  // Kept free for what the program allocates besides its workspace: 1/32 of the memory.
  auto usable = [](std::uint64_t room, std::uint64_t memory) {
    return room > memory / 32 ? room - memory / 32 : 0;
  };
  if (const std::optional<MachineMemory> memory = machine_memory()) {
    const std::uint64_t free_of_others =
        memory->available > demand.elsewhere ? memory->available - demand.elsewhere : 0;
    const std::uint64_t left = usable(free_of_others, memory->total);
    if (demand.machine > left) {
      const std::string others =
          demand.elsewhere == 0
              ? std::string()
              : fmt::format(
                    ", less {:.1f} GiB not yet written of the shared memory segments "
                    "that other jobs and programs here hold",
                    gib(demand.elsewhere));
      throw Error(SKT_ERR_NOMEM,
                  fmt::format("this machine cannot hold job '{}': its ranks here are {}, and "
                              "{:.1f} GiB is available (MemAvailable {:.1f} GiB{}, less 1/32 of "
                              "the memory kept free); {}",
                              config_.job, taking(demand.machine), gib(left),
                              gib(memory->available), others, advice));
    }
  }
  for (const auto& [limit, need] : demand.cgroups) {
    const std::uint64_t left = usable(limit.room, limit.limit);
    if (need <= left) continue;
    throw Error(SKT_ERR_NOMEM,
                fmt::format("the memory cgroup {} cannot hold job '{}' (a limit set on the job, as "
                            "Slurm's --mem sets): its ranks in it are {}, and {:.1f} GiB is left "
                            "of its limit of {:.1f} GiB (less 1/32 of the limit kept free); {}, "
                            "or ask for more memory",
                            limit.directory, config_.job, taking(need), gib(left), gib(limit.limit),
                            advice));
  }
}

void Session::set_up_store(const GroupShape& shape, int member, bool keep_existing) {
  store_ = RankStore{};
  store_.mode = config_.mode;
  std::tie(store_.layout, store_.areas) = plan_store(shape);
  store_.geometry = shape.geometry;
  store_.codec = codec_.get();
  store_.member = member;
  store_.stage = arena_->stage();
  store_.workspace = store_.layout.chunks_at(arena_->stage(), arena_->regions());
  if (keep_existing) {
    if (info_.rows != shape.geometry.rows || info_.member != static_cast<std::uint32_t>(member)) {
      throw Error(SKT_ERR_INTERNAL, "recorded stripe rows differ from the recomputed geometry");
    }
    place_checkpoint();
  }
}

void Session::create_checkpoint(const GroupShape& shape, int group, int member, int groups,
                                std::uint64_t lineage, Segment::Population population) {
  const int size = static_cast<int>(shape.ranks.size());
  const std::vector<RegionEntry>& table = store_.layout.entries;
  if (checkpoint_) {
    checkpoint_.remove();
    checkpoint_.detach();
  }
  info_ = CheckpointInfo{};
  info_.scheme = static_cast<std::uint32_t>(config_.scheme);
  info_.parity = static_cast<std::uint32_t>(shape.geometry.parity);
  info_.requested_group_size = static_cast<std::uint32_t>(config_.group_size);
  info_.groups = static_cast<std::uint32_t>(groups);
  info_.group = static_cast<std::uint32_t>(group);
  info_.member = static_cast<std::uint32_t>(member);
  info_.group_size = static_cast<std::uint32_t>(size);
  info_.mode = static_cast<std::uint32_t>(config_.mode);
  info_.chunk_bytes = config_.chunk_bytes;
  info_.rows = shape.geometry.rows;
  info_.stage_bytes = store_.layout.stage_bytes;
  info_.stage_chunks = store_.layout.stage_chunks;
  info_.regions_bytes = store_.layout.regions_bytes;
  info_.layout_hash = store_.layout.hash;
  info_.table_offset = store_.areas.table_offset();
  info_.table_bytes = region_table_bytes(table);
  info_.lineage = lineage;
  info_.command = this_command().print;
  for (int i = 0; i < size; ++i) {
    const auto k = static_cast<std::size_t>(i);
    info_.members[k] = shape.ranks[k];
    info_.member_chunks[k] = shape.chunks[k];
    info_.member_layouts[k] = shape.layouts[k];
  }
  SegmentHeader header;
  header.identity = identity(SegmentKind::checkpoint);
  header.nranks = nranks_;
  header.data_bytes = store_.areas.data_bytes(info_.table_bytes);
  const double creating = now_seconds();
  checkpoint_ =
      Segment::create(header, config_.huge_pages, population, fault_->midway(FaultStep::create, 0));
  segment_seconds_ += now_seconds() - creating;
  checkpoint_created_ = true;
  if (ephemeral_job_) checkpoint_.remove();  // it goes with this process (see Arena::seal)
  encode_checkpoint_info(checkpoint_.base(), info_);
  encode_region_table(checkpoint_.data() + info_.table_offset, table);
  clear_control(checkpoint_.base());
  place_checkpoint();
}

void Session::place_checkpoint() {
  store_.checkpoint = checkpoint_.data();
  store_.copies.clear();
  for (int i = 0; i < copies(); ++i)
    store_.copies.push_back(
        store_.layout.copy_chunks(checkpoint_.data() + store_.areas.copy_offset(i)));
  effects_->set_control_page(checkpoint_.base());
}

std::uint64_t Session::recover() {
  enter(CollectiveCall::recover);
  if (recovered_) throw Error(SKT_ERR_STATE, "skt_recover may be called only once per context");
  try {
    return restore();
  } catch (const AgreedError&) {
    // Every rank refuses together. Each removes what it created before any returns: mpirun kills
    // the others as soon as one exits, and a rank killed before its clean-up would leave segments
    // that make the corrected first launch of the job refuse to start.
    remove_created_segments();
    try {
      effects_->barrier();
    } catch (const MpiError&) {
      // A communicator failing here must not hide the refusal every rank agreed on.
    }
    throw;
  }
}

void Session::remove_drained_epochs() {
  if (config_.drain_checksum) {
    remove_rank_files(config_.drain_dir, config_.job, rank_, std::nullopt);
  } else if (rank_ == 0 && !config_.drain_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(drain_job_dir(config_.drain_dir, config_.job), ignored);
  }
}

void Session::remove_created_segments() {
  if (arena_ && arena_->sealed() && !arena_->found()) arena_->remove();
  if (checkpoint_ && checkpoint_created_) checkpoint_.remove();
}

std::uint64_t Session::restore() {
  const double start = now_seconds();
  segment_seconds_ = 0;
  Finding mine;
  effects_->agree([&] {
    arena();  // a program with no region still has a workspace: its staged private objects
    if (refusal_) std::rethrow_exception(refusal_);
    std::sort(privates_.begin(), privates_.end(),
              [](const PrivateObject& a, const PrivateObject& b) { return a.name < b.name; });
    arena_->seal(staged_bytes());
    mine = inspect_checkpoint();
    segment_seconds_ += now_seconds() - start;
  });
  declared_layout_hash_ = mine.layout_hash;
  const auto gathered =
      effects_->gather(std::span(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
  std::vector<Finding> findings(gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r)
    std::memcpy(&findings[r], gathered[r].data(), sizeof(Finding));
  for (const int r : stale_ranks(findings)) {
    if (rank_ == 0) {
      log_->warn(
          "rank {} on node {} holds segments of job '{}' from an earlier start of it than the "
          "other ranks' (the node was out of reach while the job was removed and started again "
          "under its tag): they are no checkpoint of this run, and the rank is rebuilt from its "
          "group as if lost",
          r, nodes_[static_cast<std::size_t>(r)], config_.job);
    }
    findings[static_cast<std::size_t>(r)].valid = 0;
  }
  mine = findings[static_cast<std::size_t>(rank_)];
  if (std::any_of(findings.begin(), findings.end(),
                  [](const Finding& f) { return f.other_command; })) {
    // Restored into this computation, that one's checkpoint gives a wrong result. What a run of
    // it left before its first checkpoint is nobody's: taken as nothing, as this command's is.
    const bool held = holds_epoch(findings);
    effects_->agree([&] {
      if (held && mine.other_command)
        throw another_command_error("skt-shm clean --job " + config_.job);
    });
    if (rank_ == 0) {
      log_->warn(
          "job '{}' has segments of another command, or from another directory, than this one, "
          "which hold no checkpoint (its run stopped before its first): they are taken as nothing",
          config_.job);
    }
  }
  // An earlier run completed the job and was ended while removing its segments: what is left of
  // them is no checkpoint, and the job starts again as after removals that finished.
  const std::optional<std::int64_t> completed = completed_epoch(findings);
  if (completed) {
    if (rank_ == 0) {
      log_->warn(
          "job '{}' completed after epoch {} in an earlier run, which was ended while removing "
          "its segments: what is left of them is removed, and the job starts afresh",
          config_.job, *completed);
    }
    for (auto& f : findings)
      f.valid = 0;
    remove_drained_epochs();
  }
  const std::vector<Misplaced> misplaced = gather_misplaced();
  if (config_.restart == 0 && !misplaced.empty()) {
    effects_->agree([&] {
      const Misplaced& m = misplaced.front();
      throw Error(SKT_ERR_STALE,
                  fmt::format("node {} holds segments of job '{}' rank {} from an earlier run, but "
                              "SKT_RESTART=0 says this is a first launch; remove the old segments "
                              "with 'skt-shm clean --job {}' or use a new job tag",
                              nodes_[static_cast<std::size_t>(m.holder)], config_.job, m.rank,
                              config_.job));
    });
  }
  // A rank that found nothing of its own where this launch placed it, while its checkpoint lies on
  // another node of this launch: the ranks were placed otherwise than in the run that wrote it
  // (swapped between nodes). Refused before anything is rebuilt or removed, with every segment
  // kept: the groups might rebuild those ranks, but on the wrong nodes and from less than there
  // is, and beyond their tolerance the checkpoint would be lost for good; a relaunch that places
  // them right restores it whole.
  // With drains, storage serves instead where it holds an epoch as new as theirs (a requeued job
  // that lost the first node of its list shifts every rank), and nothing is lost.
  const std::vector<Misplaced> needed = needed_elsewhere(findings, misplaced);
  std::int64_t misplaced_epoch = 0;
  std::optional<AgreedError> memory_failure;
  if (!needed.empty()) {
    const std::string refusal = misplacement_refusal(needed, nodes_, config_.job);
    if (config_.drain_dir.empty()) {
      throw AgreedError(SKT_ERR_MISMATCH,
                        fmt::format("{}. Nothing was changed or removed", refusal));
    }
    for (const auto& m : needed)
      misplaced_epoch = std::max(misplaced_epoch, m.committed);
    memory_failure = AgreedError(SKT_ERR_MISMATCH, refusal);
  }
  // What is left on the wrong nodes is no checkpoint this launch or a later one could use (an
  // older start's, or of ranks that found their own in place): establish removes it, as the memory
  // it holds may be what the new segments need.
  misplaced_ = misplaced;

  // The memory level first; when it cannot serve (more losses than a group tolerates, or nothing
  // left in memory at all), the newest epoch that storage holds completely.
  RestorePlan setup;
  if (!memory_failure) {
    try {
      effects_->agree([&] { setup = plan_restore(findings, nodes_, config_); });
      const bool survivor = !setup.fresh() && mine.valid != 0;
      const int group =
          establish(setup, survivor ? std::optional<ControlState>(mine.state) : std::nullopt);
      std::function<void()> prepare;
      if (!survivor && !setup.fresh()) prepare = [&] { prepare_checkpoint(setup); };
      const RestoreInputs inputs{setup.candidates, survivor,    setup.shapes,      group,
                                 nodes_,           config_.job, std::move(prepare)};
      epoch_ = protocol_->restore(inputs);
    } catch (const AgreedError& e) {
      if (e.code() != SKT_ERR_UNRECOVERABLE) throw;
      memory_failure = e;
      if (config_.drain_dir.empty()) throw *memory_failure;
    }
  }
  const bool fresh = !memory_failure && setup.fresh();
  bool from_storage = false;
  if (memory_failure || (fresh && !completed && !config_.drain_dir.empty())) {
    from_storage = restore_from_storage(findings, memory_failure ? memory_failure->what() : "",
                                        misplaced_epoch);
  }
  log_->set_epoch(epoch_);
  if ((from_storage || !fresh) && !arena_->at_fixed_addresses()) {
    log_->warn(
        "this rank's workspace could not be placed at the addresses every launch gives it (from "
        "32 TiB: taken, or beyond this machine's address space): pointers that its regions held "
        "into its regions before the relaunch do not point there now");
  }
  recovered_ = true;
  last_recover_seconds_ = now_seconds() - start;
  last_verify_seconds_ = protocol_->stats().verify_seconds;
  account_recovery(mine.valid == 0 && !fresh);
  // What a checkpoint cost before the failure, as the survivors recorded it (the slowest's): the
  // checkpoint interval's cost until this launch has measured its own.
  double recorded = static_cast<double>(protocol_->state().checkpoint_nanoseconds) * 1e-9;
  recorded_checkpoint_seconds_ = effects_->all_max(recorded);
  if (monitor_) monitor_->recovered(epoch_, from_storage);
  last_commit_time_ = now_seconds();
  if (from_storage) {
    log_->job("recovered epoch {} from storage ({}) in {:.3f} s; the memory level is rebuilt",
              epoch_, config_.drain_dir, last_recover_seconds_);
    return epoch_;
  }
  if (fresh) {
    if (rank_ == 0) warn_of_other_group_sizes(setup.groups);
    if (config_.restart.value_or(0) > 0 && !completed && rank_ == 0) {
      log_->warn("SKT_RESTART={} but job '{}' has no committed checkpoint: starting afresh",
                 *config_.restart, config_.job);
    }
    log_->job("fresh start: {} groups, this rank is member {} of group {} ({} members)",
              setup.groups.groups(), info_.member, info_.group, info_.group_size);
    return 0;
  }
  const ProtocolStats& s = protocol_->stats();
  if (s.workspace_blocks_overwritten > 0) {
    log_->warn(
        "{} blocks of this rank's workspace differed from epoch {}, which it held when the job "
        "stopped, and were restored from its committed copy: the program wrote into its regions "
        "before skt_recover, which it must not do",
        s.workspace_blocks_overwritten, epoch_);
  }
  log_->info(
      "recovered epoch {} in {:.3f} s: {}; {} blocks of the workspace rolled back, {} blocks of "
      "the committed copy written from the workspace, {} items rebuilt from the group; {}",
      epoch_, last_recover_seconds_,
      mine.valid != 0 ? "this rank's memory survived"
      : arena_->from_reserve() || checkpoint_.from_reserve()
          ? "this rank was lost, and took over memory reserved for it on this node (a warm spare)"
          : "this rank was lost",
      s.workspace_blocks_rolled_back, s.copy_blocks_mended, s.chunks_rebuilt,
      describe_phases(recovery_));
  log_job_recovery();
  return epoch_;
}

void Session::log_job_recovery() {
  // Every rank's part, for one line of rank 0's: which ranks were rebuilt, where, and how much
  // came back, where rank 0 alone spoke of its own.
  struct Part {
    double seconds;
    std::uint64_t rebuilt_bytes;
    std::uint64_t rolled_back_blocks;
    std::int32_t lost;
    std::int32_t warm;
  };
  const Part mine{recovery_.seconds, recovery_.rebuilt_bytes,
                  protocol_->stats().workspace_blocks_rolled_back, recovery_.lost,
                  arena_->from_reserve() || checkpoint_.from_reserve() ? 1 : 0};
  const auto all =
      effects_->gather(std::span(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
  if (rank_ != 0) return;
  std::vector<std::string> rebuilt;
  std::uint64_t bytes = 0, rolled_back = 0;
  int slowest = 0, warm = 0;
  double longest = -1;
  for (int r = 0; r < nranks_; ++r) {
    Part p{};
    std::memcpy(&p, all[static_cast<std::size_t>(r)].data(), sizeof p);
    if (p.lost != 0) {
      rebuilt.push_back(fmt::format("{} (node {})", r, nodes_[static_cast<std::size_t>(r)]));
      bytes += p.rebuilt_bytes;
      warm += p.warm;
    }
    rolled_back += p.rolled_back_blocks;
    if (p.seconds > longest) {
      longest = p.seconds;
      slowest = r;
    }
  }
  constexpr double kMiB = 1 << 20;
  log_->job(
      "job '{}' recovered epoch {} in {:.3f} s (rank {} the slowest): {}; {} of {} ranks' memory "
      "survived ({} blocks rolled back in all)",
      config_.job, epoch_, longest, slowest,
      rebuilt.empty()
          ? std::string("no rank was rebuilt")
          : fmt::format(
                "rank{} {} rebuilt from {} group{}, {:.1f} MiB in all{}",
                rebuilt.size() == 1 ? "" : "s", fmt::join(rebuilt, ", "),
                rebuilt.size() == 1 ? "its" : "their", rebuilt.size() == 1 ? "" : "s",
                static_cast<double>(bytes) / kMiB,
                warm > 0 ? fmt::format(", {} onto memory reserved ahead", warm) : std::string()),
      nranks_ - static_cast<int>(rebuilt.size()), nranks_, rolled_back);
}

void Session::account_recovery(bool lost) {
  const ProtocolStats& s = protocol_->stats();
  skt_recovery& r = recovery_;
  r = skt_recovery{};
  r.seconds = last_recover_seconds_;
  r.attach = segment_seconds_;
  r.join = join_seconds_;
  r.verify = s.verify_seconds;
  r.fetch = s.fetch_seconds;
  r.decode = s.decode_seconds;
  r.restore = s.restore_seconds;
  r.agree =
      std::max(0.0, r.seconds - r.attach - r.join - r.verify - r.fetch - r.decode - r.restore);
  r.verified_bytes = s.verified_bytes;
  r.rebuilt_bytes = s.rebuilt_bytes;
  r.restored_bytes = s.restored_bytes;
  r.lost = lost ? 1 : 0;
}

void Session::warn_of_other_group_sizes(const GroupPlan& plan) const {
  const int asked = config_.group_size;
  if (asked <= 1) return;
  std::string warning;
  if (asked > nranks_) {
    warning = fmt::format(
        "the group size (SKT_GROUP_SIZE) is {} but the job has {} ranks: one group of {}", asked,
        nranks_, nranks_);
  } else {
    int smallest = nranks_, largest = 0;
    for (int g = 0; g < plan.groups(); ++g) {
      smallest = std::min(smallest, plan.size_of(g));
      largest = std::max(largest, plan.size_of(g));
    }
    const std::string sizes =
        smallest == largest ? std::to_string(largest) : fmt::format("{} to {}", smallest, largest);
    if (largest > asked) {
      warning = fmt::format(
          "groups of {} ranks, where the group size (SKT_GROUP_SIZE) is {}: {} ranks in groups of "
          "at most {} would leave a group too small to protect itself",
          sizes, asked, nranks_, asked);
    } else if (plan.groups() > (nranks_ + asked - 1) / asked) {
      warning = fmt::format(
          "groups of {} ranks, where the group size (SKT_GROUP_SIZE) is {}: a group's members must "
          "be on distinct nodes, and a node holds {} of the job's ranks. Smaller groups take more "
          "memory for their checksums",
          sizes, asked, plan.groups());
    }
  }
  if (!warning.empty() && first_time_in_process(warning)) log_->warn("{}", warning);
}

int Session::establish(const RestorePlan& setup, std::optional<ControlState> survived) {
  const GroupPlan& plan = setup.groups;
  const int group = plan.group_of[static_cast<std::size_t>(rank_)];
  const int member = plan.index_of[static_cast<std::size_t>(rank_)];
  const GroupShape& shape = setup.shapes[static_cast<std::size_t>(group)];
  // Members of a group should still sit on distinct nodes (a replacement takes over its
  // predecessor's place); if not, the next failure of that node would take two.
  for (const int r : shape.ranks) {
    if (r != rank_ && nodes_[static_cast<std::size_t>(r)] == config_.node) {
      log_->warn(
          "rank {} of this rank's group is on the same node {}: a failure of that node "
          "would be unrecoverable",
          r, config_.node);
    }
  }
  remove_misplaced(std::exchange(misplaced_, {}));
  const double decided = now_seconds();
  const double segments_before = segment_seconds_;
  codec_ = shape.geometry.parity > 0
               ? enc::make_codec(config_.scheme, shape.geometry.group_size, shape.geometry.parity)
               : nullptr;
  effects_->join(group, member, shape.geometry, codec_.get(), shape.chunks, config_.pipeline_depth);
  // A rank that keeps its segments takes no new memory; one that starts them afresh takes a new
  // checkpoint segment, and the pages of its workspace as they are written (restored or computed).
  std::uint64_t creating = 0;
  if (!survived) {
    try {
      const auto [layout, areas] = plan_store(shape);
      const std::size_t replaced = checkpoint_ ? checkpoint_.header().segment_bytes : 0;
      const std::size_t bytes =
          segment_size(areas.data_bytes(region_table_bytes(layout.entries)), config_.huge_pages);
      // Memory reserved on this node for the job (a warm spare) holds it already: the machine's
      // available memory no longer counts it.
      const auto reserves = list_reserves(config_.job, config_.node);
      const bool reserved = std::any_of(reserves.begin(), reserves.end(), [&](const auto& r) {
        return r.header.segment_bytes >= bytes;
      });
      creating = (bytes > replaced && !reserved ? bytes - replaced : 0) + arena_->unwritten_bytes();
    } catch (const std::exception&) {
      // set_up_store meets the same error below, and every rank refuses together.
    }
  }
  const MemoryDemand demand = memory_demand(creating);
  effects_->agree([&] {
    refuse_beyond_memory(demand);
    set_up_store(shape, member, survived.has_value());
    // Every page of a fresh start's checkpoint segment now, D's too: a first touch costs far more
    // than a copy (the kernel clears the page, a virtual machine's host may have to back it), and
    // it belongs to the set-up, not to the first checkpoint. A rank rebuilt by its group makes its
    // segment as the recovery begins (prepare_checkpoint), while the others verify theirs.
    if (!survived && setup.fresh()) {
      create_checkpoint(shape, group, member, plan.groups(), run_id_, Segment::Population::written);
    }
  });
  protocol_ = std::make_unique<Protocol>(
      config_.mode, *effects_, store_,
      PrivateObjects{[this](std::byte* at, const Progress& p) { stage_private_objects(at, p); },
                     [this](const std::byte* at) { restore_private_objects(at); }},
      survived.value_or(ControlState{}));
  join_seconds_ = now_seconds() - decided - (segment_seconds_ - segments_before);
  log_->debug("joined group {} as member {} in {:.4f} s", group, member, join_seconds_);
  return group;
}

void Session::prepare_checkpoint(const RestorePlan& setup) {
  const int group = setup.groups.group_of[static_cast<std::size_t>(rank_)];
  // Mapped, not written: the rebuild writes what it brings as it lands, and the rest (the checksum
  // area of the next epoch) is the next checkpoint's to write.
  create_checkpoint(setup.shapes[static_cast<std::size_t>(group)], group,
                    setup.groups.index_of[static_cast<std::size_t>(rank_)], setup.groups.groups(),
                    setup.lineage, Segment::Population::mapped);
}

void Session::refuse_older_than_misplaced(const std::string& misplacement,
                                          std::int64_t misplaced_epoch,
                                          std::int64_t drained) const {
  if (misplaced_epoch <= 0 || drained >= misplaced_epoch) return;
  throw AgreedError(
      SKT_ERR_MISMATCH,
      fmt::format("{}; storage ({}) holds {}, older than their epoch {}. Nothing was changed or "
                  "removed",
                  misplacement, drain_job_dir(config_.drain_dir, config_.job).string(),
                  drained < 0 ? "no completely drained epoch" : fmt::format("epoch {}", drained),
                  misplaced_epoch));
}

bool Session::restore_from_storage(const std::vector<Finding>& findings,
                                   const std::string& memory_failure,
                                   std::int64_t misplaced_epoch) {
  if (config_.drain_checksum)
    return restore_from_group_files(findings, memory_failure, misplaced_epoch);
  // Rank 0's view of the drain directory decides; every rank must see that epoch's manifest too.
  std::int64_t chosen = -1;
  std::vector<DrainedEpoch> complete;
  effects_->agree([&] { complete = complete_epochs(config_.drain_dir, config_.job); });
  if (rank_ == 0 && !complete.empty())
    chosen = static_cast<std::int64_t>(complete.front().manifest.epoch);
  chosen = effects_->broadcast_value(chosen);
  const std::string where = drain_job_dir(config_.drain_dir, config_.job).string();
  refuse_older_than_misplaced(memory_failure, misplaced_epoch, chosen);
  if (chosen < 0) {
    if (memory_failure.empty()) return false;  // a fresh start: nothing anywhere
    throw AgreedError(SKT_ERR_UNRECOVERABLE,
                      fmt::format("{}; storage cannot serve either: {} holds no completely drained "
                                  "epoch of job '{}'",
                                  memory_failure, where, config_.job));
  }
  if (config_.restart && *config_.restart == 0) {
    throw AgreedError(
        SKT_ERR_STALE,
        fmt::format(
            "drained checkpoints of job '{}' (epoch {}) exist in {} from an earlier run, but "
            "SKT_RESTART=0 says this is a first launch; remove them with 'skt-drain remove "
            "--dir {} --job {}' or use a new job tag",
            config_.job, chosen, where, config_.drain_dir, config_.job));
  }
  DrainedEpoch epoch;
  effects_->agree([&] {
    const auto it = std::find_if(complete.begin(), complete.end(), [&](const DrainedEpoch& d) {
      return d.manifest.epoch == static_cast<std::uint64_t>(chosen);
    });
    if (it == complete.end()) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("rank {} on node {} cannot see the manifest of drained epoch {} in "
                              "{}: the drain directory must be the same for every rank",
                              rank_, config_.node, chosen, where));
    }
    epoch = *it;
    if (epoch.manifest.nranks() != nranks_) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("drained epoch {} of job '{}' was written by {} ranks, this run has "
                              "{}; relaunch with {} ranks",
                              chosen, config_.job, epoch.manifest.nranks(), nranks_,
                              epoch.manifest.nranks()));
    }
  });
  if (rank_ == 0 && epoch.rebuilt) {
    log_->warn(
        "the manifest of drained epoch {} in {} is damaged; every rank's file of it is whole and "
        "they agree, so the epoch is restored from them",
        chosen, where);
  }
  // Worth a warning: the job goes back to an older epoch than memory would have given.
  if (rank_ == 0) {
    log_->warn("{}: restoring drained epoch {} from storage ({})",
               memory_failure.empty() ? "nothing of job '" + config_.job + "' is left in memory"
                                      : "memory cannot serve (" + memory_failure + ")",
               chosen, where);
  }
  // Every rank's file is checked whole before anything in memory changes: when storage cannot
  // serve either, the segments that survived stay as they were.
  const auto check = [&](const DrainFileHeader& h) {
    refuse_another_command(h.command,
                           "skt-drain remove --dir " + config_.drain_dir + " --job " + config_.job);
    if (h.layout_hash != declared_layout_hash_ || h.stage_bytes != staged_bytes() ||
        h.regions_bytes != arena_->regions_bytes()) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the regions declared now differ from those of drained epoch {} "
                              "({} bytes of private objects and {} of regions); a relaunch must "
                              "declare the same regions and protect the same objects",
                              chosen, h.stage_bytes, h.regions_bytes));
    }
  };
  const auto unreadable = [&](const std::exception& e) {
    return Error(SKT_ERR_UNRECOVERABLE,
                 fmt::format("drained epoch {} cannot be restored: {}{}", chosen, e.what(),
                             memory_failure.empty() ? "" : " (memory: " + memory_failure + ")"));
  };
  effects_->agree([&] {
    try {
      check(read_drain_file(epoch, rank_, {}));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw unreadable(e);
    }
  });
  if (!memory_failure.empty() || !protocol_) {
    std::vector<Finding> nothing = findings;
    for (auto& f : nothing)
      f.valid = 0;
    RestorePlan fresh;
    effects_->agree([&] { fresh = plan_restore(nothing, nodes_, config_); });
    const int group = establish(fresh, std::nullopt);
    protocol_->restore(
        RestoreInputs{fresh.candidates, false, fresh.shapes, group, nodes_, config_.job, {}});
  }
  effects_->agree([&] {
    try {
      read_drain_file(epoch, rank_,
                      [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
                        load_copy_bytes(offset, bytes, n);
                      });
    } catch (const std::exception& e) {
      throw unreadable(e);
    }
    restore_private_objects(arena_->stage());
  });
  // The memory level anew: W, B and the checksums of the epoch, as a checkpoint writes them.
  protocol_->checkpoint(static_cast<std::uint64_t>(chosen), nullptr);
  epoch_ = static_cast<std::uint64_t>(chosen);
  return true;
}

void Session::load_copy_bytes(std::uint64_t offset, const std::byte* bytes, std::size_t n) {
  const StreamLayout& layout = store_.layout;
  const std::uint64_t regions_at = layout.copy_regions_offset();
  const std::uint64_t end = offset + n;
  // B is the stage, a gap to the next 64 bytes, then the regions' area.
  const std::uint64_t stage_end = std::min<std::uint64_t>(end, layout.stage_bytes);
  if (offset < stage_end) std::memcpy(arena_->stage() + offset, bytes, stage_end - offset);
  const std::uint64_t from = std::max(offset, regions_at);
  const std::uint64_t to = std::min<std::uint64_t>(end, regions_at + layout.regions_bytes);
  if (from < to)
    std::memcpy(arena_->regions() + (from - regions_at), bytes + (from - offset), to - from);
}

bool Session::restore_from_group_files(const std::vector<Finding>& findings,
                                       const std::string& memory_failure,
                                       std::int64_t misplaced_epoch) {
  // No rank may see another's files (node-local disks): each tells the others which it holds.
  const std::string where = drain_job_dir(config_.drain_dir, config_.job).string();
  std::vector<DrainFileHeader> own;
  effects_->agree([&] {
    own = rank_files(config_.drain_dir, config_.job, rank_);
    std::erase_if(own, [](const DrainFileHeader& h) { return !h.with_checksum; });
  });
  std::vector<std::byte> pages(own.size() * kDrainHeaderBytes);
  for (std::size_t i = 0; i < own.size(); ++i)
    encode_drain_header(pages.data() + i * kDrainHeaderBytes, own[i]);
  const auto gathered = effects_->gather(pages);
  std::vector<std::vector<DrainFileHeader>> files(gathered.size());
  std::size_t held = 0;
  const DrainFileHeader* newest = nullptr;
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    for (std::size_t at = 0; at + kDrainHeaderBytes <= gathered[r].size(); at += kDrainHeaderBytes)
      files[r].push_back(*decode_drain_header(gathered[r].data() + at));
    held += files[r].size();
  }
  for (const auto& mine : files) {
    for (const auto& h : mine) {
      if (newest == nullptr || h.epoch > newest->epoch) newest = &h;
    }
  }
  refuse_older_than_misplaced(memory_failure, misplaced_epoch,
                              newest != nullptr ? static_cast<std::int64_t>(newest->epoch) : -1);
  if (newest == nullptr) {
    if (memory_failure.empty()) return false;  // a fresh start: nothing anywhere
    throw AgreedError(SKT_ERR_UNRECOVERABLE,
                      fmt::format("{}; storage cannot serve either: no rank holds a drained file "
                                  "of job '{}' in {}",
                                  memory_failure, config_.job, config_.drain_dir));
  }
  if (config_.restart && *config_.restart == 0) {
    throw AgreedError(
        SKT_ERR_STALE,
        fmt::format("drained checkpoints of job '{}' ({} files, epoch {} the newest) exist in {} "
                    "from an earlier run, but SKT_RESTART=0 says this is a first launch; remove "
                    "them with 'skt-drain remove --dir {} --job {}' on every node, or use a new "
                    "job tag",
                    config_.job, held, newest->epoch, where, config_.drain_dir, config_.job));
  }
  if (newest->nranks != nranks_) {
    throw AgreedError(
        SKT_ERR_MISMATCH,
        fmt::format("drained epoch {} of job '{}' was written by {} ranks, this run "
                    "has {}; relaunch with {} ranks",
                    newest->epoch, config_.job, newest->nranks, nranks_, newest->nranks));
  }
  const auto tolerance = [](std::uint32_t scheme, int parity) {
    return enc::tolerance(static_cast<enc::Scheme>(scheme), parity);
  };
  // The newest epoch the groups can rebuild; every file it takes is read whole before anything in
  // memory changes, and one that is not counts as missing.
  std::optional<DrainedCandidate> chosen;
  while (!chosen) {
    std::string why_not;
    auto candidates = drained_candidates(files, tolerance, &why_not);
    if (candidates.empty()) {
      throw AgreedError(
          SKT_ERR_UNRECOVERABLE,
          fmt::format("{}storage cannot serve either: no drained epoch in {} can be rebuilt ({})",
                      memory_failure.empty() ? "" : memory_failure + "; ", where, why_not));
    }
    DrainedCandidate& c = candidates.front();
    const DrainFileHeader& s = c.sample;
    bool parity_differs = false;
    for (std::size_t g = 0; g < c.members.size(); ++g)
      parity_differs =
          parity_differs || (c.members[g].size() > 1 && c.parity_of[g] != config_.parity);
    if (s.scheme != static_cast<std::uint32_t>(config_.scheme) || parity_differs ||
        s.chunk_bytes != config_.chunk_bytes) {
      throw AgreedError(
          SKT_ERR_MISMATCH,
          fmt::format("drained epoch {} was encoded with scheme {}, parity {} and chunks of {} "
                      "bytes; relaunch with the same SKT_SCHEME, SKT_PARITY and SKT_CHUNK_SIZE",
                      c.epoch, enc::scheme_name(static_cast<enc::Scheme>(s.scheme)),
                      *std::max_element(c.parity_of.begin(), c.parity_of.end()), s.chunk_bytes));
    }
    for (int r = 0; r < nranks_; ++r) {
      const Finding& f = findings[static_cast<std::size_t>(r)];
      const int size = static_cast<int>(c.members[static_cast<std::size_t>(c.group_of[r])].size());
      const std::uint64_t chunks =
          StreamLayout::plan({}, f.stage_bytes, f.regions_bytes, config_.chunk_bytes,
                             stage_period(config_.scheme, size, config_.parity))
              .chunks;
      const auto& held_by_r = files[static_cast<std::size_t>(r)];
      const bool layout_differs =
          std::any_of(held_by_r.begin(), held_by_r.end(), [&](const auto& h) {
            return h.epoch == c.epoch && h.run == c.run &&
                   (h.layout_hash != f.layout_hash || h.stage_bytes != f.stage_bytes ||
                    h.regions_bytes != f.regions_bytes);
          });
      if (chunks != c.chunks_of[static_cast<std::size_t>(r)] || layout_differs) {
        throw AgreedError(
            SKT_ERR_MISMATCH,
            fmt::format("rank {} declared regions that differ from those of drained epoch {}; a "
                        "relaunch must declare the same regions and protect the same objects",
                        r, c.epoch));
      }
    }
    const auto& mine = files[static_cast<std::size_t>(rank_)];
    const auto held_here = std::find_if(mine.begin(), mine.end(), [&](const DrainFileHeader& h) {
      return h.epoch == c.epoch && h.run == c.run;
    });
    int whole = 1;
    effects_->agree([&] {
      if (held_here == mine.end()) return;
      try {
        read_rank_file(
            drain_rank_file(drain_epoch_dir(config_.drain_dir, config_.job, c.epoch), rank_),
            {config_.job, c.run, c.epoch, rank_, nranks_, std::nullopt}, {});
      } catch (const std::exception& e) {
        whole = 0;
        log_->warn("{}: this rank's file of epoch {} counts as lost", e.what(), c.epoch);
      }
    });
    if (effects_->all_min(whole) != 0) {
      chosen = std::move(c);
      break;
    }
    // Each rank drops what it found damaged from everyone's view, and the choice is made again.
    const std::vector<int> bad = effects_->gather_values(1 - whole);
    for (int r = 0; r < nranks_; ++r) {
      if (bad[static_cast<std::size_t>(r)] == 0) continue;
      auto& list = files[static_cast<std::size_t>(r)];
      std::erase_if(list,
                    [&](const DrainFileHeader& h) { return h.epoch == c.epoch && h.run == c.run; });
    }
  }
  const DrainedCandidate& c = *chosen;
  effects_->agree([&] {
    for (const auto& h : files[static_cast<std::size_t>(rank_)]) {
      if (h.epoch == c.epoch && h.run == c.run) {
        refuse_another_command(h.command, "skt-drain remove --dir " + config_.drain_dir +
                                              " --job " + config_.job + " on every node");
      }
    }
  });
  std::vector<std::string> rebuilt;
  for (std::size_t g = 0; g < c.lost.size(); ++g) {
    for (const int i : c.lost[g])
      rebuilt.push_back(std::to_string(c.members[g][static_cast<std::size_t>(i)]));
  }
  if (rank_ == 0) {
    log_->warn("{}: restoring drained epoch {} from storage ({}){}",
               memory_failure.empty() ? "nothing of job '" + config_.job + "' is left in memory"
                                      : "memory cannot serve (" + memory_failure + ")",
               c.epoch, where,
               rebuilt.empty() ? std::string()
                               : fmt::format("; rebuilt from their groups' files, for want of "
                                             "a whole file of their own: ranks {}",
                                             fmt::join(rebuilt, ", ")));
  }
  // The groups of the run that drained, as the memory level would keep them.
  RestorePlan setup;
  setup.groups.group_of = c.group_of;
  setup.groups.members = c.members;
  setup.groups.index_of.assign(static_cast<std::size_t>(nranks_), 0);
  for (const auto& members : c.members) {
    for (std::size_t i = 0; i < members.size(); ++i)
      setup.groups.index_of[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
  }
  setup.shapes = group_shapes(setup.groups, c.chunks_of, config_.parity, config_.chunk_bytes,
                              enc::tolerance(config_.scheme, config_.parity));
  for (auto& shape : setup.shapes) {
    for (const int r : shape.ranks)
      shape.layouts.push_back(findings[static_cast<std::size_t>(r)].layout_hash);
  }
  const int group = establish(setup, std::nullopt);
  protocol_->restore(RestoreInputs{{}, false, setup.shapes, group, nodes_, config_.job, {}});
  const bool lost_here =
      std::find(c.lost[static_cast<std::size_t>(group)].begin(),
                c.lost[static_cast<std::size_t>(group)].end(),
                static_cast<int>(info_.member)) != c.lost[static_cast<std::size_t>(group)].end();
  std::byte* const checksum = store_.checksum_of(c.epoch);
  effects_->agree([&] {
    if (lost_here) return;
    try {
      const DrainFileHeader h = read_rank_file(
          drain_rank_file(drain_epoch_dir(config_.drain_dir, config_.job, c.epoch), rank_),
          {config_.job, c.run, c.epoch, rank_, nranks_, std::nullopt},
          [&](std::uint64_t offset, const std::byte* bytes, std::size_t n) {
            if (offset < store_.layout.copy_bytes()) {
              load_copy_bytes(offset, bytes, n);
            } else if (offset - store_.layout.copy_bytes() + n <= store_.geometry.parity_bytes()) {
              std::memcpy(checksum + (offset - store_.layout.copy_bytes()), bytes, n);
            }
          });
      if (h.checksum_bytes != store_.geometry.parity_bytes()) {
        throw Error(SKT_ERR_INTERNAL,
                    fmt::format("drained epoch {}: this rank's file holds {} bytes of checksum, "
                                "its group's stripes take {}",
                                c.epoch, h.checksum_bytes, store_.geometry.parity_bytes()));
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("drained epoch {} cannot be restored: {}", c.epoch, e.what()));
    }
  });
  const auto& lost = c.lost[static_cast<std::size_t>(group)];
  effects_->agree([&] {
    if (!lost.empty()) effects_->rebuild(lost, {}, {}, store_.workspace, checksum, {}, nullptr);
  });
  if (lost_here)
    log_->warn("this rank's data of epoch {} was rebuilt from its group's files", c.epoch);
  restore_private_objects(arena_->stage());
  // The memory level anew: W, B and the checksums of the epoch, as a checkpoint writes them.
  protocol_->checkpoint(c.epoch, nullptr);
  epoch_ = c.epoch;
  return true;
}

void Session::checkpoint(const std::vector<DirtyRange>* dirty) {
  const CollectiveCall call =
      dirty != nullptr ? CollectiveCall::checkpoint_dirty : CollectiveCall::checkpoint;
  enter(call);
  require_recovered(call_name(call));
  // Each rank declares ranges of its own: one rank's mistake must stop them all, or the others
  // would wait in the checkpoint for it.
  effects_->agree([&] {
    if (dirty == nullptr) return;
    for (const auto& d : *dirty) {
      const RegionEntry* region = store_.layout.region(d.region);
      if (region == nullptr) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: no region named '{}'", d.region));
      }
      if (d.offset > region->bytes || d.length > region->bytes - d.offset) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: bytes {} to {} are outside region '{}' of "
                                "{} bytes",
                                d.offset, d.offset + d.length, d.region, region->bytes));
      }
    }
  });
  const double start = now_seconds();
  // The flush is about to overwrite the copy a drain may still be reading.
  settle_drain();
  renew_removed_segments();
  const std::uint64_t next = epoch_ + 1;
  // Without declared ranges, the blocks that changed are found by comparing W with B, where the
  // protocol can encode only those (self mode, an exact scheme, not the first checkpoint after a
  // start, a recovery or a failure): the same on every rank, so all take the same path.
  const bool incremental = protocol_->encodes_incrementally();
  std::vector<std::uint64_t> changed;
  last_scan_seconds_ = 0;
  if (dirty != nullptr) {
    changed = store_.layout.changed_blocks(store_.geometry, *dirty);
    if (incremental) check_declared(changed, next);
  } else if (incremental && config_.find_changes) {
    changed = store_.layout.differing_blocks(store_.geometry, store_.workspace,
                                             store_.copy_of(next), static_settled_);
    last_scan_seconds_ = now_seconds() - start;
  }
  const bool partial = incremental && (dirty != nullptr || config_.find_changes);
  protocol_->checkpoint(next, partial ? &changed : nullptr);
  last_changed_bytes_ =
      partial ? StreamLayout::changed_bytes(store_.geometry, store_.workspace, changed)
              : store_.layout.workspace_bytes();
  static_settled_.insert(static_marked_.begin(), static_marked_.end());
  static_marked_.clear();
  // Every rank learns the slowest rank's time, which is what the checkpoint cost.
  double elapsed = now_seconds() - start;
  elapsed = effects_->all_max(elapsed);
  epoch_ = next;
  log_->set_epoch(epoch_);
  if (monitor_) monitor_->committed(epoch_);
  last_checkpoint_seconds_ = elapsed;
  last_commit_time_ = now_seconds();
  if (drain_due()) start_drain();
  log_->debug("checkpoint {}: encoding {:.4f} s, flushing {:.4f} s of {:.4f} s on this rank",
              epoch_, protocol_->stats().encode_seconds, protocol_->stats().flush_seconds,
              now_seconds() - start);
  log_->job("checkpoint {} committed in {:.3f} s ({})", epoch_, last_checkpoint_seconds_,
            partial ? fmt::format("{} of {} bytes of this rank's stream changed{}",
                                  last_changed_bytes_, store_.layout.workspace_bytes(),
                                  dirty != nullptr ? ", as declared" : "")
                    : std::string("in full"));
}

void Session::check_declared(std::vector<std::uint64_t>& declared, std::uint64_t next) {
  // The ranges are a promise that nothing else changed. A length in elements where bytes were
  // meant, or a write the program forgot, breaks it without a sign: those bytes would come back
  // old after a failure, a wrong answer. So W is compared with B outside them, and what differs is
  // protected all the same. A change missed once is likely to be missed again: from then on every
  // call compares in full, as skt_checkpoint does.
  constexpr std::uint64_t kSamplePeriod = 16;
  if (config_.check_declared == CheckDeclared::off) return;
  const bool whole =
      declared_untrusted_ || config_.check_declared == CheckDeclared::all || declared_checks_ == 0;
  const std::uint64_t period = whole ? 1 : kSamplePeriod;
  const std::uint64_t phase = whole ? 0 : declared_checks_ % kSamplePeriod;
  ++declared_checks_;
  const double start = now_seconds();
  const auto actual = store_.layout.differing_blocks(
      store_.geometry, store_.workspace, store_.copy_of(next), static_settled_, period, phase);
  last_scan_seconds_ = now_seconds() - start;
  const auto missed = store_.layout.undeclared(store_.geometry, store_.workspace, actual, declared);
  if (!missed) return;
  for (std::size_t j = 0; j < declared.size(); ++j)
    declared[j] |= actual[j];
  if (!declared_untrusted_) {
    log_->warn(
        "skt_checkpoint_dirty: this rank changed bytes outside the ranges it declared ({} first; "
        "{} bytes in all, counted in whole blocks): they are protected all the same, and from "
        "now on every skt_checkpoint_dirty of this rank compares its whole "
        "workspace, as skt_checkpoint does. Declare every byte changed since the last "
        "checkpoint (an skt_range's offset and length are in bytes), or call skt_checkpoint",
        missed->first, missed->bytes);
  }
  declared_untrusted_ = true;
}

void Session::renew_removed_segments() {
  // An ephemeral job's segments are marked for removal from the start (the same on every rank,
  // which the settings check made sure of): no relaunch looks for them.
  if (ephemeral_job_) return;
  std::vector<std::string> renewed;
  effects_->agree([&] {
    if (arena_->renew_if_removed()) renewed.emplace_back("workspace");
    if (checkpoint_.removed_from_outside()) {
      checkpoint_.renew(config_.huge_pages);
      renewed.emplace_back("checkpoint");
    }
  });
  if (renewed.empty()) return;
  log_->warn(
      "this rank's {} segment{} of job '{}' on node {} had been removed from outside while the "
      "job ran (ipcrm, skt-shm clean --force, a cleanup script) and would have gone with this "
      "process, and with {} the checkpoint: renewed, with the same contents",
      fmt::join(renewed, " and "), renewed.size() == 1 ? "" : "s", config_.job, config_.node,
      renewed.size() == 1 ? "it" : "them");
}

bool Session::drain_due() {
  if (config_.drain_dir.empty() || ephemeral_job_) return false;
  if (config_.drain_every_seconds <= 0) {
    return epoch_ % static_cast<std::uint64_t>(config_.drain_every_commits) == 0;
  }
  // Rank 0's clock decides for everyone.
  int due = 0;
  if (rank_ == 0) {
    due = last_drain_start_ < 0 || now_seconds() - last_drain_start_ >= config_.drain_every_seconds
              ? 1
              : 0;
  }
  due = effects_->broadcast_value(due);
  return due != 0;
}

void Session::start_drain() {
  DrainFileHeader h;
  h.job = config_.job;
  h.run = run_id_;
  h.epoch = epoch_;
  h.rank = rank_;
  h.nranks = nranks_;
  h.groups = static_cast<int>(info_.groups);
  h.group = static_cast<int>(info_.group);
  h.member = static_cast<int>(info_.member);
  for (std::uint32_t i = 0; i < info_.group_size; ++i) {
    h.members.push_back(info_.members[i]);
    h.member_chunks.push_back(info_.member_chunks[i]);
  }
  h.scheme = static_cast<std::uint32_t>(config_.scheme);
  h.parity = store_.geometry.parity;
  h.chunk_bytes = config_.chunk_bytes;
  h.layout_hash = declared_layout_hash_;
  h.command = info_.command;
  h.stage_bytes = store_.layout.stage_bytes;
  h.regions_offset = store_.layout.copy_regions_offset();
  h.regions_bytes = store_.layout.regions_bytes;
  h.copy_bytes = store_.layout.copy_bytes();
  h.with_checksum = config_.drain_checksum;
  h.checksum_bytes = config_.drain_checksum ? store_.geometry.parity_bytes() : 0;
  const std::byte* copy =
      checkpoint_.data() + store_.areas.copy_offset(store_.areas.copy_of_epoch(epoch_));
  // With B alone, rank 0 completes the epoch (its manifest) once every rank's file is there; with
  // C too, no rank may see the others' files, and the groups decide at restart.
  drain_.start(drain_epoch_dir(config_.drain_dir, config_.job, epoch_), h, copy,
               store_.checksum_of(epoch_), fault_->midway(FaultStep::drain, epoch_),
               rank_ == 0 && !config_.drain_checksum);
  draining_ = true;
  last_drain_start_ = now_seconds();
}

void Session::settle_drain() {
  if (!draining_) return;  // the same on every rank: drains start and settle collectively
  draining_ = false;
  const double waiting = now_seconds();
  const DrainWriter::Outcome written = drain_.wait_file();
  int first_failed = written.digest ? nranks_ : rank_;
  first_failed = effects_->all_min(first_failed);
  int failures = written.digest ? 0 : 1;
  failures = effects_->all_sum(failures);
  double slowest = written.seconds;
  slowest = effects_->all_max(slowest);
  const auto epoch_dir = drain_epoch_dir(config_.drain_dir, config_.job, written.epoch);
  if (failures > 0) {
    drain_.abandon();  // rank 0 waits no longer for files that will not come
    // Reported once per launch, by the first rank that failed: the in-memory level is unaffected.
    if (rank_ == first_failed && !drain_failure_reported_) {
      log_->warn(
          "the drain of epoch {} to {} failed on {} rank(s); on this one: {}. Checkpoints in "
          "memory "
          "go on as before; later drain failures are not reported again",
          written.epoch, config_.drain_dir, failures, written.error);
    }
    drain_failure_reported_ = true;
    if (rank_ == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(epoch_dir, ignored);
    }
    return;
  }
  // Every rank's file is written: rank 0's thread completes the epoch, if it has not yet; with the
  // checksums drained, the epoch is complete now, and each rank removes its older files.
  const DrainWriter::Outcome out = drain_.wait();
  if (config_.drain_checksum) remove_rank_files(config_.drain_dir, config_.job, rank_, out.epoch);
  if (rank_ != 0) return;
  if (!out.manifest_error.empty()) {
    if (!drain_failure_reported_) {
      log_->warn("epoch {} was drained but its manifest could not be written: {}", out.epoch,
                 out.manifest_error);
    }
    drain_failure_reported_ = true;
    return;
  }
  log_->job(
      "epoch {} drained to {}: {:.1f} MB per rank in {:.3f} s ({:.0f} MB/s); {:.3f} s waited "
      "for at this checkpoint",
      out.epoch, epoch_dir.string(), out.bytes / 1e6, slowest,
      slowest > 0 ? out.bytes / 1e6 / slowest : 0.0, now_seconds() - waiting);
}

bool Session::need_checkpoint() {
  enter(CollectiveCall::need_checkpoint);
  require_recovered("skt_need_checkpoint");
  if (config_.mtbf_seconds <= 0) {
    throw Error(SKT_ERR_CONFIG,
                "skt_need_checkpoint needs the mean time between failures: set "
                "SKT_MTBF (e.g. 6h) or mtbf in the configuration file");
  }
  // Rank 0's clock decides for everyone; before this launch's first checkpoint, the cost the
  // survivors recorded before a relaunch stands in for it (a recovery's cost is no measure of a
  // checkpoint's), and with neither, checkpointing now measures it.
  int need = 0;
  if (rank_ == 0) {
    const double cost =
        last_checkpoint_seconds_ > 0 ? last_checkpoint_seconds_ : recorded_checkpoint_seconds_;
    need =
        cost <= 0 || now_seconds() - last_commit_time_ >= daly_interval(cost, config_.mtbf_seconds)
            ? 1
            : 0;
  }
  need = effects_->broadcast_value(need);
  return need != 0;
}

void Session::finalize(bool discard) {
  // Segments of an ephemeral job can never be found again, so they go in any case; only a
  // requested discard waits for every rank, since a rank that has not finished may still need them.
  if (discard) {
    enter(CollectiveCall::finalize);
    drain_.abandon();  // the job is complete: its drained epochs are of no more use
    effects_->barrier();
    // Every rank is done. Each records it before any removes a segment, so that a run ended in
    // the middle of the removals (its launcher killed, a rank dying on its way out) leaves
    // segments that say the job completed, not ranks that look lost: a relaunch starts afresh
    // rather than refusing a checkpoint it believes damaged.
    if (checkpoint_ && protocol_) {
      ControlState state = protocol_->state();
      state.finished = static_cast<std::int64_t>(epoch_);
      write_control(checkpoint_.base(), state);
    }
    effects_->barrier();
    fault_->at(FaultStep::finalize, epoch_);
  } else if (draining_) {
    // The drain in flight is finished: a program that stops to resume elsewhere (the end of an
    // allocation) finds its last epoch in storage. There is no agreement here (another rank may
    // have failed), so rank 0 waits a bounded time for the other ranks' files: long enough for
    // ranks that write at its own pace, and the epoch stays incomplete otherwise.
    const DrainWriter::Outcome own = drain_.wait_file();
    drain_.wait_at_most(10 + 4 * own.seconds);
    draining_ = false;
  }
  if (discard || ephemeral_job_) {
    if (arena_) arena_->remove();
    if (checkpoint_) checkpoint_.remove();
    remove_drained_epochs();
    log_->job("removed the segments of job '{}'", config_.job);
  } else if (!recovered_) {
    // A launch that never got through recovery (refused settings, a mismatch) committed nothing:
    // what it created holds nothing, and left behind it would make the next first launch of the
    // job refuse to start. What it found stays as it was.
    remove_created_segments();
  }
}

skt_stats Session::stats() const {
  skt_stats s{};
  s.epoch = epoch_;
  s.group = static_cast<int>(info_.group);
  s.group_size = static_cast<int>(info_.group_size);
  s.member = static_cast<int>(info_.member);
  s.workspace_bytes = store_.layout.workspace_bytes();
  s.checkpoint_bytes = static_cast<std::size_t>(copies()) * store_.layout.copy_bytes();
  s.checksum_bytes = store_.geometry.parity_bytes();
  if (arena_) s.shm_bytes += arena_->segment_bytes();
  if (checkpoint_) s.shm_bytes += checkpoint_.header().segment_bytes;
  s.last_checkpoint_seconds = last_checkpoint_seconds_;
  s.last_recover_seconds = last_recover_seconds_;
  if (protocol_) {
    s.last_sent_bytes = protocol_->stats().sent_bytes;
    s.last_flushed_bytes = protocol_->stats().flushed_bytes;
    s.last_verify_seconds = last_verify_seconds_;
  }
  s.last_changed_bytes = last_changed_bytes_;
  s.last_scan_seconds = last_scan_seconds_;
  return s;
}

void Session::stage_private_objects(std::byte* at, const Progress& progress) const {
  std::uint64_t done = 0;
  for (const auto& p : privates_) {
    if (config_.scheme == enc::Scheme::sum) {
      auto* out = reinterpret_cast<double*>(at);
      for (std::size_t i = 0; i < p.bytes; ++i)
        out[i] = static_cast<unsigned char>(p.ptr[i]);
    } else {
      std::memcpy(at, p.ptr, p.bytes);
    }
    at += stage_entry_bytes(p.bytes);
    if (progress) progress(++done, privates_.size() + 1);
  }
}

void Session::restore_private_objects(const std::byte* at) const {
  for (const auto& p : privates_) {
    if (config_.scheme == enc::Scheme::sum) {
      const auto* in = reinterpret_cast<const double*>(at);
      for (std::size_t i = 0; i < p.bytes; ++i) {
        p.ptr[i] = static_cast<std::byte>(static_cast<unsigned char>(std::lround(in[i])));
      }
    } else {
      std::memcpy(p.ptr, at, p.bytes);
    }
    at += stage_entry_bytes(p.bytes);
  }
}

}  // namespace skt
