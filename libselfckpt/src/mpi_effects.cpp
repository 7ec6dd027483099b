#include "libselfckpt/src/mpi_effects.hpp"

#include <fmt/format.h>

#include <new>
#include <utility>

#include "encoders/link.hpp"

namespace skt {

MpiEffects::MpiEffects(MPI_Comm job, const std::vector<std::string>& nodes,
                       const std::string& own_node, const FaultInjector* fault)
    : job_(job), nodes_(nodes), own_node_(own_node), fault_(fault) {
  SKT_MPI(MPI_Comm_rank(job, &rank_));
  SKT_MPI(MPI_Comm_size(job, &nranks_));
}

void MpiEffects::join(const GroupMembership& membership) {
  group_comm_ = Comm::split(job_, membership.group, membership.member);
  joined_ = true;
  group_ = membership.group;
  member_ = membership.member;
  geometry_ = membership.geometry;
  codec_ = membership.codec;
  member_chunks_ = membership.member_chunks;
  depth_ = membership.pipeline_depth;
}

void MpiEffects::agree(const std::function<void()>& step) {
  int code = SKT_OK;
  bool own = true;  // failed for a reason of its own, not because a member of its group gave up
  std::string message;
  try {
    step();
  } catch (const enc::MemberAborted& e) {
    code = SKT_ERR_INTERNAL;
    own = false;
    message = e.what();
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
  // Members of this rank's group may wait in an operation for messages it will not send.
  if (code != SKT_OK && joined_) enc::GroupLink::abort_members(group_comm_.get());
  // The lowest rank that failed for a reason of its own names the error for everyone.
  int first = code == SKT_OK ? 2 * nranks_ : (own ? rank_ : nranks_ + rank_);
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, job_));
  if (first == 2 * nranks_) return;
  const int root = first % nranks_;
  SKT_MPI(MPI_Bcast(&code, 1, MPI_INT, root, job_));
  message = skt::broadcast_string(job_, std::move(message), root);
  if (joined_) {
    // An operation may have been abandoned half way, leaving messages nobody will receive on the
    // group's communicator: every rank takes a fresh one.
    group_comm_ = Comm::split(job_, group_, member_);
  }
  // Before the ranks have exchanged their node names, only a rank's own is known.
  std::string node;
  if (root < static_cast<int>(nodes_.size())) {
    node = nodes_[static_cast<std::size_t>(root)];
  } else if (root == rank_) {
    node = own_node_;
  }
  throw AgreedError(code, node.empty() ? fmt::format("rank {}: {}", root, message)
                                       : fmt::format("rank {} (node {}): {}", root, node, message));
}

void MpiEffects::barrier() {
  SKT_MPI(MPI_Barrier(job_));
}

std::vector<std::vector<std::byte>> MpiEffects::gather(std::span<const std::byte> mine) {
  const int bytes = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(nranks_)),
      offsets(static_cast<std::size_t>(nranks_));
  SKT_MPI(MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, job_));
  int total = 0;
  for (int r = 0; r < nranks_; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::byte> all(static_cast<std::size_t>(total));
  SKT_MPI(MPI_Allgatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(),
                         MPI_BYTE, job_));
  std::vector<std::vector<std::byte>> out;
  for (int r = 0; r < nranks_; ++r) {
    const auto* from = all.data() + offsets[static_cast<std::size_t>(r)];
    out.emplace_back(from, from + counts[static_cast<std::size_t>(r)]);
  }
  return out;
}

namespace {

// Gathered bytes, `each` of them per rank in rank order, one vector per rank.
std::vector<std::vector<std::byte>> split_gathered(const std::vector<std::byte>& all,
                                                   std::size_t each) {
  std::vector<std::vector<std::byte>> out;
  for (std::size_t at = 0; at < all.size(); at += each)
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + each));
  return out;
}

MPI_Op mpi_op(Combine how) {
  switch (how) {
    case Combine::min:
      return MPI_MIN;
    case Combine::max:
      return MPI_MAX;
    case Combine::sum:
      return MPI_SUM;
  }
  return MPI_OP_NULL;
}

}  // namespace

std::vector<std::vector<std::byte>> MpiEffects::gather_reporting(
    std::span<const std::byte> mine, double first_report,
    const std::function<void(double waited)>& report) {
  std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(nranks_));
  MPI_Request request = MPI_REQUEST_NULL;
  SKT_MPI(MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                         static_cast<int>(mine.size()), MPI_BYTE, job_, &request));
  wait_reporting_delays(request, first_report, report);
  return split_gathered(all, mine.size());
}

std::vector<std::vector<std::byte>> MpiEffects::gather_on_machine(std::span<const std::byte> mine) {
  if (!machine_) machine_ = Comm::split_shared(job_);
  std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(machine_.size()));
  SKT_MPI(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                        static_cast<int>(mine.size()), MPI_BYTE, machine_.get()));
  return split_gathered(all, mine.size());
}

void MpiEffects::combine(std::span<std::int64_t> values, Combine how) {
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T,
                        mpi_op(how), job_));
}

void MpiEffects::combine(std::span<double> values, Combine how) {
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                        mpi_op(how), job_));
}

void MpiEffects::broadcast(std::span<std::byte> bytes, int root) {
  SKT_MPI(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, job_));
}

enc::RowMasks MpiEffects::row_masks(const enc::ChunkList& mine,
                                    const std::vector<std::uint64_t>& changed) {
  return enc::agree_row_masks(group_comm_.get(), geometry_, mine, changed);
}

std::uint64_t MpiEffects::encode(const enc::ChunkList& source, std::byte* parity,
                                 const enc::Incremental* incremental, const enc::Digests& digests,
                                 const Progress& progress) {
  if (codec_ == nullptr) {
    // A group of one keeps no checksum, but its data still gets its digest.
    const auto blocks = static_cast<std::uint64_t>(geometry_.blocks_per_chunk());
    const std::uint64_t all = geometry_.block_mask(0, geometry_.chunk_bytes);
    for (std::uint64_t j = 0; j < source.size(); ++j) {
      if (digests.data != nullptr) {
        enc::chunk_crcs(geometry_, source.data[j], source.bytes[j],
                        incremental != nullptr ? (*incremental->changed)[j] : all,
                        digests.data + j * blocks);
      }
      if (progress) progress(j + 1, source.size());
    }
    return 0;
  }
  enc::GroupLink link(group_comm_.get());
  return enc::encode_group(link, geometry_, *codec_, member_chunks_, source, parity,
                           {depth_, progress, &scratch_}, incremental, &digests);
}

GroupWork MpiEffects::rebuild(std::span<const int> lost, std::span<const std::uint64_t> skip_rows,
                              std::span<const enc::RowRepair> repairs, const enc::ChunkList& mine,
                              std::byte* parity, const Progress& progress,
                              const enc::RebuildHooks* hooks) {
  if (codec_ == nullptr) return {};
  const double start = MPI_Wtime();
  enc::GroupLink link(group_comm_.get());
  const enc::PipelineOptions options{depth_, progress, &scratch_};
  enc::rebuild_group(link, geometry_, *codec_, member_chunks_, lost, skip_rows, mine, parity,
                     options, hooks);
  enc::repair_rows(link, geometry_, *codec_, member_chunks_, repairs, mine, parity, options);
  return GroupWork{MPI_Wtime() - start, link.waited_seconds()};
}

void MpiEffects::clear_control() {
  skt::clear_control(control_page_);
}

void MpiEffects::write_control(const ControlState& state) {
  skt::write_control(control_page_, state);
}

void MpiEffects::fault(FaultStep step, std::uint64_t epoch) {
  if (fault_ != nullptr) fault_->at(step, epoch);
}

Progress MpiEffects::midway(FaultStep step, std::uint64_t epoch) {
  return fault_ != nullptr ? fault_->midway(step, epoch) : Progress{};
}

}  // namespace skt
