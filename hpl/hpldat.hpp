// HPL.dat, the netlib input file: all its lines, every value, strict errors with line numbers.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace skt::hpl {

enum class Fact { left = 0, crout = 1, right = 2 };
enum class Bcast {
  ring = 0,
  ring_modified = 1,
  two_rings = 2,
  two_rings_modified = 3,
  spread = 4,
  spread_modified = 5
};
enum class SwapAlgo { binary_exchange = 0, spread_roll = 1, mix = 2 };

struct HplDat {
  std::string output_file;
  int device = 6;  // 6 stdout, 7 stderr, else the output file
  std::vector<int> ns;
  std::vector<int> nbs;
  bool column_major_map = false;  // PMAP: false row-major, true column-major
  std::vector<int> ps;
  std::vector<int> qs;
  double threshold = 16.0;
  std::vector<Fact> pfacts;
  std::vector<int> nbmins;
  std::vector<int> ndivs;
  std::vector<Fact> rfacts;
  std::vector<Bcast> bcasts;
  std::vector<int> depths;
  SwapAlgo swap = SwapAlgo::mix;
  int swap_threshold = 64;
  bool l1_notrans = false;
  bool u_notrans = false;
  bool equil = true;
  int align = 8;
  // Codes netlib HPL accepts outside their range and runs as one of its defaults (PFACT 3 as
  // Right, BCAST 6 as 1ringM, ...): each line says where, what was read and what runs instead.
  std::vector<std::string> substitutions;
};

// A problem in the input, with the line it comes from and what is wrong.
class HplDatError : public std::runtime_error {
 public:
  HplDatError(const std::string& file, int line, const std::string& what);
  int line() const noexcept { return line_; }

 private:
  int line_;
};

// Parses the text of an HPL.dat. Values netlib HPL refuses are errors, naming the line; text that
// is not a number is too (netlib would read it as 0). A code netlib replaces by a default (an
// unknown PFACT, BCAST or SWAP code, a PMAP, form or equilibration flag other than 0 and 1, an
// alignment below 1) runs as netlib runs it, and is listed in `substitutions`.
HplDat parse_hpldat(const std::string& text, const std::string& file_name = "HPL.dat");
HplDat read_hpldat(const std::string& path);

// The netlib default HPL.dat, as shipped with HPL 2.3.
extern const char* const kNetlibDefault;

const char* fact_name(Fact f) noexcept;    // "Left", "Crout", "Right"
const char* bcast_name(Bcast b) noexcept;  // "1ring", ... "BlongM"

}  // namespace skt::hpl
