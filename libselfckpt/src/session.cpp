#include "libselfckpt/src/session.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "selfckpt/selfckpt.hpp"

namespace skt {

namespace {

constexpr std::size_t kNodeBytes = 64;

std::size_t page_round(std::size_t bytes) {
  return (bytes + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
}

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
  fault_ = std::make_unique<FaultInjector>(config_.fault, rank_, log_.get());

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
  const std::string node = first < static_cast<int>(nodes_.size())
                               ? nodes_[static_cast<std::size_t>(first)]
                               : (first == rank_ ? config_.node : std::string("?"));
  throw Error(code, fmt::format("rank {} (node {}): {}", first, node, message));
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

void Session::check_not_stale(const SegmentIdentity& id, bool found) const {
  if (found && config_.restart && *config_.restart == 0) {
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
      check_not_stale(id, true);
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
  // The stream: regions in name order, then the private regions packed into the stage segment.
  std::sort(regions_.begin(), regions_.end(),
            [](const WorkRegion& a, const WorkRegion& b) { return a.name < b.name; });
  std::sort(privates_.begin(), privates_.end(),
            [](const PrivateRegion& a, const PrivateRegion& b) { return a.name < b.name; });
  std::vector<RegionSpec> specs;
  workspace_starts_.clear();
  for (const auto& r : regions_) {
    specs.push_back({r.name, r.bytes});
    workspace_starts_.push_back(r.segment.data());
  }
  std::size_t stage_bytes = 0;
  std::string stage_names;
  for (const auto& p : privates_) {
    stage_bytes += (p.bytes + 63) / 64 * 64;
    stage_names += p.name + "," + std::to_string(p.bytes) + ";";
  }
  if (stage_bytes > 0) {
    stage_ = open_region("stage", stage_bytes, SegmentKind::stage, &stage_found_);
    specs.push_back({"stage:" + stage_names, stage_bytes});
    workspace_starts_.push_back(stage_.data());
  }
  layout_ = WorkspaceLayout::plan(std::move(specs), config_.chunk_bytes);

  Finding f;
  if (ephemeral_job_) return f;
  const SegmentIdentity id = identity(SegmentKind::checkpoint, "checkpoint");
  FindResult result = find_segment(id);
  for (const auto& why : result.skipped)
    log_->debug("left a segment alone: {}", why);
  if (!result.segment) return f;
  check_not_stale(id, true);
  checkpoint_ = std::move(*result.segment);
  const SegmentHeader& header = checkpoint_.header();
  check_job_shape(header);
  CheckpointInfo info;
  if (!decode_checkpoint_info(checkpoint_.base(), &info)) {
    log_->warn("this rank's checkpoint description is corrupted (CRC mismatch): treated as lost");
    return f;
  }
  const bool same_settings =
      info.scheme == static_cast<std::uint32_t>(config_.scheme) &&
      info.requested_group_size == static_cast<std::uint32_t>(config_.group_size) &&
      (info.group_size == 1 || info.parity == static_cast<std::uint32_t>(config_.parity)) &&
      info.chunk_bytes == config_.chunk_bytes;
  if (!same_settings) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the checkpoint of job '{}' was written with group size {}, scheme {}, "
                            "parity {}, chunk size {}; the configuration now says group size {}, "
                            "scheme {}, parity {}, chunk size {}. Relaunch with the same settings, "
                            "or remove the job's segments (skt-shm clean --job {}) to start afresh",
                            config_.job, info.requested_group_size,
                            enc::scheme_name(static_cast<enc::Scheme>(info.scheme)), info.parity,
                            info.chunk_bytes, config_.group_size, enc::scheme_name(config_.scheme),
                            config_.parity, config_.chunk_bytes, config_.job));
  }
  if (info.layout_hash != layout_.hash || info.workspace_bytes != layout_.workspace_bytes) {
    throw Error(SKT_ERR_MISMATCH,
                fmt::format("the regions declared now ({} bytes in {} regions) differ from those "
                            "of the checkpoint ({} bytes); a relaunch must declare the same "
                            "regions, with the same names and sizes, and protect the same private "
                            "regions",
                            layout_.workspace_bytes, layout_.regions.size(), info.workspace_bytes));
  }
  const std::uint64_t parity_bytes = info.rows / info.group_size * info.parity * info.chunk_bytes;
  if (header.data_bytes != page_round(layout_.copy_bytes) + 2 * page_round(parity_bytes)) {
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
      (stage_bytes == 0 || stage_found_);
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
    if (votes[r] != -votes[2 * n + r] || votes[n + r] != -votes[3 * n + r]) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the surviving checkpoints disagree about the group of rank {}; "
                              "remove the job's segments (skt-shm clean --job {})",
                              r, config_.job));
    }
    if (votes[r] > groups) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the surviving checkpoints disagree about the number of groups; "
                              "remove the job's segments (skt-shm clean --job {})",
                              config_.job));
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

void Session::join_group(const GroupPlan& plan, const RecoveryDecision& decision,
                         const Finding& mine) {
  const auto me = static_cast<std::size_t>(rank_);
  const int group = plan.group_of[me];
  const int member = plan.index_of[me];
  const int size = plan.size_of(group);
  group_comm_ = Comm::split(comm_.get(), group, member);

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
  const int parity = size > 1 ? config_.parity : 0;
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
  info_.chunk_bytes = config_.chunk_bytes;
  info_.rows = geometry_.rows;
  info_.workspace_bytes = layout_.workspace_bytes;
  info_.layout_hash = layout_.hash;
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

void Session::ensure_checkpoint_segment(bool keep_existing) {
  const std::size_t copy_bytes = page_round(layout_.copy_bytes);
  const std::size_t parity_bytes = page_round(geometry_.parity_bytes());
  if (!keep_existing) {
    if (checkpoint_) {
      checkpoint_.remove();
      checkpoint_.detach();
    }
    SegmentHeader header;
    header.identity = identity(SegmentKind::checkpoint, "checkpoint");
    header.nranks = nranks_;
    header.data_bytes = copy_bytes + 2 * parity_bytes;
    checkpoint_ = Segment::create(header, config_.huge_pages);
    encode_checkpoint_info(checkpoint_.base(), info_);
    clear_control(checkpoint_.base());
  }
  copy_ = checkpoint_.data();
  checksum_ = copy_ + copy_bytes;
  pending_ = checksum_ + parity_bytes;
  workspace_chunks_ = layout_.chunks_at(workspace_starts_);
  copy_chunks_ = layout_.copy_chunks(copy_);
}

void Session::write_state() {
  write_control(checkpoint_.base(), state_);
}

void Session::copy_chunks(const enc::ChunkList& from, const enc::ChunkList& to,
                          const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const std::uint64_t n = from.size();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::memcpy(to.data[i], from.data[i], from.bytes[i]);
    if (progress) progress(i + 1, n);
  }
}

void Session::stage_private_regions(std::uint64_t epoch) {
  if (privates_.empty()) return;
  const auto midway = fault_->midway(FaultStep::stage, epoch);
  std::byte* at = stage_.data();
  std::uint64_t done = 0;
  for (const auto& p : privates_) {
    std::memcpy(at, p.ptr, p.bytes);
    at += (p.bytes + 63) / 64 * 64;
    if (midway) midway(++done, privates_.size() + 1);
  }
}

void Session::restore_private_regions() {
  const std::byte* at = stage_ ? stage_.data() : nullptr;
  for (const auto& p : privates_) {
    std::memcpy(p.ptr, at, p.bytes);
    at += (p.bytes + 63) / 64 * 64;
  }
}

void Session::rebuild_and_settle(const GroupPlan& plan, const RecoveryDecision& decision) {
  const std::int64_t target = decision.epoch;
  const auto epoch = static_cast<std::uint64_t>(target);
  const bool from_copy = decision.source == RecoverySource::committed;
  const bool lost = std::binary_search(decision.rebuild.begin(), decision.rebuild.end(), rank_);
  const int group = plan.group_of[static_cast<std::size_t>(rank_)];
  std::vector<int> lost_members;
  std::vector<std::uint64_t> member_chunks;
  for (std::uint32_t i = 0; i < info_.group_size; ++i)
    member_chunks.push_back(info_.member_chunks[i]);
  for (const int r : decision.rebuild) {
    if (plan.group_of[static_cast<std::size_t>(r)] == group) {
      lost_members.push_back(plan.index_of[static_cast<std::size_t>(r)]);
    }
  }
  std::sort(lost_members.begin(), lost_members.end());

  // Record the decision before anyone overwrites anything: a failure from here on must lead the
  // next recovery to the same epoch from the same source.
  if (!from_copy && !lost) {
    state_.agreed = target;
    write_state();
  }
  SKT_MPI(MPI_Barrier(comm_.get()));

  const bool clean = state_.committed == target && state_.encoded == target &&
                     state_.agreed == target && state_.resumed < target;
  const bool copies = !lost && (from_copy ? !clean : state_.committed != target);
  const auto midway = fault_->midway(FaultStep::recover, epoch);
  if (!copies && lost_members.empty()) fault_->at(FaultStep::recover, epoch);

  if (!lost_members.empty()) {
    enc::PipelineOptions options{config_.pipeline_depth, copies ? nullptr : midway};
    if (from_copy) {
      enc::rebuild_group(group_comm_.get(), geometry_, *codec_, member_chunks, lost_members,
                         copy_chunks_, checksum_, options);
    } else {
      enc::rebuild_group(group_comm_.get(), geometry_, *codec_, member_chunks, lost_members,
                         workspace_chunks_, pending_, options);
    }
    if (lost) {
      state_ =
          from_copy ? ControlState{target, -1, target, -1} : ControlState{-1, target, target, -1};
      write_state();
      log_->info("rebuilt this rank's {} from its group", from_copy ? "B and C" : "W and D");
    }
  }

  const std::size_t parity_bytes = geometry_.parity_bytes();
  if (from_copy) {
    if (lost || !clean) {
      // Roll W and D back to the committed epoch.
      state_.encoded = -1;
      write_state();
      copy_chunks(copy_chunks_, workspace_chunks_, lost ? nullptr : midway);
      std::memcpy(pending_, checksum_, parity_bytes);
    }
  } else if (state_.committed != target) {
    // Finish the flush that the failure interrupted.
    copy_chunks(workspace_chunks_, copy_chunks_, lost ? nullptr : midway);
    std::memcpy(checksum_, pending_, parity_bytes);
  }
  state_ = ControlState{target, target, target, -1};
  write_state();
  restore_private_regions();
}

std::uint64_t Session::recover() {
  if (recovered_) throw Error(SKT_ERR_STATE, "skt_recover may be called only once per context");
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
  bool any_valid = false;
  for (const auto& r : records) {
    findings.push_back({r.valid != 0, ControlState{r.committed, r.encoded, r.agreed, r.resumed}});
    any_valid = any_valid || r.valid != 0;
  }

  const int tolerance = config_.group_size > 1 ? enc::tolerance(config_.scheme, config_.parity) : 0;
  GroupPlan plan;
  RecoveryDecision decision;
  if (any_valid) {
    std::int64_t newest = 0;
    for (const auto& f : findings) {
      if (f.valid) newest = std::max({newest, f.state.agreed, f.state.committed});
    }
    // A group that lost every member leaves no record of who it was; that only matters if there
    // is something to restore.
    std::int64_t groups = 0;
    for (const auto& r : records) {
      if (r.valid != 0) groups = std::max(groups, r.groups);
    }
    try {
      plan = recorded_plan(mine, static_cast<int>(groups));
      decision = decide_recovery(findings, plan, tolerance, nodes_);
    } catch (const Error& e) {
      if (e.code() != SKT_ERR_UNRECOVERABLE || newest > 0) throw;
      decision = RecoveryDecision{};
    }
  }
  if (decision.source == RecoverySource::unrecoverable) {
    throw Error(SKT_ERR_UNRECOVERABLE,
                fmt::format("job '{}' cannot be recovered: {}. Start it again from the beginning "
                            "(skt-shm clean --job {})",
                            config_.job, decision.reason, config_.job));
  }
  if (decision.source == RecoverySource::fresh) {
    plan = plan_groups(nodes_, config_.group_size, config_.parity + 1);
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

  join_group(plan, decision, mine);
  const bool survivor =
      decision.source != RecoverySource::fresh && mine.valid &&
      !std::binary_search(decision.rebuild.begin(), decision.rebuild.end(), rank_);
  ensure_checkpoint_segment(survivor);
  if (decision.source == RecoverySource::fresh) {
    state_ = ControlState{0, -1, 0, -1};
    write_state();
    SKT_MPI(MPI_Barrier(comm_.get()));
  } else {
    state_ = survivor ? mine.state : ControlState{};
    rebuild_and_settle(plan, decision);
    SKT_MPI(MPI_Barrier(comm_.get()));
    state_.resumed = decision.epoch;
    write_state();
  }
  epoch_ = static_cast<std::uint64_t>(decision.epoch);
  log_->set_epoch(epoch_);
  recovered_ = true;
  last_recover_seconds_ = MPI_Wtime() - start;
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

void Session::checkpoint() {
  require_recovered("skt_checkpoint");
  const double start = MPI_Wtime();
  const std::uint64_t next = epoch_ + 1;
  const auto target = static_cast<std::int64_t>(next);
  agree([&] {
    stage_private_regions(next);
    state_.encoded = -1;
    write_state();
    if (codec_) {
      enc::encode_group(group_comm_.get(), geometry_, *codec_, workspace_chunks_, pending_,
                        {config_.pipeline_depth, fault_->midway(FaultStep::encode, next)});
    } else {
      fault_->at(FaultStep::encode, next);
    }
    state_.encoded = target;
    write_state();
    fault_->at(FaultStep::encoded, next);
  });
  // Every rank has a complete D for the next epoch: B and C may now be overwritten.
  state_.agreed = target;
  write_state();
  fault_->at(FaultStep::agreed, next);
  copy_chunks(workspace_chunks_, copy_chunks_, fault_->midway(FaultStep::flush, next));
  std::memcpy(checksum_, pending_, geometry_.parity_bytes());
  state_.committed = target;
  write_state();
  fault_->at(FaultStep::committed, next);
  SKT_MPI(MPI_Barrier(comm_.get()));
  state_.resumed = target;
  write_state();
  epoch_ = next;
  log_->set_epoch(epoch_);
  last_checkpoint_seconds_ = MPI_Wtime() - start;
  log_->job("checkpoint {} committed in {:.3f} s", epoch_, last_checkpoint_seconds_);
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
  }
}

skt_stats Session::stats() const {
  skt_stats s{};
  s.epoch = epoch_;
  s.group = static_cast<int>(info_.group);
  s.group_size = static_cast<int>(info_.group_size);
  s.member = static_cast<int>(info_.member);
  s.workspace_bytes = layout_.workspace_bytes;
  s.checkpoint_bytes = layout_.copy_bytes;
  s.checksum_bytes = geometry_.parity_bytes();
  for (const auto& r : regions_)
    s.shm_bytes += r.segment.header().segment_bytes;
  if (stage_) s.shm_bytes += stage_.header().segment_bytes;
  if (checkpoint_) s.shm_bytes += checkpoint_.header().segment_bytes;
  s.last_checkpoint_seconds = last_checkpoint_seconds_;
  s.last_recover_seconds = last_recover_seconds_;
  return s;
}

}  // namespace skt
