// bench-encode: the group encoding (pipelined, straight to the parity holders) of each scheme, m
// and group size, next to a memcpy of the same bytes by the same ranks in the same run, and with
// the block CRCs (the digest every checkpoint keeps) taken as it goes, to show what they cost.
//
//   mpirun -n 16 bench-encode --mib 32
//
// All ranks work at once, in groups of G (the ranks beyond a multiple of G idle); a rank's rate is
// the bytes of its stream over the slowest rank's time.
#include <mpi.h>
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "bench/mpi_timing.hpp"
#include "bench/table.hpp"
#include "encoders/group.hpp"
#include "common/mpi.hpp"

namespace {

struct Buffer {
  explicit Buffer(std::size_t bytes)
      : p(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    std::mt19937_64 rng(bytes);
    auto* words = reinterpret_cast<std::uint64_t*>(p);
    // Doubles of moderate size, so that sum adds numbers, and random enough for the others.
    for (std::size_t i = 0; i < bytes / 8; ++i)
      words[i] = (rng() & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  }
  ~Buffer() { std::free(p); }
  std::byte* p;
};

struct Variant {
  skt::enc::Scheme scheme;
  int parity;
};

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CLI::App app{"bench-encode: group encoding vs memcpy, by scheme, m and group size"};
  std::size_t mib = 32;
  std::size_t chunk_kib = 256;
  int depth = 4;
  int repeats = 3;
  std::string groups = "2,4,8,16";
  std::string csv = "encode.csv";
  app.add_option("--mib", mib, "stream per rank in MiB");
  app.add_option("--chunk-kib", chunk_kib, "chunk (pipeline slice) in KiB");
  app.add_option("--depth", depth, "chunks in flight");
  app.add_option("--repeats", repeats, "timed repetitions (best kept)");
  app.add_option("--groups", groups, "group sizes, comma separated");
  app.add_option("--csv", csv, "CSV output (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : 0;
    MPI_Finalize();
    return code;
  }

  const std::size_t bytes = mib << 20;
  const std::size_t chunk = chunk_kib << 10;
  Buffer data(bytes), copy(bytes);
  skt::enc::ChunkList stream;
  for (std::size_t off = 0; off < bytes; off += chunk) {
    stream.add(data.p + off, static_cast<std::uint32_t>(std::min(chunk, bytes - off)));
  }
  const double memcpy_time =
      skt::bench::slowest(MPI_COMM_WORLD, repeats, [&] { std::memcpy(copy.p, data.p, bytes); });

  std::unique_ptr<skt::bench::Table> table;
  if (rank == 0) {
    fmt::print(
        "{} ranks, {} MiB per rank, chunk {} KiB, depth {}; memcpy of the stream by every "
        "rank at once: {:.3f} s ({:.2f} GB/s per rank)\n",
        size, mib, chunk_kib, depth, memcpy_time, bytes / memcpy_time / 1e9);
    table = std::make_unique<skt::bench::Table>(
        std::vector<std::string>{"scheme", "m", "G", "ranks", "MiB/rank", "encode_s", "memcpy_s",
                                 "GBs/rank", "encode/memcpy", "with_crc_s", "crc_extra_s",
                                 "crc/encode"},
        csv);
  }
  const std::vector<Variant> variants{{skt::enc::Scheme::xor_parity, 1},
                                      {skt::enc::Scheme::sum, 1},
                                      {skt::enc::Scheme::reed_solomon, 1},
                                      {skt::enc::Scheme::reed_solomon, 2},
                                      {skt::enc::Scheme::reed_solomon, 3}};
  skt::enc::ScratchPool scratch;
  for (const int g : parse_list(groups)) {
    if (g < 2 || g > size) continue;
    const int active = size / g * g;
    const bool in = rank < active;
    skt::Comm group = skt::Comm::split(MPI_COMM_WORLD, in ? rank / g : MPI_UNDEFINED, rank);
    for (const auto& v : variants) {
      if (v.parity >= g) continue;
      const auto geometry = skt::enc::StripeGeometry::plan(g, v.parity, chunk, stream.size());
      Buffer parity(std::max<std::size_t>(geometry.parity_bytes(), 64));
      const auto blocks = static_cast<std::size_t>(geometry.blocks_per_chunk());
      std::vector<std::uint32_t> data_crcs(stream.size() * blocks),
          parity_crcs(geometry.parity_chunks() * blocks);
      const std::vector<std::uint64_t> counts(static_cast<std::size_t>(g), stream.size());
      std::unique_ptr<skt::enc::Codec> codec;
      if (in) codec = skt::enc::make_codec(v.scheme, g, v.parity);
      auto encode = [&](const skt::enc::Digests* digests) {
        if (!in) return;
        skt::enc::GroupLink link(group.get());
        skt::enc::encode_group(link, geometry, *codec, counts, stream, parity.p,
                               {depth, {}, &scratch}, nullptr, digests);
      };
      const double t = skt::bench::slowest(MPI_COMM_WORLD, repeats, [&] { encode(nullptr); });
      const skt::enc::Digests digests{data_crcs.data(), parity_crcs.data()};
      const double with_crc =
          skt::bench::slowest(MPI_COMM_WORLD, repeats, [&] { encode(&digests); });
      if (rank == 0) {
        table->row({std::string(skt::enc::scheme_name(v.scheme)), std::to_string(v.parity),
                    std::to_string(g), std::to_string(active), std::to_string(mib),
                    skt::bench::num(t, 4), skt::bench::num(memcpy_time, 4),
                    skt::bench::num(bytes / t / 1e9, 3), skt::bench::num(t / memcpy_time, 2),
                    skt::bench::num(with_crc, 4), skt::bench::num(with_crc - t, 4),
                    skt::bench::num(with_crc / t, 3)});
      }
    }
  }
  MPI_Finalize();
  return 0;
}
