#include "libselfckpt/src/session.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "libselfckpt/src/policy.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

// An error every rank raised together, through Session::agree.
class AgreedError : public Error {
 public:
  using Error::Error;
};

constexpr std::size_t kNodeBytes = 64;

std::string getenv_string(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// A node name from the host name: cut at the first dot, characters outside the name set replaced.
std::string host_node_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "localhost";
  std::string name(host.data());
  name = name.substr(0, name.find('.'));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  }
  if (name.size() > 63) name.resize(63);
  return valid_name(name) ? name : "localhost";
}

std::string describe_source(RecoverySource source) {
  switch (source) {
    case RecoverySource::fresh:
      return "fresh start";
    case RecoverySource::committed:
      return "committed copy and checksum (B, C)";
    case RecoverySource::workspace:
      return "workspace and its checksum (W, D), finishing the interrupted flush";
    case RecoverySource::redo:
      return "workspaces, finishing the interrupted update of the single copy";
    case RecoverySource::unrecoverable:
      break;
  }
  return "unrecoverable";
}

// What every rank tells every other rank before recovery decides anything.
struct Record {
  std::int64_t valid, committed, encoded, agreed, resumed, groups;
};

}  // namespace

struct Session::Finding {
  bool valid = false;
  ControlState state;
  CheckpointInfo info;
};

std::size_t Session::stage_entry_bytes(std::size_t bytes) const {
  // Under sum, each byte is staged as a double holding its value, so that rebuilding the sum of
  // such rows is exact.
  const std::size_t staged = config_.scheme == enc::Scheme::sum ? bytes * sizeof(double) : bytes;
  return (staged + 63) / 64 * 64;
}

std::vector<RegionSpec> Session::stream_regions() const {
  std::vector<RegionSpec> specs;
  if (!privates_.empty()) {
    std::string names;
    std::size_t bytes = 0;
    for (const auto& p : privates_) {
      names += fmt::format("{}:{};", p.name, p.bytes);
      bytes += stage_entry_bytes(p.bytes);
    }
    specs.push_back({"private(" + names + ")", bytes});
  }
  for (const auto& r : regions_)
    specs.push_back({r.name, r.bytes});
  return specs;
}

Session::Session(MPI_Comm comm, const std::string& config_path) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    throw Error(SKT_ERR_STATE, "skt_init: MPI is not initialised; call MPI_Init first");
  }
  comm_ = Comm::duplicate(comm);
  rank_ = comm_.rank();
  nranks_ = comm_.size();
  agree([&] {
    config_ = load_config(config_path, skt_environment());
    if (config_.node.empty()) {
      const std::string slurm = getenv_string("SLURMD_NODENAME");
      config_.node = valid_name(slurm) ? slurm : host_node_name();
    }
  });
  if (config_.job.empty()) {
    const std::string slurm_job = getenv_string("SLURM_JOB_ID");
    if (!slurm_job.empty() && valid_name("slurm-" + slurm_job)) {
      config_.job = "slurm-" + slurm_job;
    } else {
      // No stable name: segments cannot be found by a relaunch, so they are always removed.
      std::array<char, kNodeBytes> tag{};
      if (rank_ == 0) {
        const auto text = fmt::format("tmp-{:x}-{:x}", getpid(),
                                      static_cast<unsigned long long>(MPI_Wtime() * 1e6));
        std::memcpy(tag.data(), text.data(), std::min(text.size(), tag.size() - 1));
      }
      SKT_MPI(MPI_Bcast(tag.data(), static_cast<int>(tag.size()), MPI_CHAR, 0, comm_.get()));
      config_.job = tag.data();
      ephemeral_job_ = true;
    }
  }
  log_ = std::make_unique<Logger>(config_.log_level, rank_, config_.node);
  fault_ = std::make_unique<FaultInjector>(config_.fault, rank_, config_.restart.value_or(0),
                                           log_.get());

  // Settings every rank must share, compared with rank 0's.
  std::string shared = config_.shared_settings();
  int length = static_cast<int>(shared.size());
  SKT_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, comm_.get()));
  std::string reference(static_cast<std::size_t>(length), '\0');
  if (rank_ == 0) reference = shared;
  SKT_MPI(MPI_Bcast(reference.data(), length, MPI_CHAR, 0, comm_.get()));
  agree([&] {
    if (shared != reference) {
      throw Error(SKT_ERR_CONFIG,
                  fmt::format("configuration differs between ranks: this rank has [{}], rank 0 "
                              "has [{}]; every rank must use the same settings",
                              shared, reference));
    }
  });

  std::array<char, kNodeBytes> mine{};
  std::memcpy(mine.data(), config_.node.data(), std::min(config_.node.size(), kNodeBytes - 1));
  std::vector<char> all(kNodeBytes * static_cast<std::size_t>(nranks_));
  SKT_MPI(MPI_Allgather(mine.data(), kNodeBytes, MPI_CHAR, all.data(), kNodeBytes, MPI_CHAR,
                        comm_.get()));
  for (int r = 0; r < nranks_; ++r)
    nodes_.emplace_back(&all[kNodeBytes * static_cast<std::size_t>(r)]);

  if (ephemeral_job_) {
    log_->job(
        "no job tag (SKT_JOB, or a Slurm job id) is set: using '{}'; a relaunch will not "
        "find this run's checkpoints",
        config_.job);
  }
  log_->job("initialised job '{}' on {} ranks: {}", config_.job, nranks_, shared);
}

Session::~Session() = default;

void Session::agree(const std::function<void()>& step) {
  int code = SKT_OK;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const MpiError&) {
    throw;  // the communicator itself is failing: agreeing over it cannot work
  } catch (const std::bad_alloc&) {
    code = SKT_ERR_NOMEM;
    message = "out of memory";
  } catch (const std::exception& e) {
    code = SKT_ERR_INTERNAL;
    message = e.what();
  }
  int first = code == SKT_OK ? nranks_ : rank_;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm_.get()));
  if (first == nranks_) return;
  int length = static_cast<int>(message.size());
  SKT_MPI(MPI_Bcast(&code, 1, MPI_INT, first, comm_.get()));
  SKT_MPI(MPI_Bcast(&length, 1, MPI_INT, first, comm_.get()));
  message.resize(static_cast<std::size_t>(length));
  SKT_MPI(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm_.get()));
  // Before the ranks have exchanged their node names, only a rank's own is known, if that.
  std::string node;
  if (first < static_cast<int>(nodes_.size())) {
    node = nodes_[static_cast<std::size_t>(first)];
  } else if (first == rank_) {
    node = config_.node;
  }
  throw AgreedError(code, node.empty()
                              ? fmt::format("rank {}: {}", first, message)
                              : fmt::format("rank {} (node {}): {}", first, node, message));
}

void Session::require_recovered(const char* call) const {
  if (!recovered_) {
    throw Error(SKT_ERR_STATE,
                fmt::format("{} before skt_recover: declare the regions, then call skt_recover "
                            "once, then checkpoint",
                            call));
  }
}

SegmentIdentity Session::identity(SegmentKind kind, const std::string& name) const {
  return SegmentIdentity{
      static_cast<std::uint32_t>(geteuid()), config_.job, config_.node, rank_, kind, name};
}

void Session::check_not_stale(const SegmentIdentity& id) const {
  if (config_.restart && *config_.restart == 0) {
    throw Error(SKT_ERR_STALE,
                fmt::format("a {} segment '{}' of job '{}' exists from an earlier run, but "
                            "SKT_RESTART=0 says this is a first launch; remove the old segments "
                            "with 'skt-shm clean --job {}' or use a new job tag",
                            kind_name(id.kind), id.name, id.job, id.job));
  }
}

Segment Session::open_region(const std::string& name, std::size_t bytes, SegmentKind kind,
                             bool* found) {
  const SegmentIdentity id = identity(kind, name);
  *found = false;
  if (!ephemeral_job_) {
    FindResult result = find_segment(id);
    for (const auto& why : result.skipped)
      log_->debug("left a segment alone: {}", why);
    if (result.segment) {
      check_not_stale(id);
      const SegmentHeader& h = result.segment->header();
      check_job_shape(h);
      if (h.data_bytes != bytes) {
        throw Error(SKT_ERR_MISMATCH,
                    fmt::format("{} '{}' has {} bytes in the checkpoint of job '{}' but {} now; a "
                                "relaunch must declare the same regions with the same sizes",
                                kind == SegmentKind::stage ? "the private regions" : "region",
                                kind == SegmentKind::stage ? std::string("(all)") : name,
                                h.data_bytes, config_.job, bytes));
      }
      *found = true;
      return std::move(*result.segment);
    }
  }
  SegmentHeader header;
  header.identity = id;
  header.nranks = nranks_;
  header.data_bytes = bytes;
  return Segment::create(header, config_.huge_pages);
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

void Session::check_job_shape(const SegmentHeader& header) const {
  if (header.nranks != nranks_) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the checkpoint of job '{}' was written by {} ranks, this run has {}; "
                            "relaunch with the same number of ranks or remove the job's segments "
                            "(skt-shm clean --job {})",
                            config_.job, header.nranks, nranks_, config_.job));
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
  if (std::any_of(regions_.begin(), regions_.end(),
                  [&](const WorkRegion& r) { return r.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("region '{}' is already allocated", name));
  }
  WorkRegion region;
  region.name = name;
  region.bytes = bytes;
  region.segment = open_region(name, bytes, SegmentKind::region, &region.found);
  log_->debug("region '{}' of {} bytes {}", name, bytes,
              region.found ? "found from before" : "created");
  regions_.push_back(std::move(region));
  return regions_.back().segment.data();
}

void Session::protect(const std::string& name, void* ptr, std::size_t bytes) {
  check_declaration("skt_protect", name);
  if (ptr == nullptr || bytes == 0) {
    throw Error(SKT_ERR_ARG, fmt::format("private region '{}' needs a pointer and a size", name));
  }
  if (std::any_of(privates_.begin(), privates_.end(),
                  [&](const PrivateRegion& r) { return r.name == name; })) {
    throw Error(SKT_ERR_ARG, fmt::format("private region '{}' is already registered", name));
  }
  privates_.push_back({name, static_cast<std::byte*>(ptr), bytes});
}

void* Session::allocate_next(std::size_t bytes) {
  return alloc(fmt::format("malloc.{}", next_malloc_++), bytes);
}

void* Session::reallocate(void* ptr, std::size_t bytes) {
  const auto old = std::find_if(regions_.begin(), regions_.end(), [&](const WorkRegion& r) {
    return !r.released && r.segment.data() == ptr;
  });
  if (old == regions_.end()) {
    throw Error(SKT_ERR_ARG, "skt_realloc: the pointer is not a region of this context");
  }
  const std::string old_name = old->name;
  const std::size_t old_bytes = old->bytes;
  void* fresh = allocate_next(bytes);  // may move regions_: look the old one up again
  const auto again = std::find_if(regions_.begin(), regions_.end(),
                                  [&](const WorkRegion& r) { return r.name == old_name; });
  // On a relaunch the new region is found from before, holding data skt_recover needs: leave it.
  if (!regions_.back().found) std::memcpy(fresh, again->segment.data(), std::min(old_bytes, bytes));
  release(again->segment.data());
  return fresh;
}

bool Session::release(void* ptr) {
  const auto it = std::find_if(regions_.begin(), regions_.end(), [&](const WorkRegion& r) {
    return !r.released && r.segment.data() == ptr;
  });
  if (it == regions_.end()) return false;
  if (recovered_) {
    it->released = true;  // still part of the workspace layout until finalize
  } else {
    it->segment.remove();
    regions_.erase(it);
  }
  return true;
}

Session::Finding Session::inspect_local_state() {
  std::sort(regions_.begin(), regions_.end(),
            [](const WorkRegion& a, const WorkRegion& b) { return a.name < b.name; });
  std::sort(privates_.begin(), privates_.end(),
            [](const PrivateRegion& a, const PrivateRegion& b) { return a.name < b.name; });
  const std::vector<RegionSpec> specs = stream_regions();
  stream_starts_.clear();
  if (!privates_.empty()) {
    stage_ = open_region("stage", specs.front().bytes, SegmentKind::stage, &stage_found_);
    stream_starts_.push_back(stage_.data());
  }
  for (const auto& r : regions_)
    stream_starts_.push_back(r.segment.data());
  layout_ = WorkspaceLayout::plan(specs, config_.chunk_bytes);

  Finding f;
  if (ephemeral_job_) return f;
  const SegmentIdentity id = identity(SegmentKind::checkpoint, "checkpoint");
  FindResult result = find_segment(id);
  for (const auto& why : result.skipped)
    log_->debug("left a segment alone: {}", why);
  if (!result.segment) return f;
  check_not_stale(id);
  checkpoint_ = std::move(*result.segment);
  const SegmentHeader& header = checkpoint_.header();
  check_job_shape(header);
  CheckpointInfo info;
  if (!decode_checkpoint_info(checkpoint_.base(), &info)) {
    log_->warn("this rank's checkpoint description is corrupted (CRC mismatch): treated as lost");
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
  if (info.layout_hash != layout_.hash || info.workspace_bytes != layout_.workspace_bytes) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the regions declared now ({} bytes in {} regions) differ from those "
                            "of the checkpoint ({} bytes); a relaunch must declare the same "
                            "regions, with the same names and sizes, and protect the same private "
                            "regions",
                            layout_.workspace_bytes, layout_.regions.size(), info.workspace_bytes));
  }
  const std::size_t expected =
      checkpoint_areas(layout_.copy_bytes, recorded_geometry(info).parity_bytes(), copies(),
                       config_.mode == Mode::self)
          .data_bytes(region_table_bytes(layout_.regions));
  if (header.data_bytes != expected) {
    log_->warn("this rank's checkpoint segment has an unexpected size: treated as lost");
    return f;
  }
  const auto state = read_control(checkpoint_.base());
  if (!state) {
    log_->warn("this rank's control block is unreadable: treated as lost");
    return f;
  }
  const bool workspace_intact =
      std::all_of(regions_.begin(), regions_.end(), [](const WorkRegion& r) { return r.found; }) &&
      (privates_.empty() || stage_found_);
  if (!workspace_intact) {
    log_->warn(
        "the checkpoint segment survived but some workspace regions did not: this rank is "
        "treated as lost");
    return f;
  }
  f.valid = true;
  f.state = *state;
  f.info = info;
  return f;
}

GroupPlan Session::recorded_plan(const Finding& mine, int groups) {
  // Every surviving rank vouches for its group's member list. One MAX reduction carries both the
  // largest and (negated) the smallest vote for each rank, so disagreements show.
  const auto n = static_cast<std::size_t>(nranks_);
  std::vector<long long> votes(4 * n, LLONG_MIN);
  if (mine.valid) {
    for (std::uint32_t i = 0; i < mine.info.group_size; ++i) {
      const auto r = static_cast<std::size_t>(mine.info.members[i]);
      if (r >= n) throw Error(SKT_ERR_INTERNAL, "checkpoint names a rank beyond the job");
      votes[r] = mine.info.group + 1;
      votes[n + r] = i + 1;
      votes[2 * n + r] = -static_cast<long long>(mine.info.group + 1);
      votes[3 * n + r] = -static_cast<long long>(i + 1);
    }
  }
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, votes.data(), static_cast<int>(votes.size()), MPI_LONG_LONG,
                        MPI_MAX, comm_.get()));
  GroupPlan plan;
  plan.group_of.assign(n, -1);
  plan.index_of.assign(n, -1);
  std::vector<int> orphans;
  std::vector<bool> group_seen(static_cast<std::size_t>(groups), false);
  for (std::size_t r = 0; r < n; ++r) {
    if (votes[r] == LLONG_MIN) {
      orphans.push_back(static_cast<int>(r));
      continue;
    }
    if (votes[r] != -votes[2 * n + r] || votes[n + r] != -votes[3 * n + r] || votes[r] > groups) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the surviving checkpoints disagree about the group of rank {}; "
                              "remove the job's segments (skt-shm clean --job {})",
                              r, config_.job));
    }
    plan.group_of[r] = static_cast<int>(votes[r] - 1);
    plan.index_of[r] = static_cast<int>(votes[n + r] - 1);
    group_seen[static_cast<std::size_t>(votes[r] - 1)] = true;
  }
  if (!orphans.empty()) {
    // Nobody is left to say which group each orphan belonged to, only which groups vanished.
    std::string missing, list;
    for (int g = 0; g < groups; ++g) {
      if (!group_seen[static_cast<std::size_t>(g)]) {
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", g);
      }
    }
    for (const int r : orphans) {
      list += fmt::format("{}rank {} on node {}", list.empty() ? "" : ", ", r,
                          nodes_[static_cast<std::size_t>(r)]);
    }
    throw Error(SKT_ERR_UNRECOVERABLE,
                fmt::format("group {} lost all of its members ({}), so their data cannot be "
                            "rebuilt; start the job again from the beginning (skt-shm clean "
                            "--job {})",
                            missing, list, config_.job));
  }
  plan.members.assign(static_cast<std::size_t>(groups), {});
  for (std::size_t r = 0; r < n; ++r) {
    auto& list = plan.members[static_cast<std::size_t>(plan.group_of[r])];
    const auto index = static_cast<std::size_t>(plan.index_of[r]);
    if (list.size() <= index) list.resize(index + 1, -1);
    list[index] = static_cast<int>(r);
  }
  for (std::size_t g = 0; g < plan.members.size(); ++g) {
    const auto& list = plan.members[g];
    if (list.empty() || std::find(list.begin(), list.end(), -1) != list.end()) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the surviving checkpoints describe group {} incompletely; remove "
                              "the job's segments (skt-shm clean --job {})",
                              g, config_.job));
    }
  }
  return plan;
}

RecoveryDecision Session::decide(const std::vector<RankFinding>& findings,
                                 const GroupPlan& plan) const {
  const int tolerance = config_.group_size > 1 ? enc::tolerance(config_.scheme, config_.parity) : 0;
  if (config_.mode == Mode::self) return decide_recovery(findings, plan, tolerance, nodes_);
  return decide_recovery_copies(findings, plan, tolerance, nodes_, copies());
}

void Session::join_group(const GroupPlan& plan, const RecoveryDecision& decision,
                         const Finding& mine) {
  const auto me = static_cast<std::size_t>(rank_);
  const int group = plan.group_of[me];
  const int member = plan.index_of[me];
  const int size = plan.size_of(group);
  const int parity = size > 1 ? config_.parity : 0;
  group_comm_ = Comm::split(comm_.get(), group, member);
  // The private regions come first, padded to a whole period of rows.
  const std::uint64_t first_period =
      privates_.empty() ? 1 : static_cast<std::uint64_t>(size - parity);
  layout_ = WorkspaceLayout::plan(stream_regions(), config_.chunk_bytes, first_period);

  std::array<std::uint64_t, 2> declared{layout_.chunks, layout_.hash};
  std::vector<std::uint64_t> table(2 * static_cast<std::size_t>(size));
  SKT_MPI(MPI_Allgather(declared.data(), 2, MPI_UINT64_T, table.data(), 2, MPI_UINT64_T,
                        group_comm_.get()));
  if (decision.source != RecoverySource::fresh) {
    // A relaunched rank must declare what its group recorded for it.
    agree([&] {
      if (!mine.valid) return;
      for (int i = 0; i < size; ++i) {
        const auto k = static_cast<std::size_t>(i);
        if (mine.info.member_chunks[k] != table[2 * k] ||
            mine.info.member_layouts[k] != table[2 * k + 1]) {
          throw Error(SKT_ERR_MISMATCH,
                      fmt::format("rank {} declared regions that differ from those its group "
                                  "recorded for it ({} chunks now, {} recorded); a relaunch must "
                                  "declare the same regions with the same sizes",
                                  plan.members[static_cast<std::size_t>(group)][k], table[2 * k],
                                  mine.info.member_chunks[k]));
        }
      }
    });
  }

  std::uint64_t longest = 0;
  for (int i = 0; i < size; ++i)
    longest = std::max(longest, table[2 * static_cast<std::size_t>(i)]);
  geometry_ = enc::StripeGeometry::plan(size, parity, config_.chunk_bytes, longest);
  codec_ = parity > 0 ? enc::make_codec(config_.scheme, size, parity) : nullptr;

  info_ = CheckpointInfo{};
  info_.scheme = static_cast<std::uint32_t>(config_.scheme);
  info_.parity = static_cast<std::uint32_t>(parity);
  info_.requested_group_size = static_cast<std::uint32_t>(config_.group_size);
  info_.groups = static_cast<std::uint32_t>(plan.groups());
  info_.group = static_cast<std::uint32_t>(group);
  info_.member = static_cast<std::uint32_t>(member);
  info_.group_size = static_cast<std::uint32_t>(size);
  info_.mode = static_cast<std::uint32_t>(config_.mode);
  info_.chunk_bytes = config_.chunk_bytes;
  info_.rows = geometry_.rows;
  info_.workspace_bytes = layout_.workspace_bytes;
  info_.layout_hash = layout_.hash;
  info_.first_period = first_period;
  info_.table_offset = areas().table_offset();
  info_.table_bytes = region_table_bytes(layout_.regions);
  for (int i = 0; i < size; ++i) {
    const auto k = static_cast<std::size_t>(i);
    info_.members[k] = plan.members[static_cast<std::size_t>(group)][k];
    info_.member_chunks[k] = table[2 * k];
    info_.member_layouts[k] = table[2 * k + 1];
  }
  if (mine.valid && decision.source != RecoverySource::fresh && mine.info.rows != info_.rows) {
    throw Error(SKT_ERR_INTERNAL, "recorded stripe rows differ from the recomputed geometry");
  }
}

CheckpointAreas Session::areas() const {
  return checkpoint_areas(layout_.copy_bytes, geometry_.parity_bytes(), copies(),
                          config_.mode == Mode::self);
}

void Session::ensure_checkpoint_segment(bool keep_existing) {
  const CheckpointAreas areas = this->areas();
  if (!keep_existing) {
    if (checkpoint_) {
      checkpoint_.remove();
      checkpoint_.detach();
    }
    SegmentHeader header;
    header.identity = identity(SegmentKind::checkpoint, "checkpoint");
    header.nranks = nranks_;
    header.data_bytes = areas.data_bytes(info_.table_bytes);
    // Every page now, D's too: a first touch costs far more than a copy (the kernel clears the
    // page, a virtual machine's host may have to back it), and it belongs to the set-up, not to
    // the first checkpoint.
    checkpoint_ = Segment::create(header, config_.huge_pages);
    checkpoint_created_ = true;
    encode_checkpoint_info(checkpoint_.base(), info_);
    encode_region_table(checkpoint_.data() + info_.table_offset, layout_.regions);
    clear_control(checkpoint_.base());
  }
  copies_.assign(static_cast<std::size_t>(copies()), Copy{});
  for (int i = 0; i < copies(); ++i) {
    Copy& copy = copies_[static_cast<std::size_t>(i)];
    copy.data = checkpoint_.data() + areas.copy_offset(i);
    copy.chunks = layout_.copy_chunks(copy.data);
  }
  workspace_chunks_ = layout_.chunks_at(stream_starts_);
}

std::byte* Session::checksum_of(std::uint64_t epoch) const {
  return checkpoint_.data() + areas().checksum_of_epoch(epoch);
}

void Session::write_state() {
  write_control(checkpoint_.base(), state_);
}

std::uint64_t Session::copy_pieces(const std::vector<Piece>& pieces, const Progress& progress) {
  const std::uint64_t n = pieces.size();
  std::uint64_t bytes = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (pieces[i].bytes > 0) std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes);
    bytes += pieces[i].bytes;
    if (progress) progress(i + 1, n);
  }
  return bytes;
}

std::vector<Session::Piece> Session::whole_stream(const enc::ChunkList& from,
                                                  const enc::ChunkList& to) const {
  std::vector<Piece> pieces;
  pieces.reserve(from.size());
  for (std::uint64_t i = 0; i < from.size(); ++i) {
    pieces.push_back({to.data[i], from.data[i], from.bytes[i]});
  }
  return pieces;
}

std::vector<Session::Piece> Session::dirty_pieces(const std::vector<DirtyRange>& dirty) const {
  // Per stream region, the union of its dirty byte ranges; the private regions always.
  const std::size_t regions = layout_.regions.size();
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> spans(regions);
  const std::size_t first_region = privates_.empty() ? 0 : 1;
  if (!privates_.empty()) spans[0].push_back({0, layout_.regions[0].bytes});
  for (const auto& d : dirty) {
    const auto it = std::find_if(
        layout_.regions.begin() + static_cast<std::ptrdiff_t>(first_region), layout_.regions.end(),
        [&](const RegionSpec& r) { return r.name == d.region; });
    const auto index = static_cast<std::size_t>(it - layout_.regions.begin());
    if (d.length > 0) spans[index].push_back({d.offset, d.offset + d.length});
  }
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < regions; ++i) {
    auto& list = spans[i];
    std::sort(list.begin(), list.end());
    std::size_t begin = 0, end = 0;
    bool open = false;
    auto emit = [&] {
      pieces.push_back({copies_[0].data + layout_.copy_offset[i] + begin, stream_starts_[i] + begin,
                        end - begin});
    };
    for (const auto& [b, e] : list) {
      if (open && b <= end) {
        end = std::max(end, e);
        continue;
      }
      if (open) emit();
      begin = b;
      end = e;
      open = true;
    }
    if (open) emit();
  }
  return pieces;
}

void Session::stage_private_regions(std::uint64_t epoch) {
  if (privates_.empty()) return;
  const auto midway = fault_->midway(FaultStep::stage, epoch);
  std::byte* at = stage_.data();
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
    if (midway) midway(++done, privates_.size() + 1);
  }
}

void Session::restore_private_regions() {
  const std::byte* at = stage_ ? stage_.data() : nullptr;
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

std::uint64_t Session::encode(const enc::ChunkList& source, std::byte* parity, std::uint64_t epoch,
                              const enc::Incremental* incremental) {
  if (!codec_) {
    fault_->at(FaultStep::encode, epoch);
    return 0;
  }
  return enc::encode_group(
      group_comm_.get(), geometry_, *codec_, source, parity,
      {config_.pipeline_depth, fault_->midway(FaultStep::encode, epoch), &scratch_}, incremental);
}

std::vector<int> Session::lost_members(const GroupPlan& plan,
                                       const RecoveryDecision& decision) const {
  const int group = plan.group_of[static_cast<std::size_t>(rank_)];
  std::vector<int> lost;
  for (const int r : decision.rebuild) {
    if (plan.group_of[static_cast<std::size_t>(r)] == group) {
      lost.push_back(plan.index_of[static_cast<std::size_t>(r)]);
    }
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

void Session::settle_self(const GroupPlan& plan, const RecoveryDecision& decision) {
  const std::int64_t target = decision.epoch;
  const auto epoch = static_cast<std::uint64_t>(target);
  const bool from_copy = decision.source == RecoverySource::committed;
  const bool lost = std::binary_search(decision.rebuild.begin(), decision.rebuild.end(), rank_);
  const std::vector<int> lost_in_group = lost_members(plan, decision);
  const Copy& copy = copies_[0];
  std::vector<std::uint64_t> member_chunks(info_.member_chunks,
                                           info_.member_chunks + info_.group_size);

  // Record the decision before anyone overwrites anything: a failure from here on must lead the
  // next recovery to the same epoch from the same source.
  if (!from_copy && !lost) {
    state_.agreed = target;
    write_state();
  }
  SKT_MPI(MPI_Barrier(comm_.get()));
  const double settle_start = MPI_Wtime();

  const bool clean = state_.committed == target && state_.encoded == target &&
                     state_.agreed == target && state_.resumed < target;
  const bool copies = !lost && (from_copy ? !clean : state_.committed != target);
  const auto midway = fault_->midway(FaultStep::recover, epoch);
  if (!copies && lost_in_group.empty()) fault_->at(FaultStep::recover, epoch);

  if (!lost_in_group.empty()) {
    enc::PipelineOptions options{config_.pipeline_depth, copies ? nullptr : midway};
    // B and C, or W and D: the checksum of the target epoch either way.
    enc::rebuild_group(group_comm_.get(), geometry_, *codec_, member_chunks, lost_in_group,
                       from_copy ? copy.chunks : workspace_chunks_, checksum_of(epoch), options);
    if (lost) {
      state_ =
          from_copy ? ControlState{target, -1, target, -1} : ControlState{-1, target, target, -1};
      write_state();
      log_->info("rebuilt this rank's {} from its group", from_copy ? "B and C" : "W and D");
    }
  }

  const double rebuilt = MPI_Wtime();
  bool pending_valid = true;
  if (from_copy) {
    if (lost || !clean) {
      // Roll W back to the committed epoch. The other checksum area is left as it is: the next
      // checkpoint encodes in full (see recover), so it is never read before being rewritten.
      state_.encoded = -1;
      write_state();
      copy_pieces(whole_stream(copy.chunks, workspace_chunks_), lost ? nullptr : midway);
      pending_valid = false;
    }
  } else if (state_.committed != target) {
    // Finish the flush that the failure interrupted; D, already in place, becomes C.
    copy_pieces(whole_stream(workspace_chunks_, copy.chunks), lost ? nullptr : midway);
  }
  state_ = ControlState{target, pending_valid ? target : -1, target, -1};
  write_state();
  log_->debug("rebuilt {} lost member(s) of the group in {:.4f} s, then settled in {:.4f} s",
              lost_in_group.size(), rebuilt - settle_start, MPI_Wtime() - rebuilt);
}

void Session::settle_copies(const GroupPlan& plan, const RecoveryDecision& decision) {
  const auto epoch = static_cast<std::uint64_t>(decision.epoch);
  SKT_MPI(MPI_Barrier(comm_.get()));
  if (decision.source == RecoverySource::redo) {
    // Nothing was lost while an update ran: finish it, from the workspaces every rank still has
    // (their private state was staged before the update began).
    fault_->at(FaultStep::recover, epoch);
    checkpoint_copies(epoch, false);
    return;
  }
  const bool lost = std::binary_search(decision.rebuild.begin(), decision.rebuild.end(), rank_);
  const std::vector<int> lost_in_group = lost_members(plan, decision);
  const Copy& copy = copies_[static_cast<std::size_t>(areas().copy_of_epoch(epoch))];
  const auto midway = fault_->midway(FaultStep::recover, epoch);
  if (lost || lost_in_group.empty()) fault_->at(FaultStep::recover, epoch);
  if (!lost_in_group.empty()) {
    std::vector<std::uint64_t> member_chunks(info_.member_chunks,
                                             info_.member_chunks + info_.group_size);
    enc::rebuild_group(group_comm_.get(), geometry_, *codec_, member_chunks, lost_in_group,
                       copy.chunks, checksum_of(epoch), {config_.pipeline_depth, midway});
  }
  state_ = ControlState{decision.epoch, decision.epoch, -1, -1};
  write_state();
  copy_pieces(whole_stream(copy.chunks, workspace_chunks_), nullptr);
}

std::uint64_t Session::recover() {
  if (recovered_) throw Error(SKT_ERR_STATE, "skt_recover may be called only once per context");
  try {
    return restore();
  } catch (const AgreedError&) {
    // Every rank refuses together. Each removes what it created before any returns: mpirun kills
    // the others as soon as one exits, and a rank killed before its clean-up would leave segments
    // that make the corrected first launch of the job refuse to start.
    remove_created_segments();
    MPI_Barrier(comm_.get());
    throw;
  }
}

void Session::remove_created_segments() {
  for (auto& r : regions_) {
    if (!r.found) r.segment.remove();
  }
  if (stage_ && !stage_found_) stage_.remove();
  if (checkpoint_ && checkpoint_created_) checkpoint_.remove();
}

std::uint64_t Session::restore() {
  const double start = MPI_Wtime();
  Finding mine;
  agree([&] { mine = inspect_local_state(); });

  Record record{mine.valid ? 1 : 0, mine.state.committed,
                mine.state.encoded, mine.state.agreed,
                mine.state.resumed, mine.valid ? static_cast<std::int64_t>(mine.info.groups) : 0};
  constexpr int kFields = sizeof(Record) / sizeof(std::int64_t);
  std::vector<Record> records(static_cast<std::size_t>(nranks_));
  SKT_MPI(MPI_Allgather(&record, kFields, MPI_INT64_T, records.data(), kFields, MPI_INT64_T,
                        comm_.get()));
  std::vector<RankFinding> findings;
  std::int64_t newest = 0, groups = 0;
  bool any_valid = false;
  for (const auto& r : records) {
    findings.push_back({r.valid != 0, ControlState{r.committed, r.encoded, r.agreed, r.resumed}});
    if (r.valid != 0) {
      any_valid = true;
      newest = std::max({newest, r.agreed, r.committed});
      groups = std::max(groups, r.groups);
    }
  }

  GroupPlan plan;
  RecoveryDecision decision;
  // The plan and the decision follow from what every rank gathered, so a refusal is the same on
  // every rank; agreeing on it also makes every rank clean up before any returns (see recover).
  agree([&] {
    if (any_valid) {
      // A group that lost every member leaves no record of who it was; that only matters if
      // there is something to restore.
      try {
        plan = recorded_plan(mine, static_cast<int>(groups));
        decision = decide(findings, plan);
      } catch (const Error& e) {
        if (e.code() != SKT_ERR_UNRECOVERABLE || newest > 0) throw;
        decision = RecoveryDecision{};
      }
    }
    if (decision.source == RecoverySource::unrecoverable) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("job '{}' cannot be recovered: {}. Start it again from the "
                              "beginning (skt-shm clean --job {})",
                              config_.job, decision.reason, config_.job));
    }
    if (decision.source == RecoverySource::fresh) {
      plan = plan_groups(nodes_, config_.group_size, config_.parity + 1);
    }
  });
  if (decision.source == RecoverySource::fresh) {
    if (config_.group_size > nranks_ && rank_ == 0) {
      log_->warn("the group size (SKT_GROUP_SIZE) is {} but the job has {} ranks: one group of {}",
                 config_.group_size, nranks_, nranks_);
    }
    if (config_.restart.value_or(0) > 0 && rank_ == 0) {
      log_->warn("SKT_RESTART={} but job '{}' has no committed checkpoint: starting afresh",
                 *config_.restart, config_.job);
    }
  }
  // Members of a group should still sit on distinct nodes (a replacement takes over its
  // predecessor's place); if not, the next failure of that node would take two.
  const auto& members =
      plan.members[static_cast<std::size_t>(plan.group_of[static_cast<std::size_t>(rank_)])];
  for (const int r : members) {
    if (r != rank_ && nodes_[static_cast<std::size_t>(r)] == config_.node) {
      log_->warn(
          "rank {} of this rank's group is on the same node {}: a failure of that node "
          "would be unrecoverable",
          r, config_.node);
    }
  }

  const double decided = MPI_Wtime();
  join_group(plan, decision, mine);
  const bool survivor =
      decision.source != RecoverySource::fresh && mine.valid &&
      !std::binary_search(decision.rebuild.begin(), decision.rebuild.end(), rank_);
  ensure_checkpoint_segment(survivor);
  const double joined = MPI_Wtime();
  std::uint64_t restored = static_cast<std::uint64_t>(decision.epoch);
  if (decision.source == RecoverySource::fresh) {
    state_ = ControlState{0, -1, 0, -1};
    write_state();
    SKT_MPI(MPI_Barrier(comm_.get()));
  } else {
    state_ = survivor ? mine.state : ControlState{};
    if (config_.mode == Mode::self) {
      settle_self(plan, decision);
    } else {
      settle_copies(plan, decision);
    }
    restore_private_regions();
    SKT_MPI(MPI_Barrier(comm_.get()));
    if (config_.mode == Mode::self) {
      state_.resumed = decision.epoch;
      write_state();
    }
    // D may be stale on ranks that rolled back: the first checkpoint after any recovery encodes
    // in full, on every rank alike.
    full_encode_needed_ = true;
  }
  epoch_ = restored;
  log_->set_epoch(epoch_);
  recovered_ = true;
  last_recover_seconds_ = MPI_Wtime() - start;
  log_->debug(
      "recovery took {:.4f} s: {:.4f} s to inspect and decide, {:.4f} s to join the group, "
      "{:.4f} s to rebuild and settle",
      last_recover_seconds_, decided - start, joined - decided, MPI_Wtime() - joined);
  last_commit_time_ = MPI_Wtime();
  if (decision.source == RecoverySource::fresh) {
    log_->job("fresh start: {} groups, this rank is member {} of group {} ({} members)",
              plan.groups(), info_.member, info_.group, info_.group_size);
  } else {
    std::string rebuilt;
    for (const int r : decision.rebuild) {
      rebuilt += fmt::format("{}{}", rebuilt.empty() ? "" : " ", r);
    }
    log_->job("recovered epoch {} from the {}; rebuilt ranks: {} ({:.3f} s)", epoch_,
              describe_source(decision.source), rebuilt.empty() ? "none" : rebuilt,
              last_recover_seconds_);
  }
  return epoch_;
}

void Session::checkpoint_self(std::uint64_t next, const std::vector<DirtyRange>* dirty) {
  const auto target = static_cast<std::int64_t>(next);
  Copy& copy = copies_[0];
  const bool incremental =
      dirty != nullptr && !full_encode_needed_ && codec_ != nullptr && codec_->exact();
  std::vector<std::uint64_t> changed;
  enc::RowMasks rows;
  std::vector<Piece> flush;
  if (incremental) {
    flush = dirty_pieces(*dirty);
    changed.assign(layout_.chunks, 0);
    const std::size_t chunk = config_.chunk_bytes;
    for (const auto& piece : flush) {
      if (piece.bytes == 0) continue;
      // The stream chunks a piece covers: find its region by the copy offset it writes to.
      const auto offset = static_cast<std::size_t>(piece.to - copy.data);
      const auto region = static_cast<std::size_t>(
          std::upper_bound(layout_.copy_offset.begin(), layout_.copy_offset.end(), offset) -
          layout_.copy_offset.begin() - 1);
      const std::size_t begin = offset - layout_.copy_offset[region];
      const std::size_t end = begin + piece.bytes;
      for (std::size_t c = begin / chunk; c <= (end - 1) / chunk; ++c) {
        const std::size_t from = c * chunk;
        changed[layout_.first_chunk[region] + c] |=
            geometry_.block_mask(std::max(begin, from) - from, std::min(end, from + chunk) - from);
      }
    }
  }
  // Until this checkpoint completes, what D holds is not what parity_written_ says: a retry after
  // a failure encodes in full.
  full_encode_needed_ = true;
  std::byte* const committed_parity = checksum_of(next - 1);  // C
  std::byte* const parity = checksum_of(next);                // D, over epoch next-2's
  agree([&] {
    stage_private_regions(next);
    state_.encoded = -1;
    write_state();
    const std::size_t parity_chunks = geometry_.parity_chunks();
    last_flushed_bytes_ = 0;
    if (incremental) {
      rows = enc::agree_row_masks(group_comm_.get(), geometry_, workspace_chunks_, changed);
      const enc::Incremental inc{&copy.chunks, committed_parity, &changed, &rows};
      last_sent_bytes_ = encode(workspace_chunks_, parity, next, &inc);
      // The blocks the last checkpoint rewrote and this one did not still hold epoch next-2's
      // checksum in D: they take C's.
      const std::size_t chunk = geometry_.chunk_bytes;
      for (std::uint64_t p = 0; p < parity_chunks; ++p) {
        const std::uint64_t row = geometry_.parity_row(static_cast<int>(info_.member), p);
        const std::uint64_t stale = parity_written_[p] & ~rows.any[row];
        for (const auto& run : geometry_.segments(stale, stale)) {
          const std::size_t at = p * chunk + run.begin;
          std::memcpy(parity + at, committed_parity + at, run.bytes());
          last_flushed_bytes_ += run.bytes();
        }
        parity_written_[p] = rows.any[row];
      }
    } else {
      last_sent_bytes_ = encode(workspace_chunks_, parity, next, nullptr);
      parity_written_.assign(parity_chunks, geometry_.block_mask(0, geometry_.chunk_bytes));
    }
    state_.encoded = target;
    write_state();
    fault_->at(FaultStep::encoded, next);
  });
  // Every rank has a complete D for the next epoch: B and C may now be overwritten. Only B is:
  // D stays where it is and becomes C when the epoch is committed.
  state_.agreed = target;
  write_state();
  fault_->at(FaultStep::agreed, next);
  const auto flush_midway = fault_->midway(FaultStep::flush, next);
  last_flushed_bytes_ +=
      copy_pieces(incremental ? flush : whole_stream(workspace_chunks_, copy.chunks), flush_midway);
  state_.committed = target;
  write_state();
  fault_->at(FaultStep::committed, next);
}

void Session::checkpoint_copies(std::uint64_t next, bool stage) {
  const auto target = static_cast<std::int64_t>(next);
  Copy& copy = copies_[static_cast<std::size_t>(areas().copy_of_epoch(next))];
  if (stage) stage_private_regions(next);
  if (config_.mode == Mode::single) {
    // Every rank has staged its private state before any overwrites its only copy: if the update
    // then fails with no memory lost, every workspace holds the whole state to finish it from.
    SKT_MPI(MPI_Barrier(comm_.get()));
  }
  agree([&] {
    state_.encoded = target;
    write_state();
    last_flushed_bytes_ = copy_pieces(whole_stream(workspace_chunks_, copy.chunks),
                                      fault_->midway(FaultStep::flush, next));
    last_sent_bytes_ = encode(copy.chunks, checksum_of(next), next, nullptr);
    fault_->at(FaultStep::encoded, next);
  });
  state_.committed = target;
  write_state();
  fault_->at(FaultStep::committed, next);
}

void Session::checkpoint(const std::vector<DirtyRange>* dirty) {
  require_recovered("skt_checkpoint");
  if (dirty != nullptr) {
    for (const auto& d : *dirty) {
      const auto it = std::find_if(regions_.begin(), regions_.end(),
                                   [&](const WorkRegion& r) { return r.name == d.region; });
      if (it == regions_.end()) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: no region named '{}'", d.region));
      }
      if (d.offset > it->bytes || d.length > it->bytes - d.offset) {
        throw Error(SKT_ERR_ARG,
                    fmt::format("skt_checkpoint_dirty: bytes {} to {} are outside region '{}' of "
                                "{} bytes",
                                d.offset, d.offset + d.length, d.region, it->bytes));
      }
    }
  }
  const double start = MPI_Wtime();
  const std::uint64_t next = epoch_ + 1;
  if (config_.mode == Mode::self) {
    checkpoint_self(next, dirty);
  } else {
    checkpoint_copies(next, true);
  }
  // The last agreement: every rank committed. It also tells every rank the slowest rank's time,
  // which is what the checkpoint cost.
  double elapsed = MPI_Wtime() - start;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, comm_.get()));
  if (config_.mode == Mode::self) {
    state_.resumed = static_cast<std::int64_t>(next);
    write_state();
  }
  epoch_ = next;
  full_encode_needed_ = false;
  log_->set_epoch(epoch_);
  last_checkpoint_seconds_ = elapsed;
  last_commit_time_ = MPI_Wtime();
  log_->job("checkpoint {} committed in {:.3f} s", epoch_, last_checkpoint_seconds_);
}

bool Session::need_checkpoint() {
  require_recovered("skt_need_checkpoint");
  if (config_.mtbf_seconds <= 0) {
    throw Error(SKT_ERR_CONFIG,
                "skt_need_checkpoint needs the mean time between failures: set "
                "SKT_MTBF (e.g. 6h) or mtbf in the configuration file");
  }
  // Rank 0's clock decides for everyone; before any checkpoint, a recovery's cost stands in for
  // the cost of one, and with neither, checkpointing now measures it.
  int need = 0;
  if (rank_ == 0) {
    const double cost =
        last_checkpoint_seconds_ > 0 ? last_checkpoint_seconds_ : last_recover_seconds_;
    const double interval = daly_interval(cost, config_.mtbf_seconds);
    need = (epoch_ == 0 && last_checkpoint_seconds_ == 0) ||
                   MPI_Wtime() - last_commit_time_ >= interval
               ? 1
               : 0;
  }
  SKT_MPI(MPI_Bcast(&need, 1, MPI_INT, 0, comm_.get()));
  return need != 0;
}

void Session::finalize(bool discard) {
  // Segments of an ephemeral job can never be found again, so they go in any case; only a
  // requested discard waits for every rank, since a rank that has not finished may still need them.
  if (discard) SKT_MPI(MPI_Barrier(comm_.get()));
  if (discard || ephemeral_job_) {
    for (auto& r : regions_)
      r.segment.remove();
    if (stage_) stage_.remove();
    if (checkpoint_) checkpoint_.remove();
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
  s.workspace_bytes = layout_.workspace_bytes;
  s.checkpoint_bytes = static_cast<std::size_t>(copies()) * layout_.copy_bytes;
  s.checksum_bytes = geometry_.parity_bytes();
  for (const auto& r : regions_)
    s.shm_bytes += r.segment.header().segment_bytes;
  if (stage_) s.shm_bytes += stage_.header().segment_bytes;
  if (checkpoint_) s.shm_bytes += checkpoint_.header().segment_bytes;
  s.last_checkpoint_seconds = last_checkpoint_seconds_;
  s.last_recover_seconds = last_recover_seconds_;
  s.last_sent_bytes = last_sent_bytes_;
  s.last_flushed_bytes = last_flushed_bytes_;
  return s;
}

}  // namespace skt
