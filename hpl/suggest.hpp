// --suggest-n: the largest N that fits a node's memory, for each grid and NB of an HPL.dat, in
// each checkpointing mode, with the groups the library would make of the grid's ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hpl/hpldat.hpp"

namespace skt::hpl {

// What the ranks of one node may take, and where that figure comes from (said in the heading).
struct NodeMemory {
  double bytes = 0;
  std::string origin;
};

// --mem-per-node: a node's whole memory, like 64G or 68719476736, of which an eighth is left to the
// system, Open MPI and the 1/32 the library keeps free. Throws std::invalid_argument on a bad size.
NodeMemory given_node_memory(const std::string& text);

// This machine as the library will judge it: MemAvailable, less what other programs' shared
// segments may still take and the 1/32 of the memory the library keeps free; or a memory cgroup's
// room less 1/32 of its limit (Slurm's --mem), where that is less. Nothing where the kernel does
// not say.
std::optional<NodeMemory> this_node_memory();

// The library's settings that decide a checkpoint's memory.
struct GroupSettings {
  int group_size = 4;  // SKT_GROUP_SIZE
  int parity = 1;      // SKT_PARITY (1 for xor and sum)
};
// From SKT_GROUP_SIZE and SKT_PARITY (skt-hpl's --group-size and --parity set them).
GroupSettings group_settings_from_environment();

// Memory left to the matrix: the usable fraction of a mode for groups of g with m parities.
double usable_fraction(const std::string& mode, int g, int m);

// Any N runs; a multiple of lcm(NB·P, NB·Q) gives every process the same share of the matrix,
// which uses every node's memory to the full.
long partition_step(int nb, int p, int q);

// The largest N, a multiple of lcm(NB·P, NB·Q), whose [A|b] share fits `bytes` per rank.
long largest_n(double bytes, int nb, int p, int q);

// What skt-hpl takes per rank beside the matrix at N: the panels' buffers (look-ahead depth + 1 of
// the local rows by NB), the swaps' five of NB by the local columns where P > 1, and 128 MiB for
// the program, OpenBLAS's buffer and Open MPI.
double work_bytes(long n, int nb, int p, int q, int depth);

// The members of the smallest group the library makes of a P·Q grid's ranks, ranks_per_node to a
// node in launch order, or without it all on this host, each its own SKT_NODE (as a test on one
// host runs them). 1 where group_size is 1; throws skt::Error (SKT_ERR_CONFIG) with the planner's
// reason where the ranks cannot be grouped, as the library would refuse the run: a grid no larger
// than a node has no node to protect it against.
int smallest_group(int ranks, std::optional<int> ranks_per_node, const GroupSettings& settings);

// One row of the table: the largest N whose matrix, a mode's checkpoint memory beside it and the
// work buffers fit the node's memory shared by its ranks.
struct Sizing {
  int members = 1;  // of the smallest group
  double usable = 1;
  long n = 0;
  double matrix_bytes = 0;  // [A|b] per rank
};
Sizing size_for(const NodeMemory& node, std::optional<int> ranks_per_node, int p, int q, int nb,
                int depth, const std::string& mode, const GroupSettings& settings);

// The table for every grid and NB of `dat`: ranks_per_node to a node, or without it every rank of
// a grid on this host, each its own SKT_NODE.
void print_suggestions(const HplDat& dat, const NodeMemory& node, std::optional<int> ranks_per_node,
                       const GroupSettings& settings);

}  // namespace skt::hpl
