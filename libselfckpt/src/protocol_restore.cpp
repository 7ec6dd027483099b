// The restore half of the protocol: each candidate epoch verified against its digests (the newest
// as the group rebuilds the members that lost it), the choice recorded, then W, B and the lost
// members settled on it.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "libselfckpt/src/protocol.hpp"

namespace skt {

namespace {

// Adds `x` to a list of ranges kept in ascending order.
void extend(std::vector<ChunkRange>& ranges, std::uint64_t x) {
  if (!ranges.empty() && ranges.back().end == x) {
    ++ranges.back().end;
  } else {
    ranges.push_back({x, x + 1});
  }
}

}  // namespace

struct Protocol::Verified {
  Holdings holdings;
  // Whether W still held the epoch when the job stopped: the rank had not returned to the
  // program since encoding it (it was inside the checkpoint call, or an update of its only copy
  // was under way). W blocks that then differ were written after the failure, before
  // skt_recover.
  bool workspace_should_hold = false;
  // Whether W is put right as it is verified (the newest candidate): each block that B holds is
  // taken into W where W differs.
  bool settle = false;
  std::vector<std::uint64_t> workspace_bad;  // per chunk: W blocks that do not hold the epoch
  std::vector<std::uint64_t> copy_bad;       // per chunk: B blocks that do not hold it
  std::vector<bool> parity_bad;              // per checksum chunk
  // What is verified so far: as the group rebuilds, each item just before it is sent.
  std::vector<bool> data_done;
  std::vector<bool> parity_done;
  std::uint64_t ahead = 0;  // where verify_ahead looks next: chunks, then checksum chunks
};

Protocol::Verified Protocol::begin_verify(std::int64_t epoch, bool redo) const {
  Verified v;
  const bool with_parity = !redo && store_.codec != nullptr;
  if (!store_.digest_of(static_cast<std::uint64_t>(epoch)).holds(epoch, with_parity)) {
    return v;  // nothing of this epoch: as if lost
  }
  v.holdings.whole = true;
  v.workspace_should_hold =
      state_.committed < epoch || (mode_ == Mode::self && state_.resumed < epoch);
  const std::uint64_t chunks = store_.workspace.size();
  v.workspace_bad.assign(chunks, 0);
  v.copy_bad.assign(chunks, 0);
  v.data_done.assign(chunks, false);
  const std::uint64_t parity_chunks = with_parity ? store_.geometry.parity_chunks() : 0;
  v.parity_bad.assign(parity_chunks, false);
  v.parity_done.assign(parity_chunks, false);
  return v;
}

void Protocol::verify_chunk(Verified& v, std::int64_t epoch, std::uint64_t j) {
  if (!v.holdings.whole || v.data_done[j]) return;
  v.data_done[j] = true;
  const auto start = std::chrono::steady_clock::now();
  const auto e = static_cast<std::uint64_t>(epoch);
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const std::uint32_t* want = store_.digest_of(e).data() + j * blocks;
  std::byte* const w = store_.workspace.data[j];
  std::byte* const b = store_.copy_of(e).data[j];
  const std::uint32_t valid = store_.workspace.bytes[j];
  // B against the digest, then W against B (read from cache) where B holds the epoch: W's
  // blocks match the digest exactly where they equal B's. Only where B does not hold it is W's
  // own digest taken.
  const std::uint64_t copy_bad = enc::mismatched_blocks(geometry, b, valid, want);
  std::uint64_t differing = 0;
  const std::size_t size = geometry.block_bytes();
  for (std::uint64_t k = 0; k < blocks; ++k) {
    const std::size_t begin = k * size;
    if (begin >= valid) break;
    if ((copy_bad >> k & 1) != 0) continue;
    const std::size_t bytes = std::min<std::size_t>(size, valid - begin);
    if (std::memcmp(w + begin, b + begin, bytes) == 0) continue;
    differing |= std::uint64_t{1} << k;
    if (v.settle) std::memcpy(w + begin, b + begin, bytes);
  }
  const std::uint64_t workspace_bad =
      copy_bad != 0 ? enc::mismatched_blocks(geometry, w, valid, want) & copy_bad : 0;
  const auto rolled = static_cast<std::uint64_t>(std::popcount(differing));
  if (v.workspace_should_hold) v.holdings.written_blocks += rolled;
  if (v.settle) {
    // Taken from B already: what the restore would have done first, here while in cache.
    stats_.workspace_blocks_rolled_back += rolled;
    if (v.workspace_should_hold) stats_.workspace_blocks_overwritten += rolled;
    v.workspace_bad[j] = workspace_bad;
  } else {
    v.workspace_bad[j] = workspace_bad | differing;
  }
  v.copy_bad[j] = copy_bad;
  stats_.verified_bytes += 2 * static_cast<std::uint64_t>(valid);
  stats_.verify_seconds += seconds_since(start);
}

void Protocol::verify_parity(Verified& v, std::int64_t epoch, std::uint64_t p) {
  if (!v.holdings.whole || p >= v.parity_done.size() || v.parity_done[p]) return;
  v.parity_done[p] = true;
  const auto start = std::chrono::steady_clock::now();
  const auto e = static_cast<std::uint64_t>(epoch);
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  v.parity_bad[p] = enc::mismatched_blocks(geometry, store_.checksum_of(e) + p * chunk, chunk,
                                           store_.digest_of(e).parity() + p * blocks) != 0;
  stats_.verified_bytes += chunk;
  stats_.verify_seconds += seconds_since(start);
}

void Protocol::verify_item(Verified& v, std::int64_t epoch, std::uint64_t row) {
  const enc::StripeGeometry& geometry = store_.geometry;
  if (const auto p = geometry.parity_index(store_.member, row)) {
    verify_parity(v, epoch, *p);
  } else if (const auto j = geometry.chunk_of_row(store_.member, row);
             j && *j < store_.workspace.size()) {
    verify_chunk(v, epoch, *j);
  }
}

bool Protocol::verify_ahead(Verified& v, std::int64_t epoch) {
  const std::uint64_t chunks = v.data_done.size();
  for (; v.ahead < chunks + v.parity_done.size(); ++v.ahead) {
    if (v.ahead < chunks) {
      if (v.data_done[v.ahead]) continue;
      verify_chunk(v, epoch, v.ahead);
    } else {
      if (v.parity_done[v.ahead - chunks]) continue;
      verify_parity(v, epoch, v.ahead - chunks);
    }
    return true;
  }
  return false;
}

void Protocol::end_verify(Verified& v, std::int64_t epoch) {
  if (!v.holdings.whole) return;
  for (std::uint64_t j = 0; j < v.data_done.size(); ++j)
    verify_chunk(v, epoch, j);
  for (std::uint64_t p = 0; p < v.parity_done.size(); ++p)
    verify_parity(v, epoch, p);
  const std::size_t size = store_.geometry.block_bytes();
  for (std::uint64_t j = 0; j < v.workspace_bad.size(); ++j) {
    const std::uint64_t lost = v.workspace_bad[j] & v.copy_bad[j];
    if (lost == 0) continue;
    if (v.holdings.data_erased.empty()) {
      const int first = std::countr_zero(lost);
      v.holdings.first_erased =
          store_.layout.describe(j, static_cast<std::size_t>(first) * size,
                                 std::min<std::size_t>(static_cast<std::size_t>(first + 1) * size,
                                                       store_.workspace.bytes[j]));
      v.holdings.first_erased_written = v.workspace_should_hold;
    }
    extend(v.holdings.data_erased, j);
  }
  for (std::uint64_t p = 0; p < v.parity_bad.size(); ++p) {
    if (v.parity_bad[p]) extend(v.holdings.parity_erased, p);
  }
}

void Protocol::mend(const Verified& v, std::int64_t epoch, const Progress& progress) {
  const auto& w = store_.workspace;
  const auto& b = store_.copy_of(static_cast<std::uint64_t>(epoch));
  const std::uint64_t n = w.size();
  for (std::uint64_t j = 0; j < n; ++j) {
    const std::uint64_t both = v.workspace_bad[j] & v.copy_bad[j];  // rebuilt by the group
    const std::uint64_t from_copy = v.workspace_bad[j] & ~both;
    const std::uint64_t from_workspace = v.copy_bad[j] & ~both;
    if (from_copy != 0) {
      stats_.restored_bytes +=
          copy_blocks(store_.geometry, b.data[j], w.data[j], w.bytes[j], from_copy);
      const auto n = static_cast<std::uint64_t>(std::popcount(from_copy));
      stats_.workspace_blocks_rolled_back += n;
      if (v.workspace_should_hold) stats_.workspace_blocks_overwritten += n;
    }
    if (from_workspace != 0) {
      stats_.restored_bytes +=
          copy_blocks(store_.geometry, w.data[j], b.data[j], w.bytes[j], from_workspace);
      stats_.copy_blocks_mended += static_cast<std::uint64_t>(std::popcount(from_workspace));
    }
    if (progress && (from_copy | from_workspace) != 0) progress(j + 1, n);
  }
}

void Protocol::take_rebuilt_data(std::uint64_t epoch, std::uint64_t j, bool crcs_derived) {
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto& w = store_.workspace;
  if (j >= w.size()) return;
  const auto start = std::chrono::steady_clock::now();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  if (w.bytes[j] > 0) std::memcpy(store_.copy_of(epoch).data[j], w.data[j], w.bytes[j]);
  if (!crcs_derived) {
    enc::chunk_crcs(geometry, w.data[j], w.bytes[j], geometry.block_mask(0, geometry.chunk_bytes),
                    store_.digest_of(epoch).data() + j * blocks);
  }
  ++stats_.chunks_rebuilt;
  stats_.rebuilt_bytes += w.bytes[j];
  stats_.restored_bytes += w.bytes[j];
  stats_.restore_seconds += seconds_since(start);
}

void Protocol::take_rebuilt_parity(std::uint64_t epoch, std::uint64_t p, bool crcs_derived) {
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto start = std::chrono::steady_clock::now();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
  if (!crcs_derived) {
    enc::chunk_crcs(geometry, store_.checksum_of(epoch) + p * chunk, chunk,
                    geometry.block_mask(0, geometry.chunk_bytes),
                    store_.digest_of(epoch).parity() + p * blocks);
  }
  ++stats_.chunks_rebuilt;
  stats_.rebuilt_bytes += chunk;
  stats_.restore_seconds += seconds_since(start);
}

void Protocol::take_rebuilt_item(std::uint64_t epoch, std::uint64_t row, Landed& landed,
                                 bool crcs_derived) {
  const enc::StripeGeometry& geometry = store_.geometry;
  if (const auto p = geometry.parity_index(store_.member, row)) {
    take_rebuilt_parity(epoch, *p, crcs_derived);
    landed.parity[*p] = true;
  } else if (const auto j = geometry.chunk_of_row(store_.member, row);
             j && *j < store_.workspace.size()) {
    take_rebuilt_data(epoch, *j, crcs_derived);
    landed.data[*j] = true;
  }
}

void Protocol::finish(const Verified& v, std::int64_t epoch, bool redo,
                      std::span<const enc::RowRepair> repairs, Landed& landed) {
  const auto e = static_cast<std::uint64_t>(epoch);
  const enc::StripeGeometry& geometry = store_.geometry;
  const DigestSlot slot = store_.digest_of(e);
  // What the group wrote into this rank goes into B too, and gets its CRCs (a sum rebuild is not
  // bit-exact, so they are computed afresh): items that landed in the group's rebuild have had
  // that done as they came, the rest (repaired rows above all) now.
  for (const auto& repair : repairs) {
    if (!std::binary_search(repair.erased.begin(), repair.erased.end(), store_.member)) continue;
    if (const auto p = geometry.parity_index(store_.member, repair.row)) {
      landed.parity[*p] = false;
    } else if (const auto j = geometry.chunk_of_row(store_.member, repair.row);
               j && *j < landed.data.size()) {
      landed.data[*j] = false;
    }
    if (v.holdings.whole) take_rebuilt_item(e, repair.row, landed, false);
  }
  if (!v.holdings.whole) {
    for (std::uint64_t j = 0; j < landed.data.size(); ++j)
      if (!landed.data[j]) take_rebuilt_data(e, j, false);
    for (std::uint64_t p = 0; p < landed.parity.size(); ++p)
      if (!landed.parity[p]) take_rebuilt_parity(e, p, false);
    slot.set(DigestState{epoch, true, true});
    return;
  }
  if (redo) {
    // The update of the only copy stopped half way: its checksum is encoded again, from data that
    // every rank now holds whole in W and B.
    const enc::Digests digests{nullptr, slot.parity()};
    stats_.sent_bytes =
        fx_.encode(store_.copy_of(e), store_.checksum_of(e), nullptr, digests, nullptr);
    slot.set(DigestState{epoch, true, true});
  }
}

Protocol::Landed Protocol::nothing_landed() const {
  return Landed{std::vector<bool>(store_.workspace.size(), false),
                std::vector<bool>(store_.geometry.parity_chunks(), false)};
}

void Protocol::add_group_work(const GroupWork& work, double verify_before, double restore_before) {
  stats_.fetch_seconds += work.transfer_seconds;
  // The rest of the operation's time, less what its hooks spent verifying and restoring.
  const double hooks =
      (stats_.verify_seconds - verify_before) + (stats_.restore_seconds - restore_before);
  stats_.decode_seconds += std::max(0.0, work.seconds - work.transfer_seconds - hooks);
}

// What the verification of the candidates chose.
struct Protocol::Choice {
  std::int64_t epoch = -1;
  bool redo = false;     // the single mode's copy was being updated: W holds the epoch
  bool rebuilt = false;  // the lost members came back as the newest candidate was verified
  Verified mine;
  Verdict verdict;
  Landed landed;
};

std::uint64_t Protocol::restore(const RestoreInputs& in) {
  try {
    enter(Phase::verifying);
    stats_ = ProtocolStats{};
    if (in.candidates.epochs.empty()) {
      state_ = ControlState{0, -1, 0, -1};
      fx_.write_control(state_);
      fx_.barrier();
      full_encode_needed_ = true;
      enter(Phase::idle);
      return 0;
    }
    if (!in.survivor) state_ = ControlState{};
    bool prepared = in.prepare == nullptr;
    const std::function<void()> prepare = [&] {
      if (!prepared) in.prepare();
      prepared = true;
    };
    Choice choice = choose_epoch(in, prepare);
    settle(in, choice, prepare);
    enter(Phase::idle);
    return static_cast<std::uint64_t>(choice.epoch);
  } catch (...) {
    phase_ = Phase::idle;
    throw;
  }
}

Protocol::Choice Protocol::choose_epoch(const RestoreInputs& in,
                                        const std::function<void()>& prepare) {
  const auto& epochs = in.candidates.epochs;
  Choice choice;
  choice.landed = nothing_landed();
  std::string reasons;
  for (std::size_t k = 0; k < epochs.size() && choice.epoch < 0; ++k) {
    const std::int64_t epoch = epochs[k];
    const bool redo_here = in.candidates.redo && k == 0;
    // The newest candidate is verified as the group rebuilds the members that hold nothing of it,
    // each item just before it is sent, and W is put right from B as it goes: W then holds what B
    // verifiably holds of that epoch, which no candidate needs otherwise (W holds nothing older).
    // Older candidates are verified first and settled once chosen.
    const bool streamed = k == 0 && !redo_here;
    Verified& mine = choice.mine;
    fx_.agree([&] { mine = in.survivor ? begin_verify(epoch, redo_here) : Verified{}; });
    if (streamed) {
      choice.rebuilt = verify_rebuilding(in, epoch, mine, choice.landed, prepare);
    } else {
      fx_.agree([&] { end_verify(mine, epoch); });
    }
    const auto all = fx_.gather(mine.holdings.serialize());
    std::vector<Holdings> holdings;
    for (const auto& bytes : all)
      holdings.push_back(Holdings::deserialize(bytes));
    choice.verdict = assess(in.groups, holdings, redo_here, epoch, in.nodes);
    if (choice.verdict.feasible) {
      choice.epoch = epoch;
      choice.redo = redo_here;
    } else {
      choice.rebuilt = false;
      choice.landed = nothing_landed();
      reasons +=
          fmt::format("{}epoch {}: {}", reasons.empty() ? "" : "; ", epoch, choice.verdict.reason);
    }
  }
  fx_.agree([&] {
    if (choice.epoch < 0) {
      throw Error(SKT_ERR_UNRECOVERABLE,
                  fmt::format("job '{}' cannot be recovered: {}.{} Start it again from the "
                              "beginning (skt-shm clean --job {})",
                              in.job, reasons,
                              in.candidates.redo
                                  ? " The single mode keeps one copy, which a checkpoint was "
                                    "overwriting when memory was lost; the self and double modes "
                                    "survive this."
                                  : "",
                              in.job));
    }
  });
  stats_.passed_over = reasons;
  return choice;
}

bool Protocol::verify_rebuilding(const RestoreInputs& in, std::int64_t epoch, Verified& mine,
                                 Landed& landed, const std::function<void()>& prepare) {
  const auto whole = fx_.gather(std::vector<std::byte>{std::byte{mine.holdings.whole}});
  const auto group = static_cast<std::size_t>(in.group);
  std::vector<std::vector<int>> lost(in.groups.size());
  bool within_tolerance = true;
  for (std::size_t g = 0; g < in.groups.size(); ++g) {
    const auto& ranks = in.groups[g].ranks;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (whole[static_cast<std::size_t>(ranks[i])].front() == std::byte{0})
        lost[g].push_back(static_cast<int>(i));
    }
    within_tolerance =
        within_tolerance && static_cast<int>(lost[g].size()) <= in.groups[g].tolerance;
  }
  // A job that lost more than a group tolerates is refused with its memory as it was.
  mine.settle = within_tolerance;
  const bool rebuilding = within_tolerance && !lost[group].empty();
  fx_.agree([&] {
    if (rebuilding) {
      prepare();
      const auto e = static_cast<std::uint64_t>(epoch);
      // Where the lost member's items are the XOR of their rows' other items (xor, or rs with
      // G = 2), so are its CRCs of the survivors': not a pass over what lands.
      const bool derive = lost[group].size() == 1 &&
                          enc::rebuilt_as_xor_of_the_others(*store_.codec, lost[group].front());
      const DigestSlot slot = store_.digest_of(e);
      const enc::Digests digests{slot.data(), slot.parity()};
      const enc::RebuildHooks hooks{
          [&](std::uint64_t row) { verify_item(mine, epoch, row); },
          [&](std::uint64_t row) { take_rebuilt_item(e, row, landed, derive); },
          [&] { return verify_ahead(mine, epoch); }, derive ? &digests : nullptr};
      const double verify_before = stats_.verify_seconds;
      const double restore_before = stats_.restore_seconds;
      add_group_work(fx_.rebuild(lost[group], {}, {}, store_.workspace, store_.checksum_of(e),
                                 fx_.midway(FaultStep::rebuild, e), &hooks),
                     verify_before, restore_before);
    }
    end_verify(mine, epoch);
  });
  return rebuilding;
}

void Protocol::settle(const RestoreInputs& in, Choice& choice,
                      const std::function<void()>& prepare) {
  const std::int64_t chosen = choice.epoch;
  const auto e = static_cast<std::uint64_t>(chosen);
  const Verified& mine = choice.mine;
  // Record the choice before anything is overwritten that an older epoch might need: a failure
  // from here on must lead the next recovery to the same epoch (its blocks only become more
  // available as the settling goes on).
  enter(Phase::settling);
  if (in.survivor && mode_ == Mode::self && state_.agreed < chosen) {
    state_.agreed = chosen;
    fx_.write_control(state_);
  }
  fx_.barrier();
  const auto group = static_cast<std::size_t>(in.group);
  const std::vector<int>& lost = choice.verdict.lost[group];
  const auto& repairs = choice.verdict.repairs[group];
  bool mending = false;
  for (std::size_t j = 0; j < mine.workspace_bad.size(); ++j)
    mending = mending || (mine.workspace_bad[j] | mine.copy_bad[j]) != 0;
  const bool group_work = (!lost.empty() && !choice.rebuilt) || !repairs.empty();
  const Progress progress = mending || group_work ? fx_.midway(FaultStep::recover, e) : Progress{};
  fx_.agree([&] {
    if (!mending && !group_work) fx_.fault(FaultStep::recover, e);
    if (in.survivor && mine.holdings.whole) {
      const auto start = std::chrono::steady_clock::now();
      mend(mine, chosen, progress);
      stats_.restore_seconds += seconds_since(start);
    }
  });

  enter(Phase::rebuilding);
  std::vector<std::uint64_t> skip;
  for (const auto& r : repairs)
    skip.push_back(r.row);
  fx_.agree([&] {
    prepare();
    if (!group_work) return;
    const double verify_before = stats_.verify_seconds;
    const double restore_before = stats_.restore_seconds;
    add_group_work(fx_.rebuild(choice.rebuilt ? std::vector<int>{} : lost, skip, repairs,
                               store_.workspace, store_.checksum_of(e), progress, nullptr),
                   verify_before, restore_before);
  });
  enter(Phase::finishing);
  fx_.agree([&] { finish(mine, chosen, choice.redo, repairs, choice.landed); });
  const std::int64_t cost = state_.checkpoint_nanoseconds;  // a survivor's, kept
  state_ = mode_ == Mode::self ? ControlState{chosen, chosen, chosen, -1}
                               : ControlState{chosen, chosen, -1, -1};
  state_.checkpoint_nanoseconds = cost;
  fx_.write_control(state_);
  fx_.barrier();
  const auto start = std::chrono::steady_clock::now();
  privates_.restore(store_.stage);
  stats_.restore_seconds += seconds_since(start);
  if (mode_ == Mode::self) {
    state_.resumed = chosen;
    fx_.write_control(state_);
  }
  // D may be stale on every rank: the first checkpoint after a recovery encodes in full.
  full_encode_needed_ = true;
}

}  // namespace skt
