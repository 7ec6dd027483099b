// Session's group membership: the group a rank joins at recovery, the memory that takes, and the
// store it sets up over its checkpoint segment (the one that survived, or a new one).
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "libselfckpt/src/session.hpp"

namespace skt {

std::pair<StreamLayout, CheckpointAreas> Session::plan_store(const GroupShape& shape) const {
  const Config& config = job_.config();
  const int size = static_cast<int>(shape.ranks.size());
  const Arena& arena = *declarations_.arena_if_made();
  StreamLayout layout = StreamLayout::plan(declarations_.entries(), declarations_.staged_bytes(),
                                           arena.regions_bytes(), config.chunk_bytes,
                                           stage_period(config.scheme, size, config.parity));
  CheckpointAreas areas =
      checkpoint_areas(layout, shape.geometry, copies(), config.mode == Mode::self);
  return {std::move(layout), areas};
}

void Session::set_up_store(const GroupShape& shape, int member, bool keep_existing) {
  Arena& arena = declarations_.arena();
  store_ = RankStore{};
  store_.mode = job_.config().mode;
  std::tie(store_.layout, store_.areas) = plan_store(shape);
  store_.geometry = shape.geometry;
  store_.codec = codec_.get();
  store_.member = member;
  store_.stage = arena.stage();
  store_.workspace = store_.layout.chunks_at(arena.stage(), arena.regions());
  if (keep_existing) {
    const CheckpointInfo& info = checkpoint_.info;
    if (info.rows != shape.geometry.rows || info.member != static_cast<std::uint32_t>(member)) {
      throw Error(SKT_ERR_INTERNAL, "recorded stripe rows differ from the recomputed geometry");
    }
    place_checkpoint();
  }
}

void Session::describe_checkpoint(const GroupShape& shape, int group, int member, int groups,
                                  std::uint64_t lineage) {
  const Config& config = job_.config();
  const int size = static_cast<int>(shape.ranks.size());
  CheckpointInfo& info = checkpoint_.info;
  info = CheckpointInfo{};
  info.scheme = static_cast<std::uint32_t>(config.scheme);
  info.parity = static_cast<std::uint32_t>(shape.geometry.parity);
  info.requested_group_size = static_cast<std::uint32_t>(config.group_size);
  info.groups = static_cast<std::uint32_t>(groups);
  info.group = static_cast<std::uint32_t>(group);
  info.member = static_cast<std::uint32_t>(member);
  info.group_size = static_cast<std::uint32_t>(size);
  info.mode = static_cast<std::uint32_t>(config.mode);
  info.chunk_bytes = config.chunk_bytes;
  info.rows = shape.geometry.rows;
  info.stage_bytes = store_.layout.stage_bytes;
  info.stage_chunks = store_.layout.stage_chunks;
  info.regions_bytes = store_.layout.regions_bytes;
  info.layout_hash = store_.layout.hash;
  info.table_offset = store_.areas.table_offset();
  info.table_bytes = region_table_bytes(store_.layout.entries);
  info.lineage = lineage;
  info.command = Job::command_print();
  for (int i = 0; i < size; ++i) {
    const auto k = static_cast<std::size_t>(i);
    info.members[k] = shape.ranks[k];
    info.member_chunks[k] = shape.chunks[k];
    info.member_layouts[k] = shape.layouts[k];
  }
}

void Session::create_checkpoint(const GroupShape& shape, int group, int member, int groups,
                                std::uint64_t lineage, Segment::Population population) {
  Segment& segment = checkpoint_.segment;
  if (segment) {
    segment.remove();
    segment.detach();
  }
  describe_checkpoint(shape, group, member, groups, lineage);
  const CheckpointInfo& info = checkpoint_.info;
  SegmentHeader header;
  header.identity = job_.identity(SegmentKind::checkpoint);
  header.nranks = job_.nranks();
  header.data_bytes = store_.areas.data_bytes(info.table_bytes);
  const double creating = now_seconds();
  segment = Segment::create(header, job_.config().huge_pages, population,
                            job_.fault().midway(FaultStep::create, 0));
  clocks_.segments += now_seconds() - creating;
  checkpoint_.created = true;
  if (job_.ephemeral()) segment.remove();  // it goes with this process (see Arena::seal)
  encode_checkpoint_info(segment.base(), info);
  encode_region_table(segment.data() + info.table_offset, store_.layout.entries);
  place_checkpoint();
  job_.effects().clear_control();
}

void Session::place_checkpoint() {
  std::byte* const data = checkpoint_.segment.data();
  store_.checkpoint = data;
  store_.copies.clear();
  for (int i = 0; i < copies(); ++i)
    store_.copies.push_back(store_.layout.copy_chunks(data + store_.areas.copy_offset(i)));
  job_.effects().set_control_page(checkpoint_.segment.base());
}

void Session::prepare_checkpoint(const RestorePlan& setup) {
  const auto rank = static_cast<std::size_t>(job_.rank());
  const int group = setup.groups.group_of[rank];
  // Mapped, not written: the rebuild writes what it brings as it lands, and the rest (the checksum
  // area of the next epoch) is the next checkpoint's to write.
  create_checkpoint(setup.shapes[static_cast<std::size_t>(group)], group,
                    setup.groups.index_of[rank], setup.groups.groups(), setup.lineage,
                    Segment::Population::mapped);
}

std::uint64_t Session::bytes_to_create(const GroupShape& shape) const {
  try {
    const auto [layout, areas] = plan_store(shape);
    const Segment& segment = checkpoint_.segment;
    const std::size_t replaced = segment ? segment.header().segment_bytes : 0;
    const std::size_t bytes = segment_size(areas.data_bytes(region_table_bytes(layout.entries)),
                                           job_.config().huge_pages);
    // Memory reserved on this node for the job (a warm spare) holds it already: the machine's
    // available memory no longer counts it.
    const auto reserves = list_reserves(job_.config().job, job_.config().node);
    const bool reserved = std::any_of(reserves.begin(), reserves.end(), [&](const auto& r) {
      return r.header.segment_bytes >= bytes;
    });
    return (bytes > replaced && !reserved ? bytes - replaced : 0) +
           declarations_.arena_if_made()->unwritten_bytes();
  } catch (const std::exception&) {
    return 0;  // set_up_store meets the same error, and every rank refuses together
  }
}

int Session::establish(const RestorePlan& setup, std::optional<ControlState> survived) {
  const Config& config = job_.config();
  const auto rank = static_cast<std::size_t>(job_.rank());
  const GroupPlan& plan = setup.groups;
  const int group = plan.group_of[rank];
  const int member = plan.index_of[rank];
  const GroupShape& shape = setup.shapes[static_cast<std::size_t>(group)];
  // Members of a group should still sit on distinct nodes (a replacement takes over its
  // predecessor's place); if not, the next failure of that node would take two.
  for (const int r : shape.ranks) {
    if (r != job_.rank() && job_.node_of(r) == config.node) {
      job_.log().warn(
          "rank {} of this rank's group is on the same node {}: a failure of that node "
          "would be unrecoverable",
          r, config.node);
    }
  }
  remove_misplaced(job_, std::exchange(misplaced_, {}));
  const double decided = now_seconds();
  const double segments_before = clocks_.segments;
  codec_ = shape.geometry.parity > 0
               ? enc::make_codec(config.scheme, shape.geometry.group_size, shape.geometry.parity)
               : nullptr;
  job_.effects().join(GroupMembership{group, member, shape.geometry, codec_.get(), shape.chunks,
                                      config.pipeline_depth});
  // A rank that keeps its segments takes no new memory; one that starts them afresh takes a new
  // checkpoint segment, and the pages of its workspace as they are written (restored or computed).
  const int own_segments[] = {declarations_.arena().segment_id(), checkpoint_.segment.id()};
  const MemoryDemand demand =
      memory_demand(job_, survived ? 0 : bytes_to_create(shape), own_segments);
  job_.effects().agree([&] {
    refuse_beyond_memory(job_, demand);
    set_up_store(shape, member, survived.has_value());
    // Every page of a fresh start's checkpoint segment now, D's too: a first touch costs far more
    // than a copy (the kernel clears the page, a virtual machine's host may have to back it), and
    // it belongs to the set-up, not to the first checkpoint. A rank rebuilt by its group makes its
    // segment as the recovery begins (prepare_checkpoint), while the others verify theirs.
    if (!survived && setup.fresh()) {
      create_checkpoint(shape, group, member, plan.groups(), job_.run_id(),
                        Segment::Population::written);
    }
  });
  protocol_ = std::make_unique<Protocol>(config.mode, job_.effects(), store_,
                                         declarations_.private_objects(),
                                         survived.value_or(ControlState{}));
  clocks_.join = now_seconds() - decided - (clocks_.segments - segments_before);
  job_.log().debug("joined group {} as member {} in {:.4f} s", group, member, clocks_.join);
  return group;
}

}  // namespace skt
