// Output of every benchmark: an aligned table on stdout and the same rows in a CSV file.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace skt::bench {

class Table {
 public:
  Table(std::vector<std::string> columns, const std::string& csv_path, bool print = true)
      : columns_(std::move(columns)), print_(print) {
    if (!csv_path.empty()) {
      csv_.open(csv_path);
      if (!csv_) throw std::runtime_error("cannot write " + csv_path);
      for (std::size_t i = 0; i < columns_.size(); ++i)
        csv_ << (i ? "," : "") << columns_[i];
      csv_ << '\n';
    }
    if (print_) {
      std::string line;
      for (const auto& c : columns_)
        line += fmt::format("{:>14}", c);
      fmt::print("{}\n", line);
    }
  }

  void row(const std::vector<std::string>& cells) {
    if (csv_.is_open()) {
      for (std::size_t i = 0; i < cells.size(); ++i)
        csv_ << (i ? "," : "") << cells[i];
      csv_ << '\n';
      csv_.flush();
    }
    if (print_) {
      std::string line;
      for (const auto& c : cells)
        line += fmt::format("{:>14}", c);
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }
  }

 private:
  std::vector<std::string> columns_;
  std::ofstream csv_;
  bool print_;
};

inline std::string num(double v, int digits = 3) {
  return fmt::format("{:.{}f}", v, digits);
}

}  // namespace skt::bench
