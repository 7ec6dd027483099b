// Right-looking LU with partial pivoting of the distributed [A|b], and the back substitution.
//
// Iteration j factors panel j (global columns j·NB ..) in its process column, recursively, with a
// replicated copy T of the panel's pivot rows on every process of that column; broadcasts L, T and
// the pivots along the process rows; swaps the rows of the trailing columns and spreads U (the
// panel's rows of them) down the process columns; and updates the trailing matrix with one DGEMM.
// With look-ahead depth d, as in HPL_pdgesvK2, up to d panels are in flight: each new panel's
// columns receive the updates of the panels in flight (oldest first) and the panel is factored and
// sent; then the oldest panel updates the rest of the matrix. So the full trailing update lags d
// panels behind the factorization, and every column still receives the panels in order. b is the
// last column, so L never needs keeping: when the factorization ends, column N holds the solution
// of Ly = Pb.
#pragma once

#include <mpi.h>

#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "encoders/group.hpp"
#include "hpl/algorithm.hpp"
#include "hpl/grid.hpp"
#include "hpl/patterns.hpp"

namespace skt::hpl {

class Factorization {
 public:
  Factorization(const Grid& grid, const Algorithm& algorithm, const LocalMatrix& matrix);
  ~Factorization();
  Factorization(const Factorization&) = delete;
  Factorization& operator=(const Factorization&) = delete;

  int panels() const noexcept { return (matrix_.n + matrix_.nb - 1) / matrix_.nb; }

  // Factors panels first .. panels()-1. Once panel j is factored and sent, and before its update
  // is applied anywhere, `checkpoint_due(j)` (called on every rank) says whether to take a
  // checkpoint after it: then every panel in flight is applied in full and `checkpoint(j + 1)`
  // runs at that iteration boundary, with no look-ahead state outstanding.
  void factor(int first, const std::function<bool(int)>& checkpoint_due,
              const std::function<void(int)>& checkpoint);

  // Solves U x = y once factored; x (all N entries) is returned on every rank of the grid.
  std::vector<double> solve();

  // 0, or 1 + the global column of the first zero pivot.
  int info() const noexcept { return info_; }

  // Seconds this rank spent in each phase, like HPL's detailed timing.
  struct Timing {
    double factor = 0;   // panel factorization, pivot search included
    double receive = 0;  // waiting for panels
    double swap = 0;     // row swaps and U's spread
    double trsm = 0;
    double update = 0;  // the trailing DGEMM
    double solve = 0;
  };
  const Timing& timing() const noexcept { return timing_; }

 private:
  struct Panel;
  // Panel j in this process's part of column `pcol`: factor it and start its broadcast.
  void factor_and_send(int j);
  // Panel j is here: its pivots and T, and this process row's L rows.
  void receive(int j);
  // Panel j, received if it was not yet, applied to local columns [begin, end).
  void apply_received(int j, int begin, int end, bool in_pieces = false, int overlapped = -1);
  // Once panel p is factored and sent: every panel in flight applied in full, oldest first.
  void drain(int p);
  // Apply panel j to local columns [begin, end): swaps, U, update; the update in pieces if asked,
  // between which the broadcast of panel `overlapped` (if any) moves on.
  void apply(int j, int begin, int end, bool in_pieces = false, int overlapped = -1);
  // Whether an update that overlaps a panel's broadcast goes in pieces: whenever there is a
  // broadcast, along more than one process column.
  bool overlaps_in_pieces() const noexcept { return grid_.npcol() > 1; }
  // Panel p's local columns [begin, end) on this process (empty off its process column).
  std::pair<int, int> panel_columns(int p) const noexcept;
  // Panel j as it sits in its slot once received: its first global column and width, this
  // process row's L rows (from the panel's top), and where L, T and the pivots are.
  struct SlotView {
    int jn, jb, rows;
    const double* l;
    const double* t;
    const double* pivots;
  };
  SlotView slot_view(int j) const noexcept;
  // With more than one process row: the swaps between them, and U, solved, returned (jb × the
  // columns, column-major) on every process of the column.
  double* swap_and_spread(const SlotView& panel, int begin, int end);
  // U = L11^-1 U for jb × ncols of U, column-major with leading dimension jb.
  void solve_u(const double* t, int jb, int ncols, double* u) const;

  // Panel factorization, on the processes of the panel's column.
  void factor_segment(Panel& p, int c0, int n);
  void factor_base(Panel& p, int c0, int n);
  void pivot(Panel& p, int c);

  int slot(int j) const noexcept { return j % slots_; }
  void write_buffers_in_advance();
  // The first local column of global column j·NB on this process.
  int local_column(int j) const noexcept;

  const Grid& grid_;
  Algorithm algo_;
  LocalMatrix matrix_;
  int info_ = 0;
  Timing timing_;

  // Per slot (depth + 1: the panels in flight and the one being factored): packed L rows, T and
  // pivots, its broadcast, and the number of L rows (this process row's rows from the panel top).
  int slots_;
  std::vector<std::vector<double>> panel_;
  std::unique_ptr<PanelBroadcast[]> bcast_;
  std::vector<int> panel_rows_;
  std::deque<int> in_flight_;  // factored and sent, not yet applied in full; oldest first
  // Blocks of columns in the first piece of an overlapped update (the next ones double): fewer
  // tests of the broadcast, and DGEMMs wide enough to run at full speed.
  static constexpr int kUpdateBlocks = 4;
  // Columns of the rows a swap moves between processes, per message.
  static constexpr int kSwapChunkColumns = 256;

  std::vector<double> pivot_buffer_;
  MPI_Datatype pivot_type_ = MPI_DATATYPE_NULL;
  int pivot_type_width_ = 0;
  MPI_Op pivot_op_ = MPI_OP_NULL;

  // The swaps' buffers, by slot: written once at their largest, reused from one iteration to the
  // next, never zeroed.
  enum ScratchSlot : int { kU, kSharesIn, kPacked, kMovedIn, kMovedOut, kScratchSlots };
  double* scratch(ScratchSlot slot, std::size_t doubles) {
    return reinterpret_cast<double*>(scratch_.get(slot, doubles * sizeof(double)));
  }
  enc::ScratchPool scratch_;
};

}  // namespace skt::hpl
