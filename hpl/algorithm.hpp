// The algorithmic variant of one HPL run, and the local view of the distributed matrix.
#pragma once

#include <cstdint>
#include <string>

#include "hpl/hpldat.hpp"

namespace skt::hpl {

struct Algorithm {
  Fact pfact = Fact::right;  // panel factorization at the bottom of the recursion
  Fact rfact = Fact::right;  // recursive panel factorization
  int nbmin = 4;             // recursion stops at this many columns
  int ndiv = 2;              // sub-panels per recursion level
  Bcast bcast = Bcast::ring_modified;
  int depth = 1;  // look-ahead
  SwapAlgo swap = SwapAlgo::mix;
  int swap_threshold = 64;  // columns, for the mixed swap
  bool l1_notrans = false;
  bool u_notrans = false;
  bool equil = true;
  int align = 8;  // doubles

  // HPL's encoding of the variant in the T/V column, e.g. "WR11C2R4".
  std::string encode(bool column_major_map) const;
};

// This process's part of the N × (N+1) matrix [A|b], column-major.
struct LocalMatrix {
  double* a = nullptr;
  int lda = 0;
  int mp = 0;  // local rows
  int nq = 0;  // local columns, b included where this process column owns it
  int n = 0;
  int nb = 0;
};

}  // namespace skt::hpl
