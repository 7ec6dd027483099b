#include "hpl/hpldat.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace skt::hpl {

namespace {

constexpr int kMaxValues = 20;  // HPL_MAX_PARAM

class Lines {
 public:
  Lines(const std::string& text, std::string file) : file_(std::move(file)) {
    std::stringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();  // files written on Windows
      lines_.push_back(line);
    }
  }

  // Line `n` (1-based), which must exist.
  const std::string& at(int n, const char* what) const {
    if (n > static_cast<int>(lines_.size())) {
      throw HplDatError(file_, n, fmt::format("missing line: expected {}", what));
    }
    return lines_[static_cast<std::size_t>(n - 1)];
  }

  // The first `count` whitespace-separated tokens of line `n`.
  std::vector<std::string> tokens(int n, std::size_t count, const char* what) const {
    std::stringstream in(at(n, what));
    std::vector<std::string> out;
    std::string token;
    while (out.size() < count && in >> token)
      out.push_back(token);
    if (out.size() < count) {
      throw HplDatError(file_, n,
                        fmt::format("expected {} value{} for {}, found {}", count,
                                    count == 1 ? "" : "s", what, out.size()));
    }
    return out;
  }

  int integer(int n, const std::string& token, const char* what) const {
    int v = 0;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size()) {
      throw HplDatError(file_, n, fmt::format("'{}' is not an integer ({})", token, what));
    }
    return v;
  }

  std::vector<int> integers(int count_line, int values_line, const char* what, int minimum) const {
    const int count = integer(count_line, tokens(count_line, 1, what)[0], what);
    if (count < 1 || count > kMaxValues) {
      throw HplDatError(
          file_, count_line,
          fmt::format("the number of {} must be from 1 to {}, not {}", what, kMaxValues, count));
    }
    std::vector<int> values;
    for (const auto& t : tokens(values_line, static_cast<std::size_t>(count), what)) {
      const int v = integer(values_line, t, what);
      if (v < minimum) {
        throw HplDatError(file_, values_line,
                          fmt::format("{} must be at least {}, not {}", what, minimum, v));
      }
      values.push_back(v);
    }
    return values;
  }

  // A code netlib HPL replaces by a default when it is out of range: recorded, run as netlib does.
  void substitute(std::vector<std::string>& substitutions, int n, const std::string& what_was_read,
                  const std::string& what_runs) const {
    substitutions.push_back(fmt::format("{}:{}: {}: netlib HPL runs it as {}, and so does this run",
                                        file_, n, what_was_read, what_runs));
  }

  // Codes from 0 to `highest`, another taken as `fallback` the way netlib HPL takes it.
  template <class E>
  std::vector<E> codes(int count_line, int values_line, const char* what, int highest, E fallback,
                       const char* (*name)(E) noexcept,
                       std::vector<std::string>& substitutions) const {
    std::vector<E> out;
    for (const int v : integers(count_line, values_line, what, std::numeric_limits<int>::min())) {
      if (v < 0 || v > highest) {
        substitute(substitutions, values_line,
                   fmt::format("{} code {} is not one of 0 to {}", what, v, highest),
                   fmt::format("{} ({})", static_cast<int>(fallback), name(fallback)));
        out.push_back(fallback);
      } else {
        out.push_back(static_cast<E>(v));
      }
    }
    return out;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<std::string> lines_;
};

}  // namespace

HplDatError::HplDatError(const std::string& file, int line, const std::string& what)
    : std::runtime_error(fmt::format("{}:{}: {}", file, line, what)), line_(line) {}

HplDat parse_hpldat(const std::string& text, const std::string& file_name) {
  const Lines l(text, file_name);
  HplDat d;
  l.at(1, "the title line");
  l.at(2, "the second title line");
  d.output_file = l.tokens(3, 1, "the output file name")[0];
  d.device = l.integer(4, l.tokens(4, 1, "the device out")[0], "device out");
  d.ns = l.integers(5, 6, "N", 0);
  d.nbs = l.integers(7, 8, "NB", 1);
  const int pmap = l.integer(9, l.tokens(9, 1, "PMAP")[0], "PMAP");
  if (pmap != 0 && pmap != 1) {
    l.substitute(d.substitutions, 9,
                 fmt::format("PMAP {} is neither 0 (row-major) nor 1 (column-major)", pmap),
                 "0 (row-major)");
  }
  d.column_major_map = pmap == 1;
  d.ps = l.integers(10, 11, "P", 1);
  const int grids = static_cast<int>(d.ps.size());
  const auto q_tokens = l.tokens(12, static_cast<std::size_t>(grids), "Q (as many as P)");
  for (const auto& t : q_tokens) {
    const int q = l.integer(12, t, "Q");
    if (q < 1) throw HplDatError(file_name, 12, fmt::format("Q must be at least 1, not {}", q));
    d.qs.push_back(q);
  }
  {
    const std::string token = l.tokens(13, 1, "the threshold")[0];
    char* end = nullptr;
    errno = 0;
    d.threshold = std::strtod(token.c_str(), &end);
    if (end == token.c_str() || *end != '\0' || errno != 0 || !std::isfinite(d.threshold)) {
      throw HplDatError(file_name, 13, fmt::format("'{}' is not a number (threshold)", token));
    }
  }
  d.pfacts = l.codes<Fact>(14, 15, "PFACT", 2, Fact::right, fact_name, d.substitutions);
  d.nbmins = l.integers(16, 17, "NBMIN", 1);
  d.ndivs = l.integers(18, 19, "NDIV", 2);
  d.rfacts = l.codes<Fact>(20, 21, "RFACT", 2, Fact::right, fact_name, d.substitutions);
  d.bcasts = l.codes<Bcast>(22, 23, "BCAST", 5, Bcast::ring_modified, bcast_name, d.substitutions);
  d.depths = l.integers(24, 25, "DEPTH", 0);
  const int swap = l.integer(26, l.tokens(26, 1, "SWAP")[0], "SWAP");
  if (swap < 0 || swap > 2) {
    l.substitute(d.substitutions, 26,
                 fmt::format("SWAP {} is not 0 (bin-exch), 1 (long) or 2 (mix)", swap), "1 (long)");
  }
  d.swap = swap >= 0 && swap <= 2 ? static_cast<SwapAlgo>(swap) : SwapAlgo::spread_roll;
  d.swap_threshold = std::max(
      0, l.integer(27, l.tokens(27, 1, "the swapping threshold")[0], "swapping threshold"));
  // netlib's default for a flag other than 0 and 1: the transposed forms, and equilibration.
  auto flag = [&](int n, const char* what, bool fallback) {
    const int v = l.integer(n, l.tokens(n, 1, what)[0], what);
    if (v != 0 && v != 1) {
      l.substitute(d.substitutions, n, fmt::format("{} {} is neither 0 nor 1", what, v),
                   fallback ? "1" : "0");
      return fallback;
    }
    return v == 1;
  };
  d.l1_notrans = flag(28, "L1 form", false);
  d.u_notrans = flag(29, "U form", false);
  d.equil = flag(30, "Equilibration", true);
  d.align = l.integer(31, l.tokens(31, 1, "the memory alignment")[0], "memory alignment");
  if (d.align < 1) {
    l.substitute(d.substitutions, 31,
                 fmt::format("a memory alignment of {} doubles is below 1", d.align), "4");
    d.align = 4;
  }
  return d;
}

HplDat read_hpldat(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw HplDatError(path, 0, "cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_hpldat(text.str(), path);
}

const char* fact_name(Fact f) noexcept {
  switch (f) {
    case Fact::left:
      return "Left";
    case Fact::crout:
      return "Crout";
    case Fact::right:
      return "Right";
  }
  return "?";
}

const char* bcast_name(Bcast b) noexcept {
  switch (b) {
    case Bcast::ring:
      return "1ring";
    case Bcast::ring_modified:
      return "1ringM";
    case Bcast::two_rings:
      return "2ring";
    case Bcast::two_rings_modified:
      return "2ringM";
    case Bcast::spread:
      return "Blong";
    case Bcast::spread_modified:
      return "BlongM";
  }
  return "?";
}

const char* const kNetlibDefault = R"(HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
6            device out (6=stdout,7=stderr,file)
4            # of problems sizes (N)
29 30 34 35  Ns
4            # of NBs
1 2 3 4      NBs
0            PMAP process mapping (0=Row-,1=Column-major)
3            # of process grids (P x Q)
2 1 4        Ps
2 4 1        Qs
16.0         threshold
3            # of panel fact
0 1 2        PFACTs (0=left, 1=Crout, 2=Right)
2            # of recursive stopping criterium
2 4          NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
3            # of recursive panel fact.
0 1 2        RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
0            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
0            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
)";

}  // namespace skt::hpl
