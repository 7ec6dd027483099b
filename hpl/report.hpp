// Output in HPL's format, so that scripts parsing HPL output keep working: the parameter echo,
// T/V rows, the residual line and the summary. Rank 0 writes; the others stay silent.
#pragma once

#include <cstdio>
#include <ctime>
#include <string>

#include "hpl/hpldat.hpp"
#include "hpl/verify.hpp"

namespace skt::hpl {

class Report {
 public:
  // Opens the output HPL.dat names (device 6: stdout, 7: stderr, else the file) on rank 0, which
  // says in open_error() why the file could not be opened ("" once it is): nothing may be written
  // then.
  Report(const HplDat& dat, bool root);
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  const std::string& open_error() const noexcept { return open_error_; }
  void banner_and_parameters(const HplDat& dat);
  // One test's lines; returns the text written, for reprinting after a relaunch.
  std::string result(const std::string& variant, int n, int nb, int p, int q, double seconds,
                     std::time_t start, std::time_t end);
  std::string residual(const Residual& r, double threshold);
  std::string line(const std::string& text);  // an SKT line of this test
  void raw(const std::string& text);          // previously written text, as it was
  // With a threshold ≤ 0 (no residual checks), `passed` counts the tests completed without one.
  void summary(int tests, int passed, int failed, int skipped);

  static double gflops(int n, double seconds);

 private:
  void write(const std::string& text);
  bool root_;
  bool checking_;  // the threshold is positive: residuals are checked
  std::FILE* out_ = nullptr;
  bool owned_ = false;
  std::string open_error_;
};

// The share of an LU's flops done once `panels` panels of `nb` columns have updated all of an
// n×n matrix: 1 - (the order left)³ / n³, since the first panels carry the most.
double lu_share_done(int n, int nb, int panels);

// A long test's progress on stderr from rank 0, every `every` seconds (never when ≤ 0), outside
// HPL's output, which scripts parse: the panel, the share of the flops done, and the time to go
// at this launch's pace so far.
class ProgressReport {
 public:
  // A test of `panels` panels that this launch starts at `first_panel`, at time `now`.
  ProgressReport(bool root, double every, int n, int nb, int p, int q, int panels, int first_panel,
                 double now);
  // Panel `panel` is factored.
  void at(int panel, double now);
  // The line for panel `panel`, `elapsed` seconds after this launch's start.
  std::string line(int panel, double elapsed) const;

 private:
  bool on_;
  double every_;
  int n_, nb_, p_, q_, panels_, first_panel_;
  double started_, last_;
};

}  // namespace skt::hpl
