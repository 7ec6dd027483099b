// The protocol's effects in production: agreements over the job's communicator, group operations
// by the encoders over the group's, the control block in the checkpoint segment, SKT_FAULT.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "common/mpi.hpp"
#include "encoders/codec.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/src/fault.hpp"
#include "libselfckpt/src/protocol.hpp"

namespace skt {

class MpiEffects : public Effects {
 public:
  // `job` is the job's own communicator; `nodes` names each rank's node in messages (it may
  // still be empty while the ranks have not exchanged them).
  MpiEffects(MPI_Comm job, const std::vector<std::string>& nodes, const std::string& own_node,
             const FaultInjector* fault);

  // Where SKT_FAULT's points are, once the configuration is read (none before).
  void set_fault(const FaultInjector* fault) noexcept { fault_ = fault; }

  void agree(const std::function<void()>& step) override;
  void barrier() override;
  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> gather_reporting(
      std::span<const std::byte> mine, double first_report,
      const std::function<void(double waited)>& report) override;
  std::vector<std::vector<std::byte>> gather_on_machine(std::span<const std::byte> mine) override;
  void combine(std::span<std::int64_t> values, Combine how) override;
  void combine(std::span<double> values, Combine how) override;
  void broadcast(std::span<std::byte> bytes, int root) override;
  void join(const GroupMembership& membership) override;
  void set_control_page(std::byte* page) override { control_page_ = page; }
  void clear_control() override;
  enc::RowMasks row_masks(const enc::ChunkList& mine,
                          const std::vector<std::uint64_t>& changed) override;
  std::uint64_t encode(const enc::ChunkList& source, std::byte* parity,
                       const enc::Incremental* incremental, const enc::Digests& digests,
                       const Progress& progress) override;
  GroupWork rebuild(std::span<const int> lost, std::span<const std::uint64_t> skip_rows,
                    std::span<const enc::RowRepair> repairs, const enc::ChunkList& mine,
                    std::byte* parity, const Progress& progress,
                    const enc::RebuildHooks* hooks) override;
  void write_control(const ControlState& state) override;
  void fault(FaultStep step, std::uint64_t epoch) override;
  Progress midway(FaultStep step, std::uint64_t epoch) override;

 private:
  MPI_Comm job_;
  int rank_ = 0;
  int nranks_ = 1;
  const std::vector<std::string>& nodes_;
  const std::string& own_node_;
  const FaultInjector* fault_;
  std::byte* control_page_ = nullptr;
  Comm machine_;  // the job's ranks on this machine, made when first needed

  bool joined_ = false;
  int group_ = 0;
  int member_ = 0;
  Comm group_comm_;
  enc::StripeGeometry geometry_;
  const enc::Codec* codec_ = nullptr;
  std::vector<std::uint64_t> member_chunks_;
  int depth_ = 4;
  // Encoding buffers, kept from one operation to the next, and kept mapped after an aborted one.
  enc::ScratchPool scratch_;
};

}  // namespace skt
