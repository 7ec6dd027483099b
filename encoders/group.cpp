#include "encoders/group.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "encoders/exchange.hpp"
#include "encoders/mpi_util.hpp"

namespace skt::enc {

namespace {

int wrap(int value, int modulus) {
  return ((value % modulus) + modulus) % modulus;
}

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

std::uint64_t encode_group(MPI_Comm group, const StripeGeometry& geometry, const Codec& codec,
                           const ChunkList& mine, std::byte* parity, const PipelineOptions& options,
                           const Incremental* incremental) {
  const int g = geometry.group_size;
  if (geometry.parity == 0 || g < 2) return 0;
  int me = 0;
  SKT_MPI(MPI_Comm_rank(group, &me));
  const int next = wrap(me + 1, g);
  const int prev = wrap(me - 1, g);
  const std::size_t chunk = geometry.chunk_bytes;

  // The parity items of each block that this encoding recomputes: all, or those of dirty rows.
  std::vector<std::vector<std::uint64_t>> items(static_cast<std::size_t>(g));
  std::uint64_t longest = 0;
  for (int block = 0; block < g; ++block) {
    auto& list = items[static_cast<std::size_t>(block)];
    for (std::uint64_t index = 0; index < geometry.parity_chunks(); ++index) {
      if (incremental == nullptr ||
          (*incremental->dirty_rows)[geometry.parity_row(block, index)] != 0) {
        list.push_back(index);
      }
    }
    longest = std::max<std::uint64_t>(longest, list.size());
  }

  // My share of parity item `index` of member `block`.
  auto contribution = [&](int block, std::uint64_t index) {
    const std::uint64_t row = geometry.parity_row(block, index);
    const auto position = geometry.chunk_of_row(me, row);
    if (!position || *position >= mine.size()) return Piece{};
    if (incremental != nullptr && (*incremental->dirty_chunks)[*position] == 0) return Piece{};
    const int slot = static_cast<int>(index % static_cast<std::uint64_t>(geometry.parity));
    return Piece{mine.data[*position], mine.bytes[*position],
                 codec.encode_coef(slot, geometry.data_position(me, row)),
                 incremental != nullptr ? incremental->base->data[*position] : nullptr};
  };

  // Ring reduce-scatter: at step s a member passes on the partial result for block me-s-1 and
  // receives the one for block me-s-2; after G-1 steps it holds the sum for its own block, which
  // its predecessor sends straight into `parity`. Items go in batches of `depth`, step by step
  // within a batch: a successor has the whole batch's first step posted before it consumes
  // anything, so the ring never waits on itself, and transfers of a batch overlap its combining.
  Exchange ex(group, chunk, options.depth, &codec);
  std::uint64_t streamed = 0;
  for (int step = 1; step < g - 1; ++step) {
    streamed += items[static_cast<std::size_t>(wrap(me - step - 1, g))].size();
  }
  const auto& own = items[static_cast<std::size_t>(me)];
  ex.expect_stream(prev, streamed);
  ex.expect_direct(prev, own.size(), [&](std::uint64_t i) {
    const std::uint64_t offset = own[i] * chunk;
    return Landing{parity + offset, static_cast<std::uint32_t>(chunk),
                   incremental != nullptr ? incremental->committed_parity + offset : nullptr};
  });
  std::uint64_t total = 0;
  for (int step = 0; step < g - 1; ++step) {
    total += items[static_cast<std::size_t>(wrap(me - step - 1, g))].size();
  }
  const auto batch = static_cast<std::uint64_t>(std::max(1, options.depth));
  std::uint64_t done = 0;
  for (std::uint64_t first = 0; first < longest; first += batch) {
    for (int step = 0; step < g - 1; ++step) {
      const int block = wrap(me - step - 1, g);
      const auto& list = items[static_cast<std::size_t>(block)];
      const bool last = step == g - 2;
      const std::uint64_t end = std::min<std::uint64_t>(list.size(), first + batch);
      for (std::uint64_t at = first; at < end; ++at) {
        const Piece piece = contribution(block, list[at]);
        if (step == 0) {
          send_piece(ex, codec, piece, chunk, next, last);
        } else {
          forward_piece(ex, codec, piece, chunk, ex.take(), next, last);
        }
        report(options, ++done, total);
      }
    }
  }
  ex.finish();
  return done;
}

void rebuild_group(MPI_Comm group, const StripeGeometry& geometry, const Codec& codec,
                   std::span<const std::uint64_t> member_chunks, std::span<const int> lost,
                   const ChunkList& mine, std::byte* parity, const PipelineOptions& options) {
  const int g = geometry.group_size;
  if (lost.empty()) return;
  if (geometry.parity == 0 || g < 2) {
    throw std::invalid_argument("a group without parity cannot rebuild a lost member");
  }
  int me = 0;
  SKT_MPI(MPI_Comm_rank(group, &me));
  std::vector<int> survivors;
  for (int member = 0; member < g; ++member) {
    if (!std::binary_search(lost.begin(), lost.end(), member)) survivors.push_back(member);
  }
  const std::size_t chunk = geometry.chunk_bytes;

  for (const int target : lost) {
    // Rows in which the target holds something: its data chunks, then its parity chunks, in row
    // order. Every member derives the same list.
    std::vector<std::uint64_t> rows;
    for (std::uint64_t row = 0; row < geometry.rows; ++row) {
      const auto position = geometry.chunk_of_row(target, row);
      if (!position || *position < member_chunks[static_cast<std::size_t>(target)]) {
        rows.push_back(row);
      }
    }
    std::vector<std::vector<Coef>> coefs(static_cast<std::size_t>(g));
    for (int residue = 0; residue < g; ++residue) {
      coefs[static_cast<std::size_t>(residue)] = codec.rebuild_coefs(residue, lost, target);
    }

    Exchange ex(group, chunk, options.depth);
    const auto count = static_cast<std::uint64_t>(rows.size());
    if (me == target) {
      ex.expect_direct(survivors.back(), count, [&](std::uint64_t i) {
        const std::uint64_t row = rows[i];
        if (const auto index = geometry.parity_index(me, row)) {
          return Landing{parity + *index * chunk, static_cast<std::uint32_t>(chunk)};
        }
        const std::uint64_t position = *geometry.chunk_of_row(me, row);
        return Landing{mine.data[position], mine.bytes[position]};
      });
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

    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t row = rows[i];
      const Coef coef = coefs[row % static_cast<std::uint64_t>(g)][static_cast<std::size_t>(me)];
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

}  // namespace skt::enc
