#include "hpl/suggest.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <stdexcept>

namespace skt::hpl {

namespace {

double parse_bytes(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& c : unit)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "IB" || unit == "B") unit.clear();
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'I') unit.pop_back();
  const double scale = unit.empty()  ? 1
                       : unit == "K" ? 0x1p10
                       : unit == "M" ? 0x1p20
                       : unit == "G" ? 0x1p30
                       : unit == "T" ? 0x1p40
                                     : -1;
  if (used == 0 || scale < 0 || value <= 0) {
    throw std::invalid_argument("--mem-per-node: '" + text +
                                "' is not a size (bytes, or 512M, 64G, 1T)");
  }
  return value * scale;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

}  // namespace

double usable_fraction(const std::string& mode, int g, int m) {
  if (g <= 1 || mode == "none") return mode == "none" ? 1.0 : 0.5;
  const double k = g - m;
  if (mode == "self") return k / (2.0 * g);
  if (mode == "double") return k / (3.0 * g - m);
  return k / (2.0 * g - m);
}

long partition_step(int nb, int p, int q) {
  return std::lcm(static_cast<long>(nb) * p, static_cast<long>(nb) * q);
}

long largest_n(double bytes, int nb, int p, int q) {
  const long step = partition_step(nb, p, q);
  // Each rank holds about N·(N+1)/(P·Q) doubles.
  const double n = std::floor((std::sqrt(1.0 + 4.0 * bytes * p * q / 8.0) - 1.0) / 2.0);
  return static_cast<long>(n) / step * step;
}

void print_suggestions(const HplDat& dat, const std::string& memory, int ranks_per_node) {
  const double per_rank = parse_bytes(memory) / ranks_per_node;
  const int g = env_int("SKT_GROUP_SIZE", 4);
  const int m = env_int("SKT_PARITY", 1);
  fmt::print(
      "Largest N with equal shares for {} per node, {} rank{} per node, groups of {} with {} "
      "parity "
      "chunk{}:\n\n",
      memory, ranks_per_node, ranks_per_node == 1 ? "" : "s", g, m, m == 1 ? "" : "s");
  fmt::print("{:>5} {:>5} {:>6}  {:<8} {:>9} {:>10} {:>14}\n", "P", "Q", "NB", "mode", "usable",
             "N", "A per rank");
  for (std::size_t i = 0; i < dat.ps.size(); ++i) {
    for (const int nb : dat.nbs) {
      for (const char* mode : {"none", "self", "double", "single"}) {
        const double f = usable_fraction(mode, g, m);
        const long n = largest_n(per_rank * f, nb, dat.ps[i], dat.qs[i]);
        const double a =
            8.0 * static_cast<double>(n) * static_cast<double>(n + 1) / (dat.ps[i] * dat.qs[i]);
        fmt::print("{:>5} {:>5} {:>6}  {:<8} {:>8.1f}% {:>10} {:>10.2f} GiB\n", dat.ps[i],
                   dat.qs[i], nb, mode, 100.0 * f, n, a / 0x1p30);
      }
    }
  }
  fmt::print(
      "\n'none' is plain HPL (no protection); the others keep the checkpoint in memory too.\n");
}

}  // namespace skt::hpl
