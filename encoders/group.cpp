#include "encoders/group.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "common/mpi.hpp"
#include "encoders/exchange.hpp"

namespace skt::enc {

namespace {

int wrap(int value, int modulus) {
  return ((value % modulus) + modulus) % modulus;
}

// The CRC of a block of zeros at each position of a chunk: what an item past the end of a stream
// contributes to its row, and the seed's term when a row's CRCs are combined.
std::vector<std::uint32_t> zero_block_crcs(const StripeGeometry& geometry) {
  std::vector<std::uint32_t> zero(static_cast<std::size_t>(geometry.blocks_per_chunk()));
  for (std::size_t b = 0; b < zero.size(); ++b)
    zero[b] = block_crc(geometry, nullptr, 0, static_cast<int>(b));
  return zero;
}

// Requests in flight, abandoned if the operation unwinds (a member failed): none is left to
// write into memory that is gone.
struct Transfers {
  std::vector<MPI_Request> receives;
  std::vector<MPI_Request> sends;
  Transfers() = default;
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;
  ~Transfers() {
    GroupLink::abandon_receives(receives.data(), static_cast<int>(receives.size()));
    GroupLink::abandon_sends(sends.data(), static_cast<int>(sends.size()));
  }

  // CRC lists go between members as arrays of 32-bit words.
  void receive_crcs(GroupLink& link, std::uint32_t* into, std::size_t count, int peer, int tag) {
    receives.push_back(MPI_REQUEST_NULL);
    SKT_MPI(MPI_Irecv(into, static_cast<int>(count), MPI_UINT32_T, peer, tag, link.comm(),
                      &receives.back()));
  }
  void send_crcs(GroupLink& link, const std::uint32_t* from, std::size_t count, int peer, int tag) {
    sends.push_back(MPI_REQUEST_NULL);
    SKT_MPI(MPI_Isend(from, static_cast<int>(count), MPI_UINT32_T, peer, tag, link.comm(),
                      &sends.back()));
  }
  void wait_receives(GroupLink& link) {
    link.wait_all(static_cast<int>(receives.size()), receives.data(), nullptr);
  }
  void wait_sends(GroupLink& link) {
    link.wait_all(static_cast<int>(sends.size()), sends.data(), nullptr);
  }
};

// What one member adds to one item of a row: `bytes` bytes at `data` (the rest zero), times coef;
// with a base, the change coef·(data - base) instead.
struct Piece {
  const std::byte* data = nullptr;
  std::uint32_t bytes = 0;
  Coef coef = 0;
  const std::byte* base = nullptr;

  bool empty() const noexcept { return data == nullptr || bytes == 0 || coef == 0; }
};

// Sends piece·coef as a full chunk: straight from memory when it already is one, else through a
// buffer (scaled, zero-padded).
void send_piece(Exchange& ex, const Codec& codec, const Piece& piece, std::size_t chunk, int dest,
                bool direct) {
  if (piece.empty()) {
    ex.send(dest, direct, ex.zeros());
  } else if (piece.bytes == chunk && piece.coef == Codec::identity && piece.base == nullptr) {
    ex.send(dest, direct, piece.data);
  } else {
    const int out = ex.acquire();
    if (piece.base != nullptr) {
      codec.combine_delta(ex.buffer(out), ex.zeros(), piece.data, piece.base, piece.bytes,
                          piece.coef);
    } else {
      codec.scale(ex.buffer(out), piece.data, piece.bytes, piece.coef);
    }
    std::memset(ex.buffer(out) + piece.bytes, 0, chunk - piece.bytes);
    ex.send_buffer(dest, direct, out);
  }
}

// Adds piece·coef to a received partial result and passes it on.
void forward_piece(Exchange& ex, const Codec& codec, const Piece& piece, std::size_t chunk,
                   int incoming, int dest, bool direct) {
  if (piece.empty()) {
    ex.send_buffer(dest, direct, incoming);
    return;
  }
  const int out = ex.acquire();
  if (piece.base != nullptr) {
    codec.combine_delta(ex.buffer(out), ex.buffer(incoming), piece.data, piece.base, piece.bytes,
                        piece.coef);
  } else {
    codec.combine(ex.buffer(out), ex.buffer(incoming), piece.data, piece.bytes, piece.coef);
  }
  if (piece.bytes < chunk) {
    std::memcpy(ex.buffer(out) + piece.bytes, ex.buffer(incoming) + piece.bytes,
                chunk - piece.bytes);
  }
  ex.release(incoming);
  ex.send_buffer(dest, direct, out);
}

void report(const PipelineOptions& options, std::uint64_t done, std::uint64_t total) {
  if (options.progress) options.progress(done, total);
}

}  // namespace

ScratchPool::~ScratchPool() {
  for (auto& b : blocks_)
    std::free(b.data);
  for (auto* p : retired_)
    std::free(p);
}

std::byte* ScratchPool::get(int slot, std::size_t bytes) {
  const auto i = static_cast<std::size_t>(slot);
  if (blocks_.size() <= i) blocks_.resize(i + 1);
  Block& b = blocks_[i];
  if (b.bytes < bytes) {
    if (b.data != nullptr) retired_.push_back(b.data);
    b = Block{};
    const std::size_t rounded = (std::max<std::size_t>(bytes, 64) + 63) / 64 * 64;
    b.data = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
    if (b.data == nullptr) throw std::bad_alloc();
    b.bytes = rounded;
  }
  return b.data;
}

namespace {

// The requests of one period, completed together.
struct PeriodTransfers {
  std::vector<MPI_Request> receives;
  std::vector<MPI_Request> sends;
  // Per receive: the buffer and the ranges of it that it may fill, in order (the rest of them is
  // zero-filled).
  std::vector<std::pair<std::byte*, ByteRanges>> received_into;
  // Outstanding only when an error or a member's abort unwinds the encoding.
  ~PeriodTransfers() {
    GroupLink::abandon_receives(receives.data(), static_cast<int>(receives.size()));
    GroupLink::abandon_sends(sends.data(), static_cast<int>(sends.size()));
  }
};

}  // namespace

RowMasks agree_row_masks(MPI_Comm group, const StripeGeometry& geometry, const ChunkList& mine,
                         const std::vector<std::uint64_t>& changed) {
  int me = 0;
  SKT_MPI(MPI_Comm_rank(group, &me));
  const std::uint64_t rows = geometry.rows;
  // One reduction: the changed blocks, and the blocks each member did not change (the complement
  // of `all` is the union of those).
  std::vector<std::uint64_t> masks(2 * rows, 0);
  for (std::uint64_t row = 0; row < rows; ++row) {
    const auto j = geometry.chunk_of_row(me, row);
    if (!j || *j >= mine.size()) continue;
    const std::size_t block = geometry.block_bytes();
    const std::uint64_t past_end =
        geometry.block_mask((mine.bytes[*j] + block - 1) / block * block, geometry.chunk_bytes);
    const std::uint64_t valid_blocks = geometry.block_mask(0, geometry.chunk_bytes);
    masks[row] = changed[*j] & ~past_end;
    masks[rows + row] = valid_blocks & ~(changed[*j] | past_end);
  }
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, masks.data(), static_cast<int>(masks.size()), MPI_UINT64_T,
                        MPI_BOR, group));
  RowMasks out;
  out.any.assign(masks.begin(), masks.begin() + static_cast<std::ptrdiff_t>(rows));
  out.all.resize(rows);
  for (std::uint64_t row = 0; row < rows; ++row)
    out.all[row] = ~masks[rows + row];
  return out;
}

void combine_parity_crcs(GroupLink& link, const StripeGeometry& geometry,
                         std::span<const std::uint64_t> counts, const std::uint32_t* data,
                         std::uint32_t* parity) {
  const int g = geometry.group_size;
  const int me = link.rank();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  // Every member's data CRCs, all of them: 4 bytes per block, a thousandth of the data.
  std::vector<std::vector<std::uint32_t>> crcs(static_cast<std::size_t>(g));
  Transfers transfers;
  constexpr int kCrcTag = 0x5e4;
  const std::uint64_t mine = counts[static_cast<std::size_t>(me)] * blocks;
  for (int d = 0; d < g; ++d) {
    if (d == me) continue;
    auto& list = crcs[static_cast<std::size_t>(d)];
    list.resize(counts[static_cast<std::size_t>(d)] * blocks);
    transfers.receive_crcs(link, list.data(), list.size(), d, kCrcTag);
    transfers.send_crcs(link, data, mine, d, kCrcTag);
  }
  crcs[static_cast<std::size_t>(me)].assign(data, data + mine);
  transfers.wait_receives(link);
  const std::vector<std::uint32_t> zero = zero_block_crcs(geometry);
  const int k = geometry.data_width();
  for (std::uint64_t p = 0; p < geometry.parity_chunks(); ++p) {
    const std::uint64_t row = geometry.parity_row(me, p);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      // XOR is linear, and so is a CRC: the CRC of a XOR of k blocks is the XOR of their CRCs,
      // and of the CRC of a zero block when k is even (the seed counts once).
      std::uint32_t crc = k % 2 == 0 ? zero[b] : 0;
      for (int t = 0; t < k; ++t) {
        const int d =
            wrap(static_cast<int>(row % static_cast<std::uint64_t>(g)) + geometry.parity + t, g);
        const std::uint64_t j = *geometry.chunk_of_row(d, row);
        crc ^= j < counts[static_cast<std::size_t>(d)]
                   ? crcs[static_cast<std::size_t>(d)][j * blocks + b]
                   : zero[b];
      }
      parity[p * blocks + b] = crc;
    }
  }
  transfers.wait_sends(link);
}

namespace {

// The data CRCs that each member took as the first holder of other members' rows (digested_for,
// by member, in row order) go back to their members, each into its own list (`data`, all the
// blocks of its `chunks` chunks): every chunk's first holder took them.
void return_data_crcs(GroupLink& link, const StripeGeometry& geometry, std::uint64_t chunks,
                      const std::vector<std::vector<std::uint32_t>>& digested_for,
                      std::uint32_t* data) {
  const int g = geometry.group_size;
  const int me = link.rank();
  const auto blocks = static_cast<std::size_t>(geometry.blocks_per_chunk());
  // Which of this member's chunks each other member digested, in row order.
  std::vector<std::vector<std::uint64_t>> digested_by(static_cast<std::size_t>(g));
  for (std::uint64_t j = 0; j < chunks; ++j) {
    const int holder = geometry.holder(geometry.row_of_chunk(me, j), 0);
    digested_by[static_cast<std::size_t>(holder)].push_back(j);
  }
  std::vector<std::vector<std::uint32_t>> received(static_cast<std::size_t>(g));
  Transfers transfers;
  constexpr int kReturnTag = 0x5e5;
  for (int d = 0; d < g; ++d) {
    if (d == me) continue;
    const auto i = static_cast<std::size_t>(d);
    if (!digested_by[i].empty()) {
      received[i].resize(digested_by[i].size() * blocks);
      transfers.receive_crcs(link, received[i].data(), received[i].size(), d, kReturnTag);
    }
    if (!digested_for[i].empty()) {
      transfers.send_crcs(link, digested_for[i].data(), digested_for[i].size(), d, kReturnTag);
    }
  }
  transfers.wait_receives(link);
  for (int d = 0; d < g; ++d) {
    const auto i = static_cast<std::size_t>(d);
    for (std::size_t n = 0; n < digested_by[i].size(); ++n) {
      std::memcpy(data + digested_by[i][n] * blocks, received[i].data() + n * blocks,
                  blocks * sizeof(std::uint32_t));
    }
  }
  transfers.wait_sends(link);
}

}  // namespace

std::uint64_t encode_group(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                           std::span<const std::uint64_t> counts, const ChunkList& mine,
                           std::byte* parity, const PipelineOptions& options,
                           const Incremental* incremental, const Digests* digests) {
  const int g = geometry.group_size;
  const int m = geometry.parity;
  if (m == 0 || g < 2) return 0;
  const MPI_Comm group = link.comm();
  const int me = link.rank();
  const std::size_t chunk = geometry.chunk_bytes;
  const int k = geometry.data_width();
  const std::uint64_t mine_count = mine.size();
  const auto blocks = static_cast<std::size_t>(geometry.blocks_per_chunk());
  const std::uint64_t all_blocks = geometry.block_mask(0, chunk);
  // Under xor a parity block's CRC follows from its sources' CRCs: it is combined from them at
  // the end rather than taken by reading the parity.
  const bool combined_crcs = codec.scheme() == Scheme::xor_parity && digests != nullptr &&
                             digests->data != nullptr && digests->parity != nullptr;
  // Encoding in full, a data chunk's CRCs are taken by its row's first holder once the chunk has
  // landed there, from cache, and sent back to its member at the end: the member does not read
  // its whole stream once more for them (the transfer reads it, and so does the flush).
  const bool holders_digest =
      incremental == nullptr && digests != nullptr && digests->data != nullptr;
  std::vector<std::vector<std::uint32_t>> digested_for(static_cast<std::size_t>(g));

  // What of a row travels: all of it, encoded afresh, or the segments of its changed blocks.
  const std::vector<RowSegment> whole{{0, chunk, true}};
  auto segments_of = [&](std::uint64_t row) {
    if (incremental == nullptr) return whole;
    return geometry.segments(incremental->rows->any[row], incremental->rows->all[row]);
  };
  // Every data member of a row sends its part of each segment straight to the row's m parity
  // holders (consecutive fresh segments in one message, see message_runs), which combine the G-m
  // parts in one pass; a member's data goes out untouched from its stream where the segment is
  // encoded afresh, as its change since B elsewhere (nothing when it changed none of the segment).
  // Rows go a period (G rows) at a time, `depth` periods in flight: each period's receives and
  // sends are all posted before any of them is waited for, and every member walks the periods,
  // rows and segments in the same order, which is what pairs a send with its receive.
  const std::uint64_t periods = geometry.rows / static_cast<std::uint64_t>(g);
  const std::size_t per_period = static_cast<std::size_t>(m) * static_cast<std::size_t>(k);
  // About `depth` rows' worth of chunks in flight per member, and at least two periods, so that
  // one period's transfers overlap another's combining.
  const std::uint64_t window = std::max<std::uint64_t>(
      2, (static_cast<std::uint64_t>(std::max(1, options.depth)) * static_cast<std::uint64_t>(g) +
          per_period - 1) /
             per_period);
  ScratchPool own;
  ScratchPool& pool = options.scratch != nullptr ? *options.scratch : own;
  std::byte* const inbox = pool.get(0, window * per_period * chunk);
  std::byte* const outbox =
      pool.get(1, incremental != nullptr ? window * static_cast<std::size_t>(g) * chunk : 64);
  std::byte* const zeros = pool.get(2, chunk);
  std::memset(zeros, 0, chunk);
  std::vector<PeriodTransfers> transfers(window);
  std::vector<const std::byte*> sources(window * per_period);
  // With one data chunk per row and a coefficient of 1 (groups of 2 under xor or sum), a parity
  // item encoded afresh is that chunk: it lands in place.
  bool single_identity = k == 1;
  for (int l = 0; l < m; ++l)
    single_identity = single_identity && codec.encode_coef(l, 0) == Codec::identity;
  auto in_place = [&](const std::vector<RowSegment>& segments) {
    return single_identity && std::all_of(segments.begin(), segments.end(),
                                          [](const RowSegment& s) { return s.fresh; });
  };
  std::uint64_t sent = 0;

  auto post = [&](std::uint64_t q) {
    const std::uint64_t w = q % window;
    auto& t = transfers[w];
    t.receives.clear();
    t.sends.clear();
    t.received_into.clear();
    // My parity items of this period: slot l of row q·G + (me - l).
    for (int l = 0; l < m; ++l) {
      const std::uint64_t row =
          q * static_cast<std::uint64_t>(g) + static_cast<std::uint64_t>(wrap(me - l, g));
      const auto segments = segments_of(row);
      const std::uint64_t index = q * static_cast<std::uint64_t>(m) + static_cast<std::uint64_t>(l);
      for (int position = 0; position < k; ++position) {
        const std::size_t at = w * per_period + static_cast<std::size_t>(l * k + position);
        sources[at] = zeros;
        const int member =
            wrap(static_cast<int>(row % static_cast<std::uint64_t>(g)) + m + position, g);
        const std::uint64_t j = *geometry.chunk_of_row(member, row);
        if (segments.empty() || j >= counts[static_cast<std::size_t>(member)]) continue;
        std::byte* buffer = in_place(segments) ? parity + index * chunk : inbox + at * chunk;
        sources[at] = buffer;
        for (const auto& [first, last] : message_runs(segments)) {
          ByteRanges ranges;
          for (std::size_t s = first; s < last; ++s)
            ranges.emplace_back(segments[s].begin, segments[s].bytes());
          t.receives.push_back(MPI_REQUEST_NULL);
          irecv_ranges(buffer, ranges, member, l, group, &t.receives.back());
          t.received_into.emplace_back(buffer, std::move(ranges));
        }
      }
    }
    // My chunks of this period, to each holder of their row.
    for (int residue = 0; residue < g; ++residue) {
      const std::uint64_t row =
          q * static_cast<std::uint64_t>(g) + static_cast<std::uint64_t>(residue);
      const auto j = geometry.chunk_of_row(me, row);
      if (!j || *j >= mine_count) continue;
      const std::byte* data = mine.data[*j];
      const std::size_t valid = mine.bytes[*j];
      if (digests != nullptr && digests->data != nullptr && !holders_digest) {
        // Now, so that the sends below read the chunk from cache.
        chunk_crcs(geometry, data, static_cast<std::uint32_t>(valid),
                   incremental != nullptr ? (*incremental->changed)[*j] : all_blocks,
                   digests->data + *j * blocks);
      }
      std::byte* change =
          outbox + (w * static_cast<std::size_t>(g) + static_cast<std::size_t>(residue)) * chunk;
      const auto segments = segments_of(row);
      for (const auto& [first, last] : message_runs(segments)) {
        // A run of fresh segments goes from the chunk; a segment that is not fresh, alone in its
        // run, as its change, from the outbox.
        const std::byte* from = data;
        ByteRanges ranges;
        std::size_t total = 0;
        for (std::size_t s = first; s < last; ++s) {
          const RowSegment& segment = segments[s];
          std::size_t bytes =
              valid > segment.begin ? std::min(valid, segment.end) - segment.begin : 0;
          if (!segment.fresh) {
            const std::uint64_t mask = geometry.block_mask(segment.begin, segment.end);
            if (((*incremental->changed)[*j] & mask) == 0) {
              bytes = 0;  // unchanged: nothing to add to the holders' committed parity
            } else {
              codec.combine_delta(change + segment.begin, zeros, data + segment.begin,
                                  incremental->base->data[*j] + segment.begin, bytes,
                                  Codec::identity);
              from = change;
            }
          }
          if (bytes > 0) ranges.emplace_back(segment.begin, bytes);
          total += bytes;
        }
        for (int l = 0; l < m; ++l) {
          t.sends.push_back(MPI_REQUEST_NULL);
          isend_ranges(from, ranges, geometry.holder(row, l), l, group, &t.sends.back());
          sent += total;
        }
      }
    }
  };

  auto complete = [&](std::uint64_t q) {
    const std::uint64_t w = q % window;
    auto& t = transfers[w];
    std::vector<MPI_Status> statuses(t.receives.size());
    link.wait_all(static_cast<int>(t.receives.size()), t.receives.data(), statuses.data());
    for (std::size_t i = 0; i < statuses.size(); ++i) {
      int bytes = 0;
      SKT_MPI(MPI_Get_count(&statuses[i], MPI_BYTE, &bytes));
      const auto& [into, ranges] = t.received_into[i];
      // Past the end of a short chunk, or no change: zeros.
      auto left = static_cast<std::size_t>(bytes);
      for (const auto& [offset, length] : ranges) {
        const std::size_t got = std::min(left, length);
        if (got < length) std::memset(into + offset + got, 0, length - got);
        left -= got;
      }
    }
    std::vector<const std::byte*> shifted(static_cast<std::size_t>(k));
    for (int l = 0; l < m; ++l) {
      const std::uint64_t row =
          q * static_cast<std::uint64_t>(g) + static_cast<std::uint64_t>(wrap(me - l, g));
      const auto segments = segments_of(row);
      const std::uint64_t index = q * static_cast<std::uint64_t>(m) + static_cast<std::uint64_t>(l);
      std::byte* const out = parity + index * chunk;
      const std::size_t first = w * per_period + static_cast<std::size_t>(l * k);
      if (holders_digest && l == 0) {
        for (int position = 0; position < k; ++position) {
          const std::byte* source = sources[first + static_cast<std::size_t>(position)];
          if (source == zeros) continue;  // past the end of that member's stream
          const int member =
              wrap(static_cast<int>(row % static_cast<std::uint64_t>(g)) + m + position, g);
          auto& list = digested_for[static_cast<std::size_t>(member)];
          list.resize(list.size() + blocks);
          // Zero-filled past the chunk's valid bytes, as its CRCs take them.
          chunk_crcs(geometry, source, static_cast<std::uint32_t>(chunk), all_blocks,
                     list.data() + list.size() - blocks);
        }
      }
      auto record = [&] {
        if (digests == nullptr || digests->parity == nullptr || combined_crcs) return;
        chunk_crcs(geometry, out, static_cast<std::uint32_t>(chunk),
                   incremental != nullptr ? incremental->rows->any[row] : all_blocks,
                   digests->parity + index * blocks);
      };
      if (in_place(segments)) {
        if (sources[first] == zeros) {  // else received in place
          for (const auto& segment : segments)
            std::memset(out + segment.begin, 0, segment.bytes());
        }
        record();
        continue;
      }
      for (const auto& segment : segments) {
        for (int position = 0; position < k; ++position) {
          shifted[static_cast<std::size_t>(position)] =
              sources[first + static_cast<std::size_t>(position)] + segment.begin;
        }
        codec.encode_row(
            out + segment.begin,
            segment.fresh ? nullptr : incremental->committed_parity + index * chunk + segment.begin,
            shifted, l, segment.bytes());
      }
      record();
    }
    link.wait_all(static_cast<int>(t.sends.size()), t.sends.data(), nullptr);
    report(options, q + 1, periods);
  };

  for (std::uint64_t q = 0; q < periods + window; ++q) {
    if (q >= window) complete(q - window);
    if (q < periods) post(q);
  }
  if (holders_digest) return_data_crcs(link, geometry, mine_count, digested_for, digests->data);
  if (combined_crcs) combine_parity_crcs(link, geometry, counts, digests->data, digests->parity);
  return sent;
}

bool rebuilt_as_xor_of_the_others(const Codec& codec, int target) {
  if (!codec.exact()) return false;
  const std::vector<int> lost{target};
  for (int residue = 0; residue < codec.group_size(); ++residue) {
    const std::vector<Coef> coefs = codec.rebuild_coefs(residue, lost, target);
    for (int d = 0; d < codec.group_size(); ++d)
      if (d != target && coefs[static_cast<std::size_t>(d)] != 1) return false;
  }
  return true;
}

void derive_lost_crcs(const StripeGeometry& geometry, std::span<const std::uint64_t> member_chunks,
                      int target, const std::vector<std::vector<std::uint32_t>>& data,
                      const std::vector<std::vector<std::uint32_t>>& parity, const Digests& out) {
  const int g = geometry.group_size;
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const std::vector<std::uint32_t> zero = zero_block_crcs(geometry);
  const bool even = (g - 1) % 2 == 0;
  // The CRC of block b of member d's item in `row`: past the end of its stream, zeros.
  auto crc_of = [&](int d, std::uint64_t row, std::uint64_t b) {
    const auto member = static_cast<std::size_t>(d);
    if (const auto p = geometry.parity_index(d, row)) return parity[member][*p * blocks + b];
    const std::uint64_t j = *geometry.chunk_of_row(d, row);
    return j < member_chunks[member] ? data[member][j * blocks + b] : zero[b];
  };
  for (std::uint64_t row = 0; row < geometry.rows; ++row) {
    std::uint32_t* into = nullptr;
    if (const auto p = geometry.parity_index(target, row)) {
      into = out.parity + *p * blocks;
    } else if (const std::uint64_t j = *geometry.chunk_of_row(target, row);
               j < member_chunks[static_cast<std::size_t>(target)]) {
      into = out.data + j * blocks;
    } else {
      continue;  // past the end of the target's stream: nothing of it in this row
    }
    for (std::uint64_t b = 0; b < blocks; ++b) {
      std::uint32_t crc = even ? zero[b] : 0;
      for (int d = 0; d < g; ++d)
        if (d != target) crc ^= crc_of(d, row, b);
      into[b] = crc;
    }
  }
}

namespace {

// One member lost, rebuilt as the XOR of the others: the survivors' CRCs go to it, which
// derives its own from them.
void send_crcs_to_lost(GroupLink& link, const StripeGeometry& geometry,
                       std::span<const std::uint64_t> member_chunks, int target,
                       const Digests& digests) {
  const int g = geometry.group_size;
  const int me = link.rank();
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const std::uint64_t parity_crcs = geometry.parity_chunks() * blocks;
  std::vector<std::vector<std::uint32_t>> data(static_cast<std::size_t>(g)),
      parity(static_cast<std::size_t>(g));
  Transfers transfers;
  constexpr int kDataTag = 0x5e5;
  constexpr int kParityTag = 0x5e6;
  if (me == target) {
    for (int d = 0; d < g; ++d) {
      if (d == me) continue;
      auto& own = data[static_cast<std::size_t>(d)];
      own.resize(member_chunks[static_cast<std::size_t>(d)] * blocks);
      parity[static_cast<std::size_t>(d)].resize(parity_crcs);
      transfers.receive_crcs(link, own.data(), own.size(), d, kDataTag);
      transfers.receive_crcs(link, parity[static_cast<std::size_t>(d)].data(), parity_crcs, d,
                             kParityTag);
    }
    transfers.wait_receives(link);
    derive_lost_crcs(geometry, member_chunks, me, data, parity, digests);
    return;
  }
  transfers.send_crcs(link, digests.data, member_chunks[static_cast<std::size_t>(me)] * blocks,
                      target, kDataTag);
  transfers.send_crcs(link, digests.parity, parity_crcs, target, kParityTag);
  transfers.wait_sends(link);
}

}  // namespace

void rebuild_group(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                   std::span<const std::uint64_t> member_chunks, std::span<const int> lost,
                   std::span<const std::uint64_t> skip_rows, const ChunkList& mine,
                   std::byte* parity, const PipelineOptions& options, const RebuildHooks* hooks) {
  const int g = geometry.group_size;
  if (lost.empty()) return;
  if (geometry.parity == 0 || g < 2) {
    throw std::invalid_argument("a group without parity cannot rebuild a lost member");
  }
  const int me = link.rank();
  std::vector<int> survivors;
  for (int member = 0; member < g; ++member) {
    if (!std::binary_search(lost.begin(), lost.end(), member)) survivors.push_back(member);
  }
  const std::size_t chunk = geometry.chunk_bytes;
  if (hooks != nullptr && hooks->digests != nullptr) {
    if (lost.size() != 1 || !rebuilt_as_xor_of_the_others(codec, lost.front()) ||
        !skip_rows.empty()) {
      throw std::invalid_argument(
          "CRCs are derived only for one member lost, rebuilt as the XOR of the others in every "
          "row");
    }
    send_crcs_to_lost(link, geometry, member_chunks, lost.front(), *hooks->digests);
  }

  for (const int target : lost) {
    // Rows in which the target holds something: its data chunks, then its parity chunks, in row
    // order. Every member derives the same list.
    std::vector<std::uint64_t> rows;
    for (std::uint64_t row = 0; row < geometry.rows; ++row) {
      if (std::binary_search(skip_rows.begin(), skip_rows.end(), row)) continue;
      const auto position = geometry.chunk_of_row(target, row);
      if (!position || *position < member_chunks[static_cast<std::size_t>(target)]) {
        rows.push_back(row);
      }
    }
    std::vector<std::vector<Coef>> coefs(static_cast<std::size_t>(g));
    for (int residue = 0; residue < g; ++residue) {
      coefs[static_cast<std::size_t>(residue)] = codec.rebuild_coefs(residue, lost, target);
    }

    Exchange ex(link, chunk, options.depth, options.scratch);
    const auto count = static_cast<std::uint64_t>(rows.size());
    if (me == target) {
      std::function<void(std::uint64_t)> landed;
      if (hooks != nullptr && hooks->landed)
        landed = [&](std::uint64_t i) { hooks->landed(rows[i]); };
      ex.expect_direct(
          survivors.back(), count,
          [&](std::uint64_t i) {
            const std::uint64_t row = rows[i];
            if (const auto index = geometry.parity_index(me, row)) {
              return Landing{parity + *index * chunk, static_cast<std::uint32_t>(chunk)};
            }
            const std::uint64_t position = *geometry.chunk_of_row(me, row);
            return Landing{mine.data[position], mine.bytes[position]};
          },
          std::move(landed));
      ex.finish();
      report(options, count, count);
      continue;
    }
    const auto place = std::find(survivors.begin(), survivors.end(), me);
    if (place == survivors.end()) continue;  // another lost member: its turn comes
    const auto position_in_chain = static_cast<std::size_t>(place - survivors.begin());
    const bool first = position_in_chain == 0;
    const bool last = position_in_chain + 1 == survivors.size();
    const int next = last ? target : survivors[position_in_chain + 1];
    if (!first) ex.expect_stream(survivors[position_in_chain - 1], count);
    if (hooks != nullptr && hooks->idle) ex.set_idle_work(hooks->idle);

    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t row = rows[i];
      const Coef coef = coefs[row % static_cast<std::uint64_t>(g)][static_cast<std::size_t>(me)];
      if (hooks != nullptr && hooks->before_read) hooks->before_read(row);
      Piece piece;
      if (const auto index = geometry.parity_index(me, row)) {
        piece = Piece{parity + *index * chunk, static_cast<std::uint32_t>(chunk), coef};
      } else if (const std::uint64_t position = *geometry.chunk_of_row(me, row);
                 position < mine.size()) {
        piece = Piece{mine.data[position], mine.bytes[position], coef};
      }
      if (first) {
        send_piece(ex, codec, piece, chunk, next, last);
      } else {
        forward_piece(ex, codec, piece, chunk, ex.take(), next, last);
      }
      report(options, i + 1, count);
    }
    ex.finish();
  }
}

namespace {

constexpr int kRepairTag = 0x5e3;
// Received items held at once.
constexpr std::size_t kRepairBatchBytes = std::size_t{64} << 20;

}  // namespace

void repair_rows(GroupLink& link, const StripeGeometry& geometry, const Codec& codec,
                 std::span<const std::uint64_t> member_chunks, std::span<const RowRepair> rows,
                 const ChunkList& mine, std::byte* parity, const PipelineOptions& options) {
  if (rows.empty()) return;
  const int g = geometry.group_size;
  if (geometry.parity == 0 || g < 2) {
    throw std::invalid_argument("a group without parity cannot repair a row");
  }
  const int me = link.rank();
  const std::size_t chunk = geometry.chunk_bytes;
  // This member's item of a row: a parity chunk, a data chunk (its valid bytes), or nothing past
  // the end of its stream.
  auto item = [&](std::uint64_t row) -> std::pair<std::byte*, std::size_t> {
    if (const auto index = geometry.parity_index(me, row)) return {parity + *index * chunk, chunk};
    const std::uint64_t j = *geometry.chunk_of_row(me, row);
    if (j >= mine.size() || j >= member_chunks[static_cast<std::size_t>(me)]) return {nullptr, 0};
    return {mine.data[j], mine.bytes[j]};
  };
  ScratchPool own;
  ScratchPool& pool = options.scratch != nullptr ? *options.scratch : own;
  std::byte* const zeros = pool.get(4, chunk);
  std::memset(zeros, 0, chunk);
  const std::size_t per_batch = std::max<std::size_t>(1, kRepairBatchBytes / (chunk * g));
  std::byte* const inbox = pool.get(5, per_batch * static_cast<std::size_t>(g) * chunk);
  std::byte* const result = pool.get(6, chunk);

  for (std::size_t first = 0; first < rows.size(); first += per_batch) {
    const std::size_t last = std::min(rows.size(), first + per_batch);
    Transfers t;
    // Every member walks the rows and their erased members in the same order, which pairs each
    // send with its receive.
    for (std::size_t i = first; i < last; ++i) {
      const RowRepair& repair = rows[i];
      const bool erased = std::binary_search(repair.erased.begin(), repair.erased.end(), me);
      const auto [data, bytes] = item(repair.row);
      for (const int target : repair.erased) {
        if (target == me) {
          for (int source = 0; source < g; ++source) {
            if (std::binary_search(repair.erased.begin(), repair.erased.end(), source)) continue;
            std::byte* into = inbox + ((i - first) * static_cast<std::size_t>(g) +
                                       static_cast<std::size_t>(source)) *
                                          chunk;
            std::memset(into, 0, chunk);
            t.receives.push_back(MPI_REQUEST_NULL);
            SKT_MPI(MPI_Irecv(into, static_cast<int>(chunk), MPI_BYTE, source, kRepairTag,
                              link.comm(), &t.receives.back()));
          }
        } else if (!erased) {
          t.sends.push_back(MPI_REQUEST_NULL);
          SKT_MPI(MPI_Isend(data != nullptr ? data : zeros, static_cast<int>(bytes), MPI_BYTE,
                            target, kRepairTag, link.comm(), &t.sends.back()));
        }
      }
    }
    link.wait_all(static_cast<int>(t.receives.size()), t.receives.data(), nullptr);
    for (std::size_t i = first; i < last; ++i) {
      const RowRepair& repair = rows[i];
      if (!std::binary_search(repair.erased.begin(), repair.erased.end(), me)) continue;
      const auto coefs = codec.rebuild_coefs(
          static_cast<int>(repair.row % static_cast<std::uint64_t>(g)), repair.erased, me);
      bool started = false;
      for (int source = 0; source < g; ++source) {
        const Coef c = coefs[static_cast<std::size_t>(source)];
        if (c == 0) continue;
        const std::byte* from =
            inbox +
            ((i - first) * static_cast<std::size_t>(g) + static_cast<std::size_t>(source)) * chunk;
        if (started) {
          codec.combine(result, result, from, chunk, c);
        } else {
          codec.scale(result, from, chunk, c);
          started = true;
        }
      }
      if (!started) std::memset(result, 0, chunk);
      const auto [data, bytes] = item(repair.row);
      if (data != nullptr && bytes > 0) std::memcpy(data, result, bytes);
      report(options, i + 1, rows.size());
    }
    link.wait_all(static_cast<int>(t.sends.size()), t.sends.data(), nullptr);
  }
}

}  // namespace skt::enc
