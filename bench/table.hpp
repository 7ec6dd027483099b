// Output of every benchmark: an aligned table on stdout and the same rows in a CSV file. Text
// columns may be given a width of their own; a cell wider than its column still keeps a space
// before it, and CSV cells holding commas or quotes are quoted.
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
  Table(std::vector<std::string> columns, const std::string& csv_path, bool print = true,
        std::vector<int> widths = {})
      : columns_(std::move(columns)), widths_(std::move(widths)), print_(print) {
    widths_.resize(columns_.size(), kDefaultWidth);
    if (!csv_path.empty()) {
      csv_.open(csv_path);
      if (!csv_) throw std::runtime_error("cannot write " + csv_path);
    }
    emit(columns_);
  }

  void row(const std::vector<std::string>& cells) { emit(cells); }

 private:
  static constexpr int kDefaultWidth = 14;

  static std::string csv_cell(const std::string& cell) {
    if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
    std::string quoted = "\"";
    for (const char c : cell) {
      quoted += c;
      if (c == '"') quoted += '"';
    }
    return quoted + '"';
  }

  void emit(const std::vector<std::string>& cells) {
    if (csv_.is_open()) {
      for (std::size_t i = 0; i < cells.size(); ++i)
        csv_ << (i ? "," : "") << csv_cell(cells[i]);
      csv_ << '\n';
      csv_.flush();
    }
    if (print_) {
      std::string line;
      for (std::size_t i = 0; i < cells.size(); ++i) {
        const int width = i < widths_.size() ? widths_[i] : kDefaultWidth;
        line += fmt::format(" {:>{}}", cells[i], width - 1);
      }
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }
  }

  std::vector<std::string> columns_;
  std::vector<int> widths_;
  std::ofstream csv_;
  bool print_;
};

inline std::string num(double v, int digits = 3) {
  return fmt::format("{:.{}f}", v, digits);
}

}  // namespace skt::bench
