#include "libselfckpt/src/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "encoders/copy.hpp"

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

std::int64_t nanoseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

}  // namespace

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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
    if (pieces[i].bytes > 0) enc::copy_uncached(pieces[i].to, pieces[i].from, pieces[i].bytes);
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

}  // namespace skt
