// bench-kernels: the local kernels of each scheme on one core, next to ISA-L called directly on the
// same buffers and to a memcpy of the same bytes.
//
// For each scheme the kernel is the one a rebuild step runs: out = acc + c·src over a chunk. "raw"
// is the same operation through ISA-L's own entry point (xor_gen, ec_encode_data) without the
// codec. The "crc" rows are the block digests of every chunk by each route of chunk_crcs, against
// ISA-L's crc32_iscsi over the whole buffer.
#include <isa-l.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/table.hpp"
#include "encoders/codec.hpp"
#include "encoders/crc.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Buffer {
  explicit Buffer(std::size_t bytes) : p(static_cast<std::byte*>(std::aligned_alloc(64, bytes))) {
    std::mt19937_64 rng(bytes);
    auto* words = reinterpret_cast<std::uint64_t*>(p);
    for (std::size_t i = 0; i < bytes / 8; ++i)
      words[i] = rng() & 0x3fefffffffffffffull;
  }
  ~Buffer() { std::free(p); }
  std::byte* p;
};

// Best of `repeats` timings of `work` over `bytes` bytes of input, in GB/s of input.
double rate(std::size_t bytes, int repeats, const std::function<void()>& work) {
  double best = 1e30;
  work();  // first touch
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-kernels: local encoding kernels vs ISA-L called directly vs memcpy"};
  std::size_t mib = 64;
  int repeats = 5;
  std::string csv = "kernels.csv";
  app.add_option("--mib", mib, "buffer size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repetitions (best is kept)");
  app.add_option("--csv", csv, "CSV output");
  CLI11_PARSE(app, argc, argv);

  const std::size_t bytes = mib << 20;
  Buffer acc(bytes), src(bytes), out(bytes);
  const double memcpy_rate = rate(bytes, repeats, [&] { std::memcpy(out.p, src.p, bytes); });

  skt::bench::Table table(
      {"scheme", "m", "kernel_GBs", "raw_isal_GBs", "kernel/raw", "memcpy_GBs", "kernel/memcpy"},
      csv);
  auto report = [&](const std::string& scheme, const std::string& m, double kernel, double raw) {
    table.row({scheme, m, skt::bench::num(kernel, 2), raw > 0 ? skt::bench::num(raw, 2) : "-",
               raw > 0 ? skt::bench::num(kernel / raw) : "-", skt::bench::num(memcpy_rate, 2),
               skt::bench::num(kernel / memcpy_rate)});
  };

  {
    const auto codec = skt::enc::make_codec(skt::enc::Scheme::xor_parity, 4, 1);
    const double kernel =
        rate(bytes, repeats, [&] { codec->combine(out.p, acc.p, src.p, bytes, 1); });
    const double raw = rate(bytes, repeats, [&] {
      for (std::size_t done = 0; done < bytes; done += std::size_t{1} << 30) {
        void* v[3] = {acc.p + done, src.p + done, out.p + done};
        xor_gen(3, static_cast<int>(std::min<std::size_t>(bytes - done, 1u << 30)), v);
      }
    });
    report("xor", "1", kernel, raw);
  }
  for (int m = 1; m <= 3; ++m) {
    const auto codec = skt::enc::make_codec(skt::enc::Scheme::reed_solomon, 16, m);
    const skt::enc::Coef c = codec->encode_coef(m - 1, 5);
    const double kernel =
        rate(bytes, repeats, [&] { codec->combine(out.p, acc.p, src.p, bytes, c); });
    unsigned char coefs[2] = {1, c};
    unsigned char tables[64];
    ec_init_tables(2, 1, coefs, tables);
    const double raw = rate(bytes, repeats, [&] {
      unsigned char* in[2] = {reinterpret_cast<unsigned char*>(acc.p),
                              reinterpret_cast<unsigned char*>(src.p)};
      unsigned char* o[1] = {reinterpret_cast<unsigned char*>(out.p)};
      ec_encode_data(static_cast<int>(bytes), 2, 1, tables, in, o);
    });
    report("rs", std::to_string(m), kernel, raw);
  }
  {
    const auto codec = skt::enc::make_codec(skt::enc::Scheme::sum, 4, 1);
    const double kernel =
        rate(bytes, repeats, [&] { codec->combine(out.p, acc.p, src.p, bytes, 1); });
    report("sum", "1", kernel, 0);
  }
  // The block digests a checkpoint takes of what it encodes, by each route, against
  // ISA-L's CRC over the whole buffer at once, which has no blocks to restart at.
  const auto geometry = skt::enc::StripeGeometry::plan(2, 1, std::size_t{256} << 10, 1);
  const std::size_t chunk = geometry.chunk_bytes;
  std::vector<std::uint32_t> digests(bytes / chunk * 64 + 64);
  const double raw_crc = rate(bytes, repeats, [&] {
    std::uint32_t crc = 0xffffffffu;
    for (std::size_t done = 0; done < bytes; done += std::size_t{1} << 30) {
      crc = crc32_iscsi(reinterpret_cast<unsigned char*>(src.p + done),
                        static_cast<int>(std::min<std::size_t>(bytes - done, 1u << 30)), crc);
    }
    digests[0] = crc;
  });
  for (const auto route : {skt::enc::CrcRoute::isal, skt::enc::CrcRoute::interleaved}) {
    const double kernel = rate(bytes, repeats, [&] {
      for (std::size_t at = 0; at < bytes; at += chunk) {
        const auto valid = static_cast<std::uint32_t>(std::min(chunk, bytes - at));
        skt::enc::chunk_crcs(geometry, src.p + at, valid, ~std::uint64_t{0},
                             digests.data() + at / chunk * 64, route);
      }
    });
    const bool chosen = route == skt::enc::fastest_crc_route();
    report(std::string(route == skt::enc::CrcRoute::isal ? "crc isal" : "crc interleaved") +
               (chosen ? " (chosen)" : ""),
           "-", kernel, raw_crc);
  }
  return 0;
}
