#include "libselfckpt/src/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

namespace skt {

namespace {

using Phase = Protocol::Phase;

bool allowed(Phase from, Phase to) {
  switch (to) {
    case Phase::idle:
      return true;  // done, or failed
    case Phase::staging:
    case Phase::verifying:
      return from == Phase::idle;
    case Phase::encoding:
      return from == Phase::staging;
    case Phase::encoded:
      return from == Phase::encoding;
    case Phase::agreed:
      return from == Phase::encoded;
    case Phase::flushing:
      return from == Phase::agreed;
    case Phase::committed:
      return from == Phase::flushing || from == Phase::encoded;
    case Phase::settling:
      return from == Phase::verifying;
    case Phase::rebuilding:
      return from == Phase::settling;
    case Phase::finishing:
      return from == Phase::rebuilding;
  }
  return false;
}

// Adds `x` to a list of ranges kept in ascending order.
void extend(std::vector<ChunkRange>& ranges, std::uint64_t x) {
  if (!ranges.empty() && ranges.back().end == x) {
    ++ranges.back().end;
  } else {
    ranges.push_back({x, x + 1});
  }
}

// Copies the blocks of `mask` of one chunk from `from` into `to` (its valid bytes only).
std::uint64_t copy_blocks(const enc::StripeGeometry& geometry, const std::byte* from, std::byte* to,
                          std::uint32_t valid, std::uint64_t mask) {
  std::uint64_t copied = 0;
  for (const auto& run : geometry.segments(mask, mask)) {
    const std::size_t end = std::min<std::size_t>(run.end, valid);
    if (run.begin >= end) continue;
    std::memcpy(to + run.begin, from + run.begin, end - run.begin);
    copied += end - run.begin;
  }
  return copied;
}

}  // namespace

const char* phase_name(Protocol::Phase phase) noexcept {
  switch (phase) {
    case Phase::idle:
      return "idle";
    case Phase::staging:
      return "staging";
    case Phase::encoding:
      return "encoding";
    case Phase::encoded:
      return "encoded";
    case Phase::agreed:
      return "agreed";
    case Phase::flushing:
      return "flushing";
    case Phase::committed:
      return "committed";
    case Phase::verifying:
      return "verifying";
    case Phase::settling:
      return "settling";
    case Phase::rebuilding:
      return "rebuilding";
    case Phase::finishing:
      return "finishing";
  }
  return "?";
}

DigestSlot RankStore::digest_of(std::uint64_t epoch) const {
  return DigestSlot{checkpoint + areas.digest_offset(epoch), layout.chunks,
                    geometry.parity_chunks(), geometry.blocks_per_chunk()};
}

std::vector<Piece> block_pieces(const enc::StripeGeometry& geometry, const enc::ChunkList& from,
                                const enc::ChunkList& to,
                                const std::vector<std::uint64_t>* changed) {
  std::vector<Piece> pieces;
  for (std::uint64_t j = 0; j < from.size(); ++j) {
    const std::uint32_t valid = from.bytes[j];
    if (valid == 0) continue;
    if (changed == nullptr) {
      pieces.push_back({to.data[j], from.data[j], valid});
      continue;
    }
    for (const auto& run : geometry.segments((*changed)[j], (*changed)[j])) {
      const std::size_t end = std::min<std::size_t>(run.end, valid);
      if (run.begin < end) {
        pieces.push_back({to.data[j] + run.begin, from.data[j] + run.begin, end - run.begin});
      }
    }
  }
  return pieces;
}

std::uint64_t copy_pieces(const std::vector<Piece>& pieces, const Progress& progress) {
  const std::uint64_t n = pieces.size();
  std::uint64_t bytes = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (pieces[i].bytes > 0) std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes);
    bytes += pieces[i].bytes;
    if (progress) progress(i + 1, n);
  }
  return bytes;
}

Protocol::Protocol(Mode mode, Effects& effects, RankStore& store, PrivateObjects privates,
                   ControlState state)
    : mode_(mode), fx_(effects), store_(store), privates_(std::move(privates)), state_(state) {}

void Protocol::enter(Phase next) {
  if (!allowed(phase_, next)) {
    throw Error(SKT_ERR_INTERNAL,
                fmt::format("protocol: {} cannot follow {}", phase_name(next), phase_name(phase_)));
  }
  phase_ = next;
}

bool Protocol::encodes_incrementally() const noexcept {
  // A group of one keeps no checksum: only its copy B and the digests change, block by block.
  return mode_ == Mode::self && !full_encode_needed_ &&
         (store_.codec == nullptr || store_.codec->exact());
}

void Protocol::checkpoint(std::uint64_t next, const std::vector<std::uint64_t>* changed) {
  try {
    if (mode_ == Mode::self) {
      checkpoint_self(next, changed);
    } else {
      checkpoint_copies(next);
    }
  } catch (...) {
    phase_ = Phase::idle;
    throw;
  }
  enter(Phase::idle);
}

void Protocol::checkpoint_self(std::uint64_t next, const std::vector<std::uint64_t>* changed) {
  const auto target = static_cast<std::int64_t>(next);
  const enc::StripeGeometry& geometry = store_.geometry;
  const bool incremental = changed != nullptr && encodes_incrementally();
  // Until this checkpoint completes, what D holds is not what parity_written_ says: a retry after
  // a failure encodes in full.
  full_encode_needed_ = true;
  const DigestSlot before = store_.digest_of(next - 1);
  const DigestSlot slot = store_.digest_of(next);                    // over epoch next-2's
  std::byte* const committed_parity = store_.checksum_of(next - 1);  // C
  std::byte* const parity = store_.checksum_of(next);                // D, over epoch next-2's
  const enc::ChunkList& copy = store_.copy_of(next);
  stats_ = ProtocolStats{};

  enter(Phase::staging);
  fx_.agree([&] {
    privates_.stage(store_.stage, fx_.midway(FaultStep::stage, next));
    slot.clear();
  });
  enc::RowMasks rows;
  if (incremental) rows = fx_.row_masks(store_.workspace, *changed);

  enter(Phase::encoding);
  fx_.agree([&] {
    const enc::Digests digests{slot.data(), slot.parity()};
    const Progress progress = fx_.midway(FaultStep::encode, next);
    const std::uint64_t parity_chunks = geometry.parity_chunks();
    const std::size_t chunk = geometry.chunk_bytes;
    if (incremental) {
      // The blocks that do not change keep the last epoch's CRCs, data and checksum alike.
      std::memcpy(
          slot.data(), before.data(),
          DigestSlot::bytes(slot.chunks, slot.parity_chunks, slot.blocks) - kDigestHeaderBytes);
      const enc::Incremental inc{&copy, committed_parity, changed, &rows};
      stats_.sent_bytes = fx_.encode(store_.workspace, parity, &inc, digests, progress);
      // The blocks the last checkpoint rewrote and this one did not still hold epoch next-2's
      // checksum in D: they take C's.
      for (std::uint64_t p = 0; p < parity_chunks; ++p) {
        const std::uint64_t row = geometry.parity_row(store_.member, p);
        const std::uint64_t stale = parity_written_[p] & ~rows.any[row];
        stats_.flushed_bytes +=
            copy_blocks(geometry, committed_parity + p * chunk, parity + p * chunk,
                        static_cast<std::uint32_t>(chunk), stale);
        parity_written_[p] = rows.any[row];
      }
    } else {
      stats_.sent_bytes = fx_.encode(store_.workspace, parity, nullptr, digests, progress);
      parity_written_.assign(parity_chunks, geometry.block_mask(0, chunk));
    }
    slot.set(DigestState{target, true, true});
    state_.encoded = target;
    fx_.write_control(state_);
    fx_.fault(FaultStep::encoded, next);
  });
  enter(Phase::encoded);

  // Every rank has a complete D for the next epoch: B may now be overwritten. D stays where it
  // is and becomes C when the epoch is committed.
  enter(Phase::agreed);
  state_.agreed = target;
  fx_.write_control(state_);
  fx_.fault(FaultStep::agreed, next);

  enter(Phase::flushing);
  stats_.flushed_bytes +=
      copy_pieces(block_pieces(geometry, store_.workspace, copy, incremental ? changed : nullptr),
                  fx_.midway(FaultStep::flush, next));
  enter(Phase::committed);
  state_.committed = target;
  fx_.write_control(state_);
  fx_.fault(FaultStep::committed, next);

  // The last agreement: every rank committed, so none will need the epoch before.
  fx_.barrier();
  state_.resumed = target;
  fx_.write_control(state_);
  full_encode_needed_ = false;
}

void Protocol::checkpoint_copies(std::uint64_t next) {
  const auto target = static_cast<std::int64_t>(next);
  const bool single = mode_ == Mode::single;
  const enc::ChunkList& copy = store_.copy_of(next);
  const DigestSlot slot = store_.digest_of(next);
  stats_ = ProtocolStats{};

  enter(Phase::staging);
  fx_.agree([&] {
    privates_.stage(store_.stage, fx_.midway(FaultStep::stage, next));
    slot.clear();
    if (single) {
      // The only copy is about to be overwritten: the digest of W comes first, so that an update
      // interrupted with no memory lost can be finished from the workspaces, verified. The
      // agreement that ends this step also makes every rank stage before any overwrites its copy.
      const auto& w = store_.workspace;
      const auto blocks = static_cast<std::uint64_t>(store_.geometry.blocks_per_chunk());
      const std::uint64_t all = store_.geometry.block_mask(0, store_.geometry.chunk_bytes);
      for (std::uint64_t j = 0; j < w.size(); ++j)
        enc::chunk_crcs(store_.geometry, w.data[j], w.bytes[j], all, slot.data() + j * blocks);
      slot.set(DigestState{target, true, false});
    }
  });

  enter(Phase::encoding);
  fx_.agree([&] {
    state_.encoded = target;  // the copy of `next` is being written
    fx_.write_control(state_);
    stats_.flushed_bytes =
        copy_pieces(block_pieces(store_.geometry, store_.workspace, copy, nullptr),
                    fx_.midway(FaultStep::flush, next));
    const enc::Digests digests{single ? nullptr : slot.data(), slot.parity()};
    stats_.sent_bytes = fx_.encode(copy, store_.checksum_of(next), nullptr, digests,
                                   fx_.midway(FaultStep::encode, next));
    slot.set(DigestState{target, true, true});
    fx_.fault(FaultStep::encoded, next);
  });
  enter(Phase::encoded);
  enter(Phase::committed);
  state_.committed = target;
  fx_.write_control(state_);
  fx_.fault(FaultStep::committed, next);
  fx_.barrier();
}

struct Protocol::Verified {
  Holdings holdings;
  // Whether W still held the epoch when the job stopped: the rank had not returned to the
  // program since encoding it (it was inside the checkpoint call, or an update of its only copy
  // was under way). W blocks that then differ were written after the failure, before
  // skt_recover.
  bool workspace_should_hold = false;
  std::vector<std::uint64_t> workspace_bad;  // per chunk: W blocks that do not match the digest
  std::vector<std::uint64_t> copy_bad;       // per chunk: B blocks that do not match
};

Protocol::Verified Protocol::verify(std::int64_t epoch, bool redo) const {
  Verified v;
  const auto e = static_cast<std::uint64_t>(epoch);
  const enc::StripeGeometry& geometry = store_.geometry;
  const bool with_parity = !redo && store_.codec != nullptr;
  const DigestSlot slot = store_.digest_of(e);
  if (!slot.holds(epoch, with_parity)) return v;  // nothing of this epoch: as if lost
  v.holdings.whole = true;
  v.workspace_should_hold =
      state_.committed < epoch || (mode_ == Mode::self && state_.resumed < epoch);
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const auto& w = store_.workspace;
  const auto& b = store_.copy_of(e);
  v.workspace_bad.assign(w.size(), 0);
  v.copy_bad.assign(w.size(), 0);
  for (std::uint64_t j = 0; j < w.size(); ++j) {
    const std::uint32_t* want = slot.data() + j * blocks;
    v.workspace_bad[j] = enc::mismatched_blocks(geometry, w.data[j], w.bytes[j], want);
    v.copy_bad[j] = enc::mismatched_blocks(geometry, b.data[j], b.bytes[j], want);
    const std::uint64_t lost = v.workspace_bad[j] & v.copy_bad[j];
    if (v.workspace_should_hold) {
      v.holdings.written_blocks +=
          static_cast<std::uint64_t>(std::popcount(v.workspace_bad[j] & ~v.copy_bad[j]));
    }
    if (lost == 0) continue;
    if (v.holdings.data_erased.empty()) {
      const int first = std::countr_zero(lost);
      const std::size_t size = geometry.block_bytes();
      v.holdings.first_erased = store_.layout.describe(
          j, static_cast<std::size_t>(first) * size,
          std::min<std::size_t>(static_cast<std::size_t>(first + 1) * size, w.bytes[j]));
      v.holdings.first_erased_written = v.workspace_should_hold;
    }
    extend(v.holdings.data_erased, j);
  }
  if (with_parity) {
    const std::byte* parity = store_.checksum_of(e);
    const std::uint64_t chunks = geometry.parity_chunks();
    const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
    for (std::uint64_t p = 0; p < chunks; ++p) {
      if (enc::mismatched_blocks(geometry, parity + p * chunk, chunk, slot.parity() + p * blocks) !=
          0) {
        extend(v.holdings.parity_erased, p);
      }
    }
  }
  return v;
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
      copy_blocks(store_.geometry, b.data[j], w.data[j], w.bytes[j], from_copy);
      const auto n = static_cast<std::uint64_t>(std::popcount(from_copy));
      stats_.workspace_blocks_rolled_back += n;
      if (v.workspace_should_hold) stats_.workspace_blocks_overwritten += n;
    }
    if (from_workspace != 0) {
      copy_blocks(store_.geometry, w.data[j], b.data[j], w.bytes[j], from_workspace);
      stats_.copy_blocks_mended += static_cast<std::uint64_t>(std::popcount(from_workspace));
    }
    if (progress && (from_copy | from_workspace) != 0) progress(j + 1, n);
  }
}

void Protocol::finish(const Verified& v, std::int64_t epoch, bool redo,
                      std::span<const enc::RowRepair> repairs) {
  const auto e = static_cast<std::uint64_t>(epoch);
  const enc::StripeGeometry& geometry = store_.geometry;
  const DigestSlot slot = store_.digest_of(e);
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const std::uint64_t all = geometry.block_mask(0, geometry.chunk_bytes);
  const auto& w = store_.workspace;
  const auto& b = store_.copy_of(e);
  const bool whole_rank_lost = !v.holdings.whole;
  std::byte* const parity = store_.checksum_of(e);
  const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
  // What the group wrote into this rank goes into B too, and gets its CRCs (a sum rebuild is not
  // bit-exact, so they are computed afresh).
  auto rebuilt_data = [&](std::uint64_t j) {
    if (j >= w.size()) return;
    if (w.bytes[j] > 0) std::memcpy(b.data[j], w.data[j], w.bytes[j]);
    enc::chunk_crcs(geometry, w.data[j], w.bytes[j], all, slot.data() + j * blocks);
    ++stats_.chunks_rebuilt;
  };
  auto rebuilt_parity = [&](std::uint64_t p) {
    enc::chunk_crcs(geometry, parity + p * chunk, chunk, all, slot.parity() + p * blocks);
    ++stats_.chunks_rebuilt;
  };
  if (whole_rank_lost) {
    for (std::uint64_t j = 0; j < w.size(); ++j)
      rebuilt_data(j);
    for (std::uint64_t p = 0; p < geometry.parity_chunks(); ++p)
      rebuilt_parity(p);
    slot.set(DigestState{epoch, true, true});
    return;
  }
  for (const auto& repair : repairs) {
    if (!std::binary_search(repair.erased.begin(), repair.erased.end(), store_.member)) continue;
    if (const auto p = geometry.parity_index(store_.member, repair.row)) {
      rebuilt_parity(*p);
    } else {
      rebuilt_data(*geometry.chunk_of_row(store_.member, repair.row));
    }
  }
  if (redo) {
    // The update of the only copy stopped half way: its checksum is encoded again, from data that
    // every rank now holds whole in W and B.
    const enc::Digests digests{nullptr, slot.parity()};
    stats_.sent_bytes = fx_.encode(b, parity, nullptr, digests, nullptr);
    slot.set(DigestState{epoch, true, true});
  }
}

std::uint64_t Protocol::restore(const RestoreInputs& in) {
  try {
    enter(Phase::verifying);
    stats_ = ProtocolStats{};
    const auto& epochs = in.candidates.epochs;
    if (epochs.empty()) {
      state_ = ControlState{0, -1, 0, -1};
      fx_.write_control(state_);
      fx_.barrier();
      full_encode_needed_ = true;
      enter(Phase::idle);
      return 0;
    }
    if (!in.survivor) state_ = ControlState{};
    Verified mine;
    Verdict verdict;
    std::int64_t chosen = -1;
    bool redo = false;
    std::string reasons;
    for (std::size_t k = 0; k < epochs.size() && chosen < 0; ++k) {
      const std::int64_t epoch = epochs[k];
      const bool redo_here = in.candidates.redo && k == 0;
      fx_.agree([&] {
        const auto start = std::chrono::steady_clock::now();
        mine = in.survivor ? verify(epoch, redo_here) : Verified{};
        stats_.verify_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
      const auto all = fx_.gather(mine.holdings.serialize());
      std::vector<Holdings> holdings;
      for (const auto& bytes : all)
        holdings.push_back(Holdings::deserialize(bytes));
      verdict = assess(in.groups, holdings, redo_here, epoch, in.nodes);
      if (verdict.feasible) {
        chosen = epoch;
        redo = redo_here;
      } else {
        reasons +=
            fmt::format("{}epoch {}: {}", reasons.empty() ? "" : "; ", epoch, verdict.reason);
      }
    }
    fx_.agree([&] {
      if (chosen < 0) {
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
    const auto e = static_cast<std::uint64_t>(chosen);

    // Record the choice before anything is overwritten: a failure from here on must lead the next
    // recovery to the same epoch (its blocks only become more available as the settling goes on).
    enter(Phase::settling);
    if (in.survivor && mode_ == Mode::self && state_.agreed < chosen) {
      state_.agreed = chosen;
      fx_.write_control(state_);
    }
    fx_.barrier();
    const auto group = static_cast<std::size_t>(in.group);
    const std::vector<int>& lost = verdict.lost[group];
    const auto& repairs = verdict.repairs[group];
    bool mending = false;
    for (std::size_t j = 0; j < mine.workspace_bad.size(); ++j)
      mending = mending || (mine.workspace_bad[j] | mine.copy_bad[j]) != 0;
    const bool group_work = !lost.empty() || !repairs.empty();
    const Progress progress =
        mending || group_work ? fx_.midway(FaultStep::recover, e) : Progress{};
    fx_.agree([&] {
      if (!mending && !group_work) fx_.fault(FaultStep::recover, e);
      if (in.survivor && mine.holdings.whole) mend(mine, chosen, progress);
    });

    enter(Phase::rebuilding);
    std::vector<std::uint64_t> skip;
    for (const auto& r : repairs)
      skip.push_back(r.row);
    fx_.agree([&] {
      if (group_work) {
        fx_.rebuild(lost, skip, repairs, store_.workspace, store_.checksum_of(e), progress);
      }
    });
    enter(Phase::finishing);
    fx_.agree([&] { finish(mine, chosen, redo, repairs); });
    state_ = mode_ == Mode::self ? ControlState{chosen, chosen, chosen, -1}
                                 : ControlState{chosen, chosen, -1, -1};
    fx_.write_control(state_);
    fx_.barrier();
    privates_.restore(store_.stage);
    if (mode_ == Mode::self) {
      state_.resumed = chosen;
      fx_.write_control(state_);
    }
    // D may be stale on every rank: the first checkpoint after a recovery encodes in full.
    full_encode_needed_ = true;
    enter(Phase::idle);
    return e;
  } catch (...) {
    phase_ = Phase::idle;
    throw;
  }
}

}  // namespace skt
