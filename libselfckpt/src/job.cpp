#include "libselfckpt/src/job.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>

#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/src/logind.hpp"

namespace skt {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool first_time_in_process(const std::string& message) {
  static std::mutex lock;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> guard(lock);
  return said.insert(message).second;
}

namespace {

constexpr std::size_t kNodeBytes = 64;

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

// Later runs draw larger ids: the clock in the high bits, chance in the low ones. A run that
// starts the job afresh makes its id the job's lineage, newer than that of any earlier start.
std::uint64_t draw_run_id() {
  std::random_device entropy;
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return (static_cast<std::uint64_t>(now.count()) & ~std::uint64_t{0xffff}) | (entropy() & 0xffffu);
}

}  // namespace

void Job::ReleaseJob::operator()(const std::string* job) const {
  const std::lock_guard lock(g_open_jobs_mutex);
  g_open_jobs.erase(*job);
}

Job::Job(MPI_Comm comm, const std::string& config_path) {
  if (!mpi_initialized()) {
    throw Error(SKT_ERR_STATE, "skt_init: MPI is not initialised; call MPI_Init first");
  }
  die_with_launcher();
  comm_ = Comm::duplicate(comm);
  rank_ = comm_.rank();
  nranks_ = comm_.size();
  mpi_effects_ = std::make_unique<MpiEffects>(comm_.get(), nodes_, config_.node, nullptr);
  effects_ = mpi_effects_.get();
  effects_->agree([&] {
    config_ = load_config(config_path, skt_environment());
    if (config_.node.empty()) config_.node = default_node_name();
  });
  agree_on_tag();
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
  mpi_effects_->set_fault(fault_.get());
  run_id_ = effects_->broadcast_value(rank_ == 0 ? draw_run_id() : std::uint64_t{0});
  const std::string shared = agree_on_settings();
  config_.drain_dir = expand_node(config_.drain_dir, config_.node);

  std::array<char, kNodeBytes> mine{};
  std::memcpy(mine.data(), config_.node.data(), std::min(config_.node.size(), kNodeBytes - 1));
  for (const auto& node : effects_->gather_values(mine))
    nodes_.emplace_back(node.data());

  if (ephemeral_) {
    log_->job(
        "no job tag (SKT_JOB, or a Slurm job id) is set: using '{}'; a relaunch will not "
        "find this run's checkpoints",
        config_.job);
  } else {
    warn_of_logind_removal();
  }
  log_->job("initialised job '{}' on {} ranks: {}", config_.job, nranks_, shared);
}

Job::Job(Effects& effects, Config config, int rank, int nranks, std::vector<std::string> nodes)
    : rank_(rank),
      nranks_(nranks),
      config_(std::move(config)),
      log_(std::make_unique<Logger>(config_.log_level, rank_, config_.node)),
      fault_(std::make_unique<FaultInjector>(config_.fault, rank_, config_.restart.value_or(0),
                                             log_.get())),
      nodes_(std::move(nodes)),
      effects_(&effects) {}

void Job::agree_on_tag() {
  if (config_.job.empty()) {
    const std::string slurm_job = getenv_string("SLURM_JOB_ID");
    if (!slurm_job.empty() && valid_name("slurm-" + slurm_job)) config_.job = "slurm-" + slurm_job;
  }
  // No stable name: segments cannot be found by a relaunch, so they are always removed. Every rank
  // takes part in the broadcast of rank 0's stand-in, named or not: ranks that disagree on having
  // a name (SKT_JOB given to some only) then meet the settings check, not a collective the others
  // never enter.
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
    ephemeral_ = true;
  }
  effects_->agree([&] {
    const auto job = context_job_tag(config_.job, ephemeral_ ? 0 : leader);
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
}

std::string Job::agree_on_settings() {
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
  return shared;
}

void Job::warn_of_logind_removal() const {
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

SegmentIdentity Job::identity_of(int rank, SegmentKind kind) const {
  return SegmentIdentity{
      static_cast<std::uint32_t>(geteuid()), config_.job, config_.node, rank, kind,
      std::string(kind_name(kind))};
}

void Job::refuse_stale(SegmentKind kind) const {
  if (config_.restart && *config_.restart == 0) {
    throw Error(SKT_ERR_STALE,
                fmt::format("the {} segment of job '{}' exists from an earlier run, but "
                            "SKT_RESTART=0 says this is a first launch; remove the old segments "
                            "with 'skt-shm clean --job {}' or use a new job tag",
                            kind_name(kind), config_.job, config_.job));
  }
}

std::uint64_t Job::command_print() {
  return this_command().print;
}

bool Job::another_command(std::uint64_t recorded) const {
  return !config_.restart && recorded != 0 && recorded != command_print();
}

void Job::refuse_another_command(std::uint64_t recorded, const std::string& removal) const {
  if (another_command(recorded)) throw another_command_error(removal);
}

Error Job::another_command_error(const std::string& removal) const {
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

}  // namespace skt
