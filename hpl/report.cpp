#include "hpl/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>

namespace skt::hpl {

namespace {

const std::string kRule(80, '=');
const std::string kDash(80, '-');

// HPL prints lists 8 to a line, continued under the first value.
template <class T>
std::string listing(const char* label, const std::vector<T>& values,
                    const std::function<std::string(const T&)>& cell) {
  std::string s = fmt::format("\n{}:", label);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0 && i % 8 == 0) s += "\n        ";
    s += cell(values[i]);
  }
  return s;
}

std::string number(const int& v) {
  return fmt::format("{:8d} ", v);
}

std::string clock_text(std::time_t t) {
  char buffer[64] = {};
  ctime_r(&t, buffer);  // ends with a newline, as HPL's output does
  return buffer;
}

}  // namespace

Report::Report(const HplDat& dat, bool root) : root_(root), checking_(dat.threshold > 0) {
  if (!root_) return;
  if (dat.device == 6) {
    out_ = stdout;
  } else if (dat.device == 7) {
    out_ = stderr;
  } else {
    out_ = std::fopen(dat.output_file.c_str(), "w");
    if (out_ == nullptr) {
      open_error_ =
          fmt::format("cannot open {}, the output file that HPL.dat names (device out {}): {}",
                      dat.output_file, dat.device, std::strerror(errno));
      return;
    }
    owned_ = true;
  }
}

Report::~Report() {
  if (owned_) std::fclose(out_);
}

void Report::write(const std::string& text) {
  if (!root_) return;
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

void Report::raw(const std::string& text) {
  write(text);
}

double lu_share_done(int n, int nb, int panels) {
  if (n <= 0) return 1;
  const double left = std::max(0.0, static_cast<double>(n) - static_cast<double>(panels) * nb) / n;
  return 1 - left * left * left;
}

ProgressReport::ProgressReport(bool root, double every, int n, int nb, int p, int q, int panels,
                               int first_panel, double now)
    : on_(root && every > 0),
      every_(every),
      n_(n),
      nb_(nb),
      p_(p),
      q_(q),
      panels_(panels),
      first_panel_(first_panel),
      started_(now),
      last_(now) {}

void ProgressReport::at(int panel, double now) {
  if (!on_ || now - last_ < every_) return;
  last_ = now;
  fmt::print(stderr, "{}\n", line(panel, now - started_));
  std::fflush(stderr);
}

std::string ProgressReport::line(int panel, double elapsed) const {
  const double at_start = lu_share_done(n_, nb_, first_panel_);
  const double done = lu_share_done(n_, nb_, panel);
  std::string to_go;
  if (done > at_start && elapsed > 0) {
    to_go = fmt::format(", about {:.0f} s to go", (1 - done) * elapsed / (done - at_start));
  }
  return fmt::format(
      "skt-hpl: N={} NB={} {}x{}: panel {} of {}, {:.0f} % of the flops done, {:.0f} s{}{}", n_,
      nb_, p_, q_, panel, panels_, std::floor(100 * done), elapsed,
      first_panel_ > 0 ? fmt::format(" since the restore at panel {}", first_panel_) : "", to_go);
}

double Report::gflops(int n, double seconds) {
  const double dn = n;
  return seconds > 0 ? (dn / 1.0e9) * (dn / seconds) * (2.0 / 3.0 * dn + 1.5) : 0.0;
}

void Report::banner_and_parameters(const HplDat& d) {
  std::string s = kRule + "\n";
  s += "SKT-HPL 0.1  --  self-checkpointing High-Performance Linpack  --  selfckpt\n";
  s += "Input and output after HPLinpack 2.3 (A. Petitet, R. C. Whaley, P. Luszczek, J. Langou)\n";
  s += "Written for selfckpt: in-memory checkpoints survive the loss of a node\n";
  s += kRule + "\n\n";
  s += "An explanation of the input/output parameters follows:\n";
  s += "T/V    : Wall time / encoded variant.\n";
  s += "N      : The order of the coefficient matrix A.\n";
  s += "NB     : The partitioning blocking factor.\n";
  s += "P      : The number of process rows.\n";
  s += "Q      : The number of process columns.\n";
  s += "Time   : Time in seconds to solve the linear system.\n";
  s += "Gflops : Rate of execution for solving the linear system.\n\n";
  s += "The following parameter values will be used:\n";
  s += listing<int>("N     ", d.ns, number);
  s += listing<int>("NB    ", d.nbs, number);
  s += d.column_major_map ? "\nPMAP   : Column-major process mapping"
                          : "\nPMAP   : Row-major process mapping";
  s += listing<int>("P     ", d.ps, number);
  s += listing<int>("Q     ", d.qs, number);
  const std::function<std::string(const Fact&)> fact = [](const Fact& f) {
    return fmt::format("{:>8} ", fact_name(f));
  };
  s += listing<Fact>("PFACT ", d.pfacts, fact);
  s += listing<int>("NBMIN ", d.nbmins, number);
  s += listing<int>("NDIV  ", d.ndivs, number);
  s += listing<Fact>("RFACT ", d.rfacts, fact);
  const std::function<std::string(const Bcast&)> bcast = [](const Bcast& b) {
    return fmt::format("{:>8} ", bcast_name(b));
  };
  s += listing<Bcast>("BCAST ", d.bcasts, bcast);
  s += listing<int>("DEPTH ", d.depths, number);
  switch (d.swap) {
    case SwapAlgo::binary_exchange:
      s += "\nSWAP   : Binary-exchange";
      break;
    case SwapAlgo::spread_roll:
      s += "\nSWAP   : Spread-roll (long)";
      break;
    case SwapAlgo::mix:
      s += fmt::format("\nSWAP   : Mix (threshold = {})", d.swap_threshold);
      break;
  }
  s += d.l1_notrans ? "\nL1     : no-transposed form" : "\nL1     : transposed form";
  s += d.u_notrans ? "\nU      : no-transposed form" : "\nU      : transposed form";
  s += d.equil ? "\nEQUIL  : yes" : "\nEQUIL  : no";
  s += fmt::format("\nALIGN  : {} double precision words\n\n", d.align);
  if (!checking_) {
    write(s);
    return;
  }
  s += kDash + "\n\n";
  s += "- The matrix A is randomly generated for each test.\n";
  s += "- The following scaled residual check will be computed:\n";
  s += "      ||Ax-b||_oo / ( eps * ( || x ||_oo * || A ||_oo + || b ||_oo ) * N )\n";
  s += fmt::format("- The relative machine precision (eps) is taken to be      {:21.6e}\n",
                   kHplEpsilon);
  s += fmt::format(
      "- Computational tests pass if scaled residuals are less than         {:11.1f}\n\n",
      d.threshold);
  write(s);
}

std::string Report::result(const std::string& variant, int n, int nb, int p, int q, double seconds,
                           std::time_t start, std::time_t end) {
  std::string s = kRule + "\n";
  s += "T/V                N    NB     P     Q               Time                 Gflops\n";
  s += kDash + "\n";
  s += fmt::format("{}{:12d} {:5d} {:5d} {:5d} {:18.2f}    {:19.4e}\n", variant, n, nb, p, q,
                   seconds, gflops(n, seconds));
  s += "HPL_pdgesv() start time " + clock_text(start) + "\n";
  s += "HPL_pdgesv() end time   " + clock_text(end) + "\n";
  write(s);
  return s;
}

std::string Report::residual(const Residual& r, double threshold) {
  const bool passed = r.scaled < threshold;
  std::string s = kDash + "\n";
  s += fmt::format("||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)= {:16.8e} ...... {}\n",
                   r.scaled, passed ? "PASSED" : "FAILED");
  if (!passed) {
    s += fmt::format("||Ax-b||_oo  . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_r);
    s += fmt::format("||A||_oo . . . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_a);
    s += fmt::format("||A||_1  . . . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_a1);
    s += fmt::format("||x||_oo . . . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_x);
    s += fmt::format("||x||_1  . . . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_x1);
    s += fmt::format("||b||_oo . . . . . . . . . . . . . . . . . . . = {:18.6f}\n", r.norm_b);
  }
  write(s);
  return s;
}

std::string Report::line(const std::string& text) {
  const std::string s = text + "\n";
  write(s);
  return s;
}

void Report::summary(int tests, int passed, int failed, int skipped) {
  std::string s = kRule + "\n\n";
  s += fmt::format("Finished {:6d} tests with the following results:\n", tests);
  if (checking_) {
    s += fmt::format("         {:6d} tests completed and passed residual checks,\n", passed);
    s += fmt::format("         {:6d} tests completed and failed residual checks,\n", failed);
  } else {
    s += fmt::format("         {:6d} tests completed without checking,\n", passed);
  }
  s += fmt::format("         {:6d} tests skipped because of illegal input values.\n", skipped);
  s += kDash + "\n\nEnd of Tests.\n" + kRule + "\n";
  write(s);
}

}  // namespace skt::hpl
