#include "hpl/suggest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <stdexcept>

#include "libselfckpt/internal/memory.hpp"
#include "libselfckpt/internal/planner.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt::hpl {

namespace {

constexpr double kGiB = 0x1p30;

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
  if (used == 0 || scale < 0 || value <= 0 || !std::isfinite(value * scale)) {
    throw std::invalid_argument("--mem-per-node: '" + text +
                                "' is not a size (bytes, or 512M, 64G, 1T)");
  }
  return value * scale;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

long blocks_of(long n, int nb, int p) {
  return (n + static_cast<long>(nb) * p - 1) / (static_cast<long>(nb) * p);
}

}  // namespace

NodeMemory given_node_memory(const std::string& text) {
  const double bytes = parse_bytes(text);
  return {bytes - bytes / 8,
          fmt::format("{} per node, an eighth of it left to the system, Open MPI and what the "
                      "library keeps free",
                      text)};
}

std::optional<NodeMemory> this_node_memory() {
  const std::optional<MachineMemory> machine = machine_memory();
  if (!machine) return std::nullopt;
  // As the library's own check before it makes a job's segments (Session::refuse_beyond_memory).
  const std::uint64_t promised =
      promised_to_others(shared_segments(), {}, reserved_huge_page_bytes());
  const double free_of_others =
      machine->available > promised ? static_cast<double>(machine->available - promised) : 0;
  NodeMemory node{
      std::max(0.0, free_of_others - static_cast<double>(machine->total) / 32),
      fmt::format("this machine: MemAvailable {:.1f} GiB{}, less 1/32 of its memory "
                  "that the library keeps free",
                  static_cast<double>(machine->available) / kGiB,
                  promised == 0 ? std::string()
                                : fmt::format(", less {:.1f} GiB other programs' shared "
                                              "segments may still take",
                                              static_cast<double>(promised) / kGiB))};
  for (const MemoryLimit& limit : own_memory_limits()) {
    const double room =
        std::max(0.0, static_cast<double>(limit.room) - static_cast<double>(limit.limit) / 32);
    if (room >= node.bytes) continue;
    node = {room, fmt::format("the memory cgroup {}: {:.2f} GiB left of its limit of {:.2f} GiB, "
                              "less 1/32 of the limit that the library keeps free",
                              limit.directory, static_cast<double>(limit.room) / kGiB,
                              static_cast<double>(limit.limit) / kGiB)};
  }
  return node;
}

GroupSettings group_settings_from_environment() {
  return {env_int("SKT_GROUP_SIZE", 4), env_int("SKT_PARITY", 1)};
}

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

double work_bytes(long n, int nb, int p, int q, int depth) {
  const double rows = static_cast<double>(blocks_of(n, nb, p)) * nb;
  const double columns = static_cast<double>(blocks_of(n + 1, nb, q)) * nb;
  const double panels = (std::max(0, depth) + 1) * rows * nb;
  const double swaps = p > 1 ? 5 * columns * nb : 0;
  return 8 * (panels + swaps) + 128 * 0x1p20;
}

int smallest_group(int ranks, std::optional<int> ranks_per_node, const GroupSettings& settings) {
  if (settings.group_size <= 1) return 1;
  // Named as the planner's message will name them to the user: node 1, 2, ... in launch order.
  std::vector<std::string> domain_of_rank;
  for (int r = 0; r < ranks; ++r)
    domain_of_rank.push_back(std::to_string(1 + (ranks_per_node ? r / *ranks_per_node : r)));
  const GroupPlan plan = plan_groups(domain_of_rank, settings.group_size, settings.parity + 1);
  int smallest = ranks;
  for (int g = 0; g < plan.groups(); ++g)
    smallest = std::min(smallest, plan.size_of(g));
  return smallest;
}

Sizing size_for(const NodeMemory& node, std::optional<int> ranks_per_node, int p, int q, int nb,
                int depth, const std::string& mode, const GroupSettings& settings) {
  Sizing s;
  const int ranks = p * q;
  const int here = std::min(ranks, ranks_per_node.value_or(ranks));
  s.members = mode == "none" ? 1 : smallest_group(ranks, ranks_per_node, settings);
  s.usable = usable_fraction(mode, s.members, settings.parity);
  const double per_rank = node.bytes / here;
  const long step = partition_step(nb, p, q);
  auto matrix = [&](long n) {
    return 8.0 * static_cast<double>(n) * static_cast<double>(n + 1) / ranks;
  };
  auto fits = [&](long n) {
    return matrix(n) / s.usable + work_bytes(n, nb, p, q, depth) <= per_rank;
  };
  // The matrix alone bounds N from above; the work buffers take it down from there.
  long n = largest_n(per_rank * s.usable, nb, p, q);
  while (n > 0 && !fits(n))
    n -= step;
  s.n = std::max(0L, n);
  s.matrix_bytes = matrix(s.n);
  return s;
}

void print_suggestions(const HplDat& dat, const NodeMemory& node, std::optional<int> ranks_per_node,
                       const GroupSettings& settings) {
  fmt::print(
      "Largest N (a multiple of lcm(NB·P, NB·Q): every rank holds the same share) for {:.2f} GiB "
      "per node ({}), {}, in groups of at most {} (SKT_GROUP_SIZE) with {} parity chunk{}:\n\n",
      node.bytes / kGiB, node.origin,
      ranks_per_node
          ? fmt::format("{} rank{} per node", *ranks_per_node, *ranks_per_node == 1 ? "" : "s")
          : "every rank of a grid on this node (each its own SKT_NODE; "
            "--ranks-per-node spreads them)",
      settings.group_size, settings.parity, settings.parity == 1 ? "" : "s");
  fmt::print("{:>5} {:>5} {:>6} {:>6}  {:<8} {:>7} {:>9} {:>10} {:>14}\n", "P", "Q", "NB", "ranks",
             "mode", "group", "usable", "N", "A per rank");
  const int depth =
      dat.depths.empty() ? 1 : *std::max_element(dat.depths.begin(), dat.depths.end());
  std::vector<std::string> refused;
  for (std::size_t i = 0; i < dat.ps.size(); ++i) {
    const int p = dat.ps[i], q = dat.qs[i];
    const std::string grid = ranks_per_node
                                 ? fmt::format("{}x{} at {} per node", p, q, *ranks_per_node)
                                 : fmt::format("{}x{}", p, q);
    for (const int nb : dat.nbs) {
      for (const char* mode : {"none", "self", "double", "single"}) {
        try {
          const Sizing s = size_for(node, ranks_per_node, p, q, nb, depth, mode, settings);
          fmt::print("{:>5} {:>5} {:>6} {:>6}  {:<8} {:>7} {:>8.1f}% {:>10} {:>10.2f} GiB\n", p, q,
                     nb, p * q, mode, s.members, 100.0 * s.usable, s.n, s.matrix_bytes / kGiB);
        } catch (const Error& e) {
          fmt::print("{:>5} {:>5} {:>6} {:>6}  {:<8} {:>7} {:>9} {:>10} {:>14}\n", p, q, nb, p * q,
                     mode, "-", "-", "-", "-");
          refused.push_back(fmt::format("{}: {}", grid, e.what()));
        }
      }
    }
  }
  fmt::print(
      "\n'none' is --no-checkpoint (plain HPL, no protection); the others keep the checkpoint in "
      "memory too, in groups of the size shown (the smallest the library makes of the grid's "
      "ranks). Each rank also takes the panels' and swaps' buffers (depth {}) and 128 MiB for the "
      "program, OpenBLAS and Open MPI.\n",
      depth);
  refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
  for (const std::string& reason : refused)
    fmt::print("{}\n", reason);
}

}  // namespace skt::hpl
