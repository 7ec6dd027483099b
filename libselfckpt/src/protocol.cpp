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

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::int64_t nanoseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
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

void finish_job(Effects& effects, Protocol* protocol, std::uint64_t epoch) {
  effects.barrier();
  if (protocol != nullptr) protocol->record_finished(epoch);
  effects.barrier();
  effects.fault(FaultStep::finalize, epoch);
}

void Protocol::record_finished(std::uint64_t epoch) {
  state_.finished = static_cast<std::int64_t>(epoch);
  fx_.write_control(state_);
}

void Protocol::checkpoint(std::uint64_t next, const std::vector<std::uint64_t>* changed) {
  started_ = std::chrono::steady_clock::now();
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
    const auto start = std::chrono::steady_clock::now();
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
    stats_.encode_seconds = seconds_since(start);
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
  const auto flushing = std::chrono::steady_clock::now();
  stats_.flushed_bytes +=
      copy_pieces(block_pieces(geometry, store_.workspace, copy, incremental ? changed : nullptr),
                  fx_.midway(FaultStep::flush, next));
  stats_.flush_seconds = seconds_since(flushing);
  enter(Phase::committed);
  state_.committed = target;
  fx_.write_control(state_);
  fx_.fault(FaultStep::committed, next);

  // The last agreement: every rank committed, so none will need the epoch before.
  fx_.barrier();
  state_.resumed = target;
  state_.checkpoint_nanoseconds = nanoseconds_since(started_);
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
  state_.checkpoint_nanoseconds = nanoseconds_since(started_);
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

void Protocol::take_rebuilt_data(std::uint64_t epoch, std::uint64_t j) {
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto& w = store_.workspace;
  if (j >= w.size()) return;
  const auto start = std::chrono::steady_clock::now();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  if (w.bytes[j] > 0) std::memcpy(store_.copy_of(epoch).data[j], w.data[j], w.bytes[j]);
  enc::chunk_crcs(geometry, w.data[j], w.bytes[j], geometry.block_mask(0, geometry.chunk_bytes),
                  store_.digest_of(epoch).data() + j * blocks);
  ++stats_.chunks_rebuilt;
  stats_.rebuilt_bytes += w.bytes[j];
  stats_.restored_bytes += w.bytes[j];
  stats_.restore_seconds += seconds_since(start);
}

void Protocol::take_rebuilt_parity(std::uint64_t epoch, std::uint64_t p) {
  const enc::StripeGeometry& geometry = store_.geometry;
  const auto start = std::chrono::steady_clock::now();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
  enc::chunk_crcs(geometry, store_.checksum_of(epoch) + p * chunk, chunk,
                  geometry.block_mask(0, geometry.chunk_bytes),
                  store_.digest_of(epoch).parity() + p * blocks);
  ++stats_.chunks_rebuilt;
  stats_.rebuilt_bytes += chunk;
  stats_.restore_seconds += seconds_since(start);
}

void Protocol::take_rebuilt_item(std::uint64_t epoch, std::uint64_t row, Landed& landed) {
  const enc::StripeGeometry& geometry = store_.geometry;
  if (const auto p = geometry.parity_index(store_.member, row)) {
    take_rebuilt_parity(epoch, *p);
    landed.parity[*p] = true;
  } else if (const auto j = geometry.chunk_of_row(store_.member, row);
             j && *j < store_.workspace.size()) {
    take_rebuilt_data(epoch, *j);
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
    if (v.holdings.whole) take_rebuilt_item(e, repair.row, landed);
  }
  if (!v.holdings.whole) {
    for (std::uint64_t j = 0; j < landed.data.size(); ++j)
      if (!landed.data[j]) take_rebuilt_data(e, j);
    for (std::uint64_t p = 0; p < landed.parity.size(); ++p)
      if (!landed.parity[p]) take_rebuilt_parity(e, p);
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
    bool prepared = in.prepare == nullptr;
    const auto prepare = [&] {
      if (!prepared) in.prepare();
      prepared = true;
    };
    const auto group = static_cast<std::size_t>(in.group);
    Verified mine;
    Verdict verdict;
    Landed landed = nothing_landed();
    std::int64_t chosen = -1;
    bool redo = false;
    bool rebuilt = false;  // the lost members came back as the newest candidate was verified
    std::string reasons;
    for (std::size_t k = 0; k < epochs.size() && chosen < 0; ++k) {
      const std::int64_t epoch = epochs[k];
      const bool redo_here = in.candidates.redo && k == 0;
      // The newest candidate is verified as the group rebuilds the members that hold nothing of
      // it, each item just before it is sent, and W is put right from B as it goes: W then holds
      // what B verifiably holds of that epoch, which no candidate needs otherwise (W holds nothing
      // older). Older candidates are verified first and settled once chosen.
      const bool streamed = k == 0 && !redo_here;
      fx_.agree([&] { mine = in.survivor ? begin_verify(epoch, redo_here) : Verified{}; });
      if (streamed) {
        const auto whole = fx_.gather(std::vector<std::byte>{std::byte{mine.holdings.whole}});
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
            const enc::RebuildHooks hooks{[&](std::uint64_t row) { verify_item(mine, epoch, row); },
                                          [&](std::uint64_t row) {
                                            take_rebuilt_item(static_cast<std::uint64_t>(epoch),
                                                              row, landed);
                                          },
                                          [&] { return verify_ahead(mine, epoch); }};
            const double verify_before = stats_.verify_seconds;
            const double restore_before = stats_.restore_seconds;
            add_group_work(
                fx_.rebuild(lost[group], {}, {}, store_.workspace,
                            store_.checksum_of(static_cast<std::uint64_t>(epoch)),
                            fx_.midway(FaultStep::rebuild, static_cast<std::uint64_t>(epoch)),
                            &hooks),
                verify_before, restore_before);
          }
          end_verify(mine, epoch);
        });
        rebuilt = rebuilding;
      } else {
        fx_.agree([&] { end_verify(mine, epoch); });
      }
      const auto all = fx_.gather(mine.holdings.serialize());
      std::vector<Holdings> holdings;
      for (const auto& bytes : all)
        holdings.push_back(Holdings::deserialize(bytes));
      verdict = assess(in.groups, holdings, redo_here, epoch, in.nodes);
      if (verdict.feasible) {
        chosen = epoch;
        redo = redo_here;
      } else {
        rebuilt = false;
        landed = nothing_landed();
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

    // Record the choice before anything is overwritten that an older epoch might need: a failure
    // from here on must lead the next recovery to the same epoch (its blocks only become more
    // available as the settling goes on).
    enter(Phase::settling);
    if (in.survivor && mode_ == Mode::self && state_.agreed < chosen) {
      state_.agreed = chosen;
      fx_.write_control(state_);
    }
    fx_.barrier();
    const std::vector<int>& lost = verdict.lost[group];
    const auto& repairs = verdict.repairs[group];
    bool mending = false;
    for (std::size_t j = 0; j < mine.workspace_bad.size(); ++j)
      mending = mending || (mine.workspace_bad[j] | mine.copy_bad[j]) != 0;
    const bool group_work = (!lost.empty() && !rebuilt) || !repairs.empty();
    const Progress progress =
        mending || group_work ? fx_.midway(FaultStep::recover, e) : Progress{};
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
      add_group_work(fx_.rebuild(rebuilt ? std::vector<int>{} : lost, skip, repairs,
                                 store_.workspace, store_.checksum_of(e), progress, nullptr),
                     verify_before, restore_before);
    });
    enter(Phase::finishing);
    fx_.agree([&] { finish(mine, chosen, redo, repairs, landed); });
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
    enter(Phase::idle);
    return e;
  } catch (...) {
    phase_ = Phase::idle;
    throw;
  }
}

}  // namespace skt
