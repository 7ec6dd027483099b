// --suggest-n: the largest N that fits a node's memory, for each grid and NB of an HPL.dat, in
// each checkpointing mode.
#pragma once

#include <string>
#include <vector>

#include "hpl/hpldat.hpp"

namespace skt::hpl {

// `memory` per node, like 64G or 68719476736; the group size and parity come from SKT_GROUP_SIZE
// and SKT_PARITY (defaults 4 and 1). Throws std::invalid_argument on a bad size.
void print_suggestions(const HplDat& dat, const std::string& memory, int ranks_per_node);

// Memory left to the matrix: the usable fraction of a mode for groups of g with m parities.
double usable_fraction(const std::string& mode, int g, int m);

// Any N runs; a multiple of lcm(NB·P, NB·Q) gives every process the same share of the matrix,
// which uses every node's memory to the full.
long partition_step(int nb, int p, int q);

// The largest N, a multiple of lcm(NB·P, NB·Q), whose [A|b] share fits `bytes` per rank.
long largest_n(double bytes, int nb, int p, int q);

}  // namespace skt::hpl
