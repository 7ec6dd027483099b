#include "hpl/lu.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "common/mpi.hpp"

namespace skt::hpl {

namespace {

// The pivot search of one column, as one reduction over the panel's process column: the buffer
// carries the candidate (|value|, global row, its whole panel row) and the row it replaces (from
// the process holding the diagonal block). Ties go to the smaller row, so the result does not
// depend on the order of the reduction.
extern "C" void pivot_reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const int width = bytes / static_cast<int>(sizeof(double));
  const int jb = (width - 3) / 2;
  for (int k = 0; k < *len; ++k) {
    const double* a = static_cast<const double*>(in) + static_cast<std::ptrdiff_t>(k) * width;
    double* b = static_cast<double*>(inout) + static_cast<std::ptrdiff_t>(k) * width;
    const bool better = a[0] > b[0] || (a[0] == b[0] && a[0] >= 0 && a[1] < b[1]);
    if (better) {
      b[0] = a[0];
      b[1] = a[1];
      std::memcpy(b + 3, a + 3, static_cast<std::size_t>(jb) * sizeof(double));
    }
    if (a[2] != 0) {
      b[2] = 1;
      std::memcpy(b + 3 + jb, a + 3 + jb, static_cast<std::size_t>(jb) * sizeof(double));
    }
  }
}

// Row accesses in a column-major matrix touch one cache line per row in every column, and each
// column starts a page or more after the last: no hardware prefetcher foresees the next column, so
// every line is a miss waited for in turn. The loops that walk rows across columns ask for the
// lines of the column this many columns ahead. At N = 12288 the swaps took 0.75-0.78 s instead of
// 0.90-1.24 s on 2x1 and 0.17 s instead of 0.29 s on 1x2 (three alternating pairs each; 2 to 8
// columns ahead did the same).
constexpr int kPrefetchColumns = 4;

// The lines of `rows` (local rows) of one column, for reading (0) or writing (1).
template <int kWrite>
void prefetch_rows(const double* column, const std::vector<int>& rows) {
  for (const int r : rows)
    __builtin_prefetch(column + r, kWrite);
}

std::size_t slot_size(int rows, int jb) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(jb) +
         static_cast<std::size_t>(jb) * static_cast<std::size_t>(jb) + static_cast<std::size_t>(jb);
}

}  // namespace

struct Factorization::Panel {
  int jn = 0;
  int jb = 0;
  bool top = false;  // this process holds the diagonal block
  int lr0 = 0;       // first local row of the panel
  int m = 0;         // local rows from lr0
  double* a = nullptr;
  int lda = 0;
  std::vector<double> t;  // jb × jb, column-major: the pivot rows as they are chosen
  std::vector<int> ipiv;  // global row swapped with row jn + c

  int candidates(int c) const noexcept { return top ? c : 0; }  // rows that may become pivot c
  int below(int c) const noexcept { return top ? c + 1 : 0; }   // rows under pivot row c
  double& at(int r, int c) const noexcept { return a[r + static_cast<std::ptrdiff_t>(c) * lda]; }
  double& tt(int r, int c) noexcept { return t[static_cast<std::size_t>(r + c * jb)]; }
};

std::string Algorithm::encode(bool column_major_map) const {
  const char facts[] = {'L', 'C', 'R'};
  std::string s = "W";
  s += column_major_map ? 'C' : 'R';
  s += std::to_string(depth % 10);
  s += static_cast<char>('0' + static_cast<int>(bcast));
  s += facts[static_cast<int>(rfact)];
  s += std::to_string(ndiv % 10);
  s += facts[static_cast<int>(pfact)];
  s += std::to_string(nbmin % 10);
  return s;
}

Factorization::Factorization(const Grid& grid, const Algorithm& algorithm,
                             const LocalMatrix& matrix)
    : grid_(grid),
      algo_(algorithm),
      matrix_(matrix),
      slots_(std::max(0, algorithm.depth) + 1),
      panel_(static_cast<std::size_t>(slots_)),
      bcast_(std::make_unique<PanelBroadcast[]>(static_cast<std::size_t>(slots_))),
      panel_rows_(static_cast<std::size_t>(slots_), 0) {
  SKT_MPI(MPI_Op_create(&pivot_reduce, 1, &pivot_op_));
  write_buffers_in_advance();
}

void Factorization::write_buffers_in_advance() {
  // Every buffer of the solve at its largest, its pages written now. A first write into a page
  // costs a fault and the kernel's zeroing, and where the memory is fresh to the machine (as on
  // these virtual machines once the checkpoint segments have taken the memory freed last), about
  // 12 µs a page: 18,600 faults per rank made the first four iterations at N = 12288 on 2x1 0.25 s
  // slower with checkpoints than without. That is set-up, like writing the matrix, not solving.
  const auto columns = static_cast<std::size_t>(std::max(0, matrix_.nq));
  // The widest panel: NB, or the whole matrix when NB is larger (as in netlib HPL, whose buffers
  // are a panel's actual width: NB = 20000 for N = 4608 took 6 GB of buffers per rank here).
  const int widest = std::min(matrix_.nb, matrix_.n);
  const auto nb = static_cast<std::size_t>(widest);
  for (auto& buffer : panel_)
    buffer.resize(slot_size(matrix_.mp, widest));  // the first panel's rows: the most
  if (grid_.nprow() > 1) {
    // Every row of a swap message is one of the panel's nb, over at most every local column.
    for (int slot = kU; slot < kScratchSlots; ++slot)
      std::fill_n(scratch(static_cast<ScratchSlot>(slot), nb * columns), nb * columns, 0.0);
  }
  // OpenBLAS's own buffer, where the update packs blocks of L's rows and of U's columns, and U's
  // solve its columns: a tall product, a wide one and a wide solve, each of the update's depth,
  // reach as far into it as the solve does.
  if (matrix_.mp > 0 && columns > 0) {
    const int tall = std::min(matrix_.mp, 1024), wide = matrix_.nq, k = widest;
    const int thin = std::min(tall, 8);
    std::vector<double> l(static_cast<std::size_t>(tall) * nb, 0.0), t(nb * nb, 0.0),
        c(std::max(static_cast<std::size_t>(tall) * thin, thin * columns), 0.0), own_u;
    double* u = nullptr;
    if (grid_.nprow() > 1) {
      u = scratch(kU, nb * columns);  // written above
    } else {
      own_u.assign(nb * columns, 0.0);
      u = own_u.data();
    }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, tall, thin, k, 1.0, l.data(), tall, u, k,
                0.0, c.data(), tall);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, thin, wide, k, 1.0, l.data(), tall, u, k,
                0.0, c.data(), thin);
    solve_u(t.data(), k, wide, u);
  }
}

Factorization::~Factorization() {
  if (pivot_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&pivot_type_);
  if (pivot_op_ != MPI_OP_NULL) MPI_Op_free(&pivot_op_);
}

void Factorization::pivot(Panel& p, int c) {
  const int jb = p.jb;
  const int width = 3 + 2 * jb;
  pivot_buffer_.assign(static_cast<std::size_t>(width), 0.0);
  double* b = pivot_buffer_.data();
  b[0] = -1;
  const int first = p.candidates(c);
  if (p.m > first) {
    const int r = first + static_cast<int>(cblas_idamax(p.m - first, &p.at(first, c), 1));
    b[0] = std::fabs(p.at(r, c));
    b[1] = global_index(p.lr0 + r, matrix_.nb, grid_.myrow(), grid_.nprow());
    for (int k = 0; k < jb; ++k)
      b[3 + k] = p.at(r, k);
  }
  if (p.top) {
    b[2] = 1;
    for (int k = 0; k < jb; ++k)
      b[3 + jb + k] = p.at(c, k);
  }
  if (grid_.nprow() > 1) {
    if (pivot_type_width_ != width) {
      if (pivot_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&pivot_type_);
      SKT_MPI(MPI_Type_contiguous(width, MPI_DOUBLE, &pivot_type_));
      SKT_MPI(MPI_Type_commit(&pivot_type_));
      pivot_type_width_ = width;
    }
    SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, b, 1, pivot_type_, pivot_op_, grid_.col()));
  }
  const int g = static_cast<int>(b[1]);
  p.ipiv[static_cast<std::size_t>(c)] = g;
  for (int k = 0; k < jb; ++k)
    p.tt(c, k) = b[3 + k];
  if (b[0] == 0 && info_ == 0) info_ = p.jn + c + 1;
  // The row that was at position jn + c goes to where the pivot row was.
  if (g != p.jn + c && owner(g, matrix_.nb, grid_.nprow()) == grid_.myrow()) {
    const int r = local_index(g, matrix_.nb, grid_.nprow()) - p.lr0;
    for (int k = 0; k < jb; ++k)
      p.at(r, k) = b[3 + jb + k];
  }
}

void Factorization::factor_base(Panel& p, int c0, int n) {
  const int end = c0 + n;
  for (int c = c0; c < end; ++c) {
    const int k = c - c0;  // columns of the block before c
    if (algo_.pfact != Fact::right && k > 0) {
      // Left and Crout apply the block's earlier columns to column c only now.
      if (algo_.pfact == Fact::left) {
        cblas_dtrsv(CblasColMajor, CblasLower, CblasNoTrans, CblasUnit, k, &p.tt(c0, c0), p.jb,
                    &p.tt(c0, c), 1);
      }
      const int first = p.candidates(c);
      if (p.m > first) {
        cblas_dgemv(CblasColMajor, CblasNoTrans, p.m - first, k, -1.0, &p.at(first, c0), p.lda,
                    &p.tt(c0, c), 1, 1.0, &p.at(first, c), 1);
      }
    }
    pivot(p, c);
    if (algo_.pfact == Fact::crout && k > 0 && c + 1 < end) {
      // Crout: the pivot row's U part, right away.
      cblas_dgemv(CblasColMajor, CblasTrans, k, end - c - 1, -1.0, &p.tt(c0, c + 1), p.jb,
                  &p.tt(c, c0), p.jb, 1.0, &p.tt(c, c + 1), p.jb);
    }
    const double piv = p.tt(c, c);
    const int below = p.below(c);
    const int rows = p.m - below;
    if (rows > 0 && piv != 0) cblas_dscal(rows, 1.0 / piv, &p.at(below, c), 1);
    if (algo_.pfact == Fact::right && c + 1 < end && rows > 0) {
      cblas_dger(CblasColMajor, rows, end - c - 1, -1.0, &p.at(below, c), 1, &p.tt(c, c + 1), p.jb,
                 &p.at(below, c + 1), p.lda);
    }
  }
}

void Factorization::factor_segment(Panel& p, int c0, int n) {
  if (n <= algo_.nbmin) {
    factor_base(p, c0, n);
    return;
  }
  // NDIV sub-panels, the last taking the remainder. Whatever the variant, a segment leaves the
  // columns after it untouched: its parent applies it to them.
  const int part = std::max(1, n / algo_.ndiv);
  const int end = c0 + n;
  for (int s0 = c0; s0 < end;) {
    const int s1 = (end - s0 < 2 * part) ? end : s0 + part;
    const int before = s0 - c0;
    if (algo_.rfact != Fact::right && before > 0) {
      if (algo_.rfact == Fact::left) {
        cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, before, s1 - s0,
                    1.0, &p.tt(c0, c0), p.jb, &p.tt(c0, s0), p.jb);
      }
      const int first = p.candidates(s0);
      if (p.m > first) {
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, p.m - first, s1 - s0, before, -1.0,
                    &p.at(first, c0), p.lda, &p.tt(c0, s0), p.jb, 1.0, &p.at(first, s0), p.lda);
      }
    }
    factor_segment(p, s0, s1 - s0);
    if (s1 < end) {
      if (algo_.rfact == Fact::crout && before > 0) {
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, s1 - s0, end - s1, before, -1.0,
                    &p.tt(s0, c0), p.jb, &p.tt(c0, s1), p.jb, 1.0, &p.tt(s0, s1), p.jb);
      }
      if (algo_.rfact != Fact::left) {
        cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, s1 - s0,
                    end - s1, 1.0, &p.tt(s0, s0), p.jb, &p.tt(s0, s1), p.jb);
      }
      if (algo_.rfact == Fact::right) {
        const int below = p.below(s1 - 1);
        if (p.m > below) {
          cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, p.m - below, end - s1, s1 - s0,
                      -1.0, &p.at(below, s0), p.lda, &p.tt(s0, s1), p.jb, 1.0, &p.at(below, s1),
                      p.lda);
        }
      }
    }
    s0 = s1;
  }
}

void Factorization::factor_and_send(int j) {
  const int nb = matrix_.nb;
  const int jn = j * nb;
  const int jb = std::min(nb, matrix_.n - jn);
  const int pcol = j % grid_.npcol();
  const int lr0 = numroc(jn, nb, grid_.myrow(), grid_.nprow());
  const int rows = matrix_.mp - lr0;
  const int s = slot(j);
  if (grid_.mycol() != pcol) {
    // Ready to receive it: the panel arrives through progress() during the update, or finish().
    panel_[s].resize(slot_size(rows, jb));
    panel_rows_[s] = rows;
    bcast_[s].start(grid_.row(), algo_.bcast, pcol, panel_[s].data(), panel_[s].size(), 0x700 + s);
    return;
  }
  const double started = MPI_Wtime();
  bcast_[s].wait();
  Panel p;
  p.jn = jn;
  p.jb = jb;
  p.top = grid_.myrow() == j % grid_.nprow();
  p.lr0 = lr0;
  p.m = rows;
  p.lda = matrix_.lda;
  p.a = matrix_.a + lr0 +
        static_cast<std::ptrdiff_t>(numroc(jn, nb, pcol, grid_.npcol())) * matrix_.lda;
  p.t.assign(static_cast<std::size_t>(jb) * static_cast<std::size_t>(jb), 0.0);
  p.ipiv.assign(static_cast<std::size_t>(jb), 0);
  factor_segment(p, 0, jb);
  if (p.top) {
    for (int k = 0; k < jb; ++k) {
      for (int r = 0; r < jb; ++r)
        p.at(r, k) = p.tt(r, k);
    }
  }
  // Pack this process row's L rows, T (in the L1 form asked for) and the pivots.
  auto& buffer = panel_[s];
  buffer.resize(slot_size(rows, jb));
  double* l = buffer.data();
  for (int k = 0; k < jb; ++k)
    std::memcpy(l + static_cast<std::ptrdiff_t>(k) * rows, &p.at(0, k),
                static_cast<std::size_t>(rows) * sizeof(double));
  double* t = l + static_cast<std::ptrdiff_t>(rows) * jb;
  for (int c = 0; c < jb; ++c) {
    for (int r = 0; r < jb; ++r) {
      t[algo_.l1_notrans ? r + c * jb : c + r * jb] = p.tt(r, c);
    }
  }
  for (int c = 0; c < jb; ++c)
    t[jb * jb + c] = p.ipiv[static_cast<std::size_t>(c)];
  panel_rows_[s] = rows;
  bcast_[s].start(grid_.row(), algo_.bcast, pcol, buffer.data(), buffer.size(), 0x700 + s);
  timing_.factor += MPI_Wtime() - started;
}

void Factorization::receive(int j) {
  const double started = MPI_Wtime();
  bcast_[slot(j)].finish();
  timing_.receive += MPI_Wtime() - started;
}

void Factorization::apply_received(int j, int begin, int end, bool in_pieces, int overlapped) {
  receive(j);
  apply(j, begin, end, in_pieces, overlapped);
}

std::pair<int, int> Factorization::panel_columns(int p) const noexcept {
  const int begin = local_column(p);
  const int width = std::min(matrix_.nb, matrix_.n - p * matrix_.nb);
  return {begin, grid_.mycol() == p % grid_.npcol() ? begin + width : begin};
}

void Factorization::drain(int p) {
  // Each panel in flight goes to the same columns, in the same pieces, as the iterations after p
  // would have applied it: to the columns of each panel up to `depth` after it, then to the rest.
  // A checkpoint then changes nothing of the arithmetic: with it or without, the same bits.
  const int last_panel = panels() - 1;
  for (; !in_flight_.empty(); in_flight_.pop_front()) {
    const int k = in_flight_.front();
    const int popped_at = std::min(k + algo_.depth, last_panel);
    for (int i = p + 1; i <= popped_at; ++i) {
      const auto [begin, end] = panel_columns(i);
      apply_received(k, begin, end);
    }
    apply_received(k, panel_columns(popped_at).second, matrix_.nq,
                   popped_at < last_panel && overlaps_in_pieces());
  }
}

int Factorization::local_column(int j) const noexcept {
  return numroc(j * matrix_.nb, matrix_.nb, grid_.mycol(), grid_.npcol());
}

Factorization::SlotView Factorization::slot_view(int j) const noexcept {
  const int s = slot(j);
  const int jn = j * matrix_.nb;
  const int jb = std::min(matrix_.nb, matrix_.n - jn);
  const int rows = panel_rows_[s];
  const double* l = panel_[s].data();
  const double* t = l + static_cast<std::ptrdiff_t>(rows) * jb;
  return {jn, jb, rows, l, t, t + static_cast<std::ptrdiff_t>(jb) * jb};
}

double* Factorization::swap_and_spread(const SlotView& panel, int begin, int end) {
  const int nb = matrix_.nb;
  const int nprow = grid_.nprow();
  const int myrow = grid_.myrow();
  const int jn = panel.jn;
  const int jb = panel.jb;
  const double* pivots = panel.pivots;
  const int ncols = end - begin;
  const auto width = static_cast<std::size_t>(ncols);
  const int lda = matrix_.lda;
  double* a = matrix_.a;
  // Rows travel as column-major blocks (a block's rows of one column contiguous, then the next
  // column), so that both the columns of A and the block are walked forward: a row-major block
  // would be written or read with a stride of a whole row for every element.
  auto column_at = [&](int k) { return a + static_cast<std::ptrdiff_t>(begin + k) * lda; };
  auto gather_column = [&](const std::vector<int>& rows, double* out, int k) {
    if (k + kPrefetchColumns < ncols) prefetch_rows<0>(column_at(k + kPrefetchColumns), rows);
    const double* column = column_at(k);
    double* to = out + static_cast<std::size_t>(k) * rows.size();
    for (std::size_t i = 0; i < rows.size(); ++i)
      to[i] = column[rows[i]];
  };
  auto scatter_column = [&](const std::vector<int>& rows, const double* in, int k) {
    if (k + kPrefetchColumns < ncols) prefetch_rows<1>(column_at(k + kPrefetchColumns), rows);
    double* column = column_at(k);
    const double* from = in + static_cast<std::size_t>(k) * rows.size();
    for (std::size_t i = 0; i < rows.size(); ++i)
      column[rows[i]] = from[i];
  };
  auto local = [&](int g) { return local_index(g, nb, nprow); };

  // Where every row involved in the panel's swaps ends up.
  std::map<int, int> content;  // position → original row now there
  auto at = [&](int position) {
    const auto it = content.find(position);
    return it == content.end() ? position : it->second;
  };
  for (int i = 0; i < jb; ++i) {
    const int g = static_cast<int>(pivots[i]);
    const int a1 = at(jn + i), a2 = at(g);
    content[jn + i] = a2;
    content[g] = a1;
  }
  // U's rows, spread to every process of the column, grouped by the process row owning them.
  std::vector<int> counts(static_cast<std::size_t>(nprow), 0);
  std::vector<int> index_in_group(static_cast<std::size_t>(jb));
  for (int i = 0; i < jb; ++i)
    index_in_group[static_cast<std::size_t>(i)] =
        counts[static_cast<std::size_t>(owner(at(jn + i), nb, nprow))]++;
  std::vector<int> u_rows;  // this process's rows of U, in U's order
  for (int i = 0; i < jb; ++i) {
    const int src = at(jn + i);
    if (owner(src, nb, nprow) == myrow) u_rows.push_back(local(src));
  }
  // Rows moving below the panel's diagonal block, by destination (sent) and by source (received)
  // process row, in position order within each. Each is a row the diagonal block held (a pivot row
  // from below took its place there), so only the process holding that block sends.
  std::vector<std::vector<int>> sent(static_cast<std::size_t>(nprow)),
      received(static_cast<std::size_t>(nprow));
  for (const auto& [position, source] : content) {
    if (position < jn + jb || source == position) continue;
    const auto to = static_cast<std::size_t>(owner(position, nb, nprow));
    const auto from = static_cast<std::size_t>(owner(source, nb, nprow));
    if (from == static_cast<std::size_t>(myrow)) sent[to].push_back(local(source));
    if (to == static_cast<std::size_t>(myrow)) received[from].push_back(local(position));
  }
  // One pass over the columns: this process's rows of U are read, then the rows moved here are
  // written. A pivot row's place below the diagonal block is where the row it displaced goes, so
  // the two touch the same scattered lines of each column, once instead of twice. The process
  // holding the diagonal block reads the rows it sends in the same pass and sends them a chunk of
  // columns at a time, so that the others start their pass on the first chunk instead of waiting
  // for all of them: on 2x1 at N = 24576 they waited 0.32 s per run for the whole gather.
  double* const packed = scratch(kPacked, u_rows.size() * width);
  const auto diagonal = static_cast<std::size_t>(owner(jn, nb, nprow));
  const auto me = static_cast<std::size_t>(myrow);
  constexpr int kTag = 0x5a6;
  auto chunk_bytes = [&](std::size_t rows, int k0) {
    return rows * static_cast<std::size_t>(std::min(kSwapChunkColumns, ncols - k0)) *
           sizeof(double);
  };
  Requests chunks;
  if (me == diagonal) {
    std::vector<std::size_t> send_displ(static_cast<std::size_t>(nprow));
    std::size_t sending = 0;
    for (std::size_t q = 0; q < send_displ.size(); ++q) {
      send_displ[q] = sending;
      if (q != me) sending += sent[q].size() * width;
    }
    double* const moved_out = scratch(kMovedOut, sending);
    const std::vector<int>& from = sent[me];
    const std::vector<int>& to = received[me];
    for (int k0 = 0; k0 < ncols; k0 += kSwapChunkColumns) {
      const int k1 = std::min(ncols, k0 + kSwapChunkColumns);
      for (int k = k0; k < k1; ++k) {
        gather_column(u_rows, packed, k);
        for (std::size_t q = 0; q < send_displ.size(); ++q) {
          if (q != me) gather_column(sent[q], moved_out + send_displ[q], k);
        }
        // Rows staying on this process move within the column: from the diagonal block, which
        // this pass does not write, to pivot rows' places, read into U just above.
        double* column = column_at(k);
        for (std::size_t i = 0; i < from.size(); ++i)
          column[to[i]] = column[from[i]];
      }
      for (std::size_t q = 0; q < send_displ.size(); ++q) {
        if (q == me || sent[q].empty()) continue;
        chunks.isend(moved_out + send_displ[q] + static_cast<std::size_t>(k0) * sent[q].size(),
                     chunk_bytes(sent[q].size(), k0), static_cast<int>(q), kTag, grid_.col());
      }
    }
  } else {
    const std::vector<int>& rows_in = received[diagonal];
    double* const moved_in = scratch(kMovedIn, rows_in.size() * width);
    if (!rows_in.empty()) {
      for (int k0 = 0; k0 < ncols; k0 += kSwapChunkColumns) {
        chunks.irecv(moved_in + static_cast<std::size_t>(k0) * rows_in.size(),
                     chunk_bytes(rows_in.size(), k0), static_cast<int>(diagonal), kTag,
                     grid_.col());
      }
    }
    for (int k0 = 0, chunk = 0; k0 < ncols; k0 += kSwapChunkColumns, ++chunk) {
      if (!rows_in.empty()) chunks.wait(static_cast<std::size_t>(chunk));
      for (int k = k0; k < std::min(ncols, k0 + kSwapChunkColumns); ++k) {
        gather_column(u_rows, packed, k);
        scatter_column(rows_in, moved_in, k);
      }
    }
  }
  chunks.wait_all();
  // U is solved (U = L11^-1 U) once, not by every process of the column: process q solves the
  // q-th share of the columns. It gets every process's rows of U for its share, assembles them in
  // U's order, solves them, and the shares are spread to all, U's columns side by side.
  std::vector<int> share(static_cast<std::size_t>(nprow) + 1);
  for (std::size_t q = 0; q <= static_cast<std::size_t>(nprow); ++q)
    share[q] =
        static_cast<int>(static_cast<std::int64_t>(ncols) * static_cast<std::int64_t>(q) / nprow);
  const int mine = share[me + 1] - share[me];
  const auto held = static_cast<int>(u_rows.size());
  std::vector<int> out_counts(static_cast<std::size_t>(nprow)),
      out_displ(static_cast<std::size_t>(nprow)), in_counts(static_cast<std::size_t>(nprow)),
      in_displ(static_cast<std::size_t>(nprow));
  int incoming = 0;
  for (std::size_t q = 0; q < static_cast<std::size_t>(nprow); ++q) {
    out_counts[q] = held * (share[q + 1] - share[q]);
    out_displ[q] = held * share[q];  // packed is column-major: a share is contiguous
    in_counts[q] = counts[q] * mine;
    in_displ[q] = incoming;
    incoming += in_counts[q];
  }
  double* const shares_in = scratch(kSharesIn, static_cast<std::size_t>(incoming));
  SKT_MPI(MPI_Alltoallv(packed, out_counts.data(), out_displ.data(), MPI_DOUBLE, shares_in,
                        in_counts.data(), in_displ.data(), MPI_DOUBLE, grid_.col()));
  double* const u = scratch(kU, static_cast<std::size_t>(jb) * width);
  double* solved = u + static_cast<std::size_t>(share[me]) * static_cast<std::size_t>(jb);
  {
    std::vector<const double*> source(static_cast<std::size_t>(jb));
    std::vector<std::size_t> stride(static_cast<std::size_t>(jb));
    for (int i = 0; i < jb; ++i) {
      const auto q = static_cast<std::size_t>(owner(at(jn + i), nb, nprow));
      source[static_cast<std::size_t>(i)] =
          shares_in + in_displ[q] + index_in_group[static_cast<std::size_t>(i)];
      stride[static_cast<std::size_t>(i)] = static_cast<std::size_t>(counts[q]);
    }
    for (int k = 0; k < mine; ++k) {
      double* column = solved + static_cast<std::size_t>(k) * static_cast<std::size_t>(jb);
      for (int i = 0; i < jb; ++i) {
        const auto u = static_cast<std::size_t>(i);
        column[i] = source[u][static_cast<std::size_t>(k) * stride[u]];
      }
    }
  }
  const double solving = MPI_Wtime();
  if (mine > 0) solve_u(panel.t, jb, mine, solved);
  timing_.trsm += MPI_Wtime() - solving;
  std::vector<int> widths(static_cast<std::size_t>(nprow));
  for (std::size_t q = 0; q < widths.size(); ++q)
    widths[q] = share[q + 1] - share[q];
  const bool binary = algo_.swap == SwapAlgo::binary_exchange ||
                      (algo_.swap == SwapAlgo::mix && ncols <= algo_.swap_threshold);
  // Each share is `widths[q]` columns of jb doubles; they travel as HPL's swap variant says.
  gather_rows(grid_.col(), binary, algo_.equil, widths, static_cast<std::size_t>(jb), solved, u);
  return u;
}

void Factorization::solve_u(const double* t, int jb, int ncols, double* u) const {
  // U = L11^-1 U, with L11 the unit lower triangle of T (kept transposed unless L1 is asked for
  // in no-transposed form).
  cblas_dtrsm(CblasColMajor, CblasLeft, algo_.l1_notrans ? CblasLower : CblasUpper,
              algo_.l1_notrans ? CblasNoTrans : CblasTrans, CblasUnit, jb, ncols, 1.0, t, jb, u,
              jb);
}

void Factorization::apply(int j, int begin, int end, bool in_pieces, int overlapped) {
  if (begin >= end) return;
  const double started = MPI_Wtime();
  const int nb = matrix_.nb;
  const int nprow = grid_.nprow();
  const int myrow = grid_.myrow();
  const SlotView panel = slot_view(j);
  const int jn = panel.jn;
  const int jb = panel.jb;
  const int rows = panel.rows;
  const double* l = panel.l;
  const double* t = panel.t;
  const int ncols = end - begin;
  const int lda = matrix_.lda;
  double* a = matrix_.a;
  const double trsm_before = timing_.trsm;
  // U, the panel's rows of these columns after the swaps and the solve: jb × ncols, column-major.
  double* u = nullptr;
  int ldu = 0;
  if (nprow == 1) {
    // Every row is here (local and global rows coincide): the swaps in place, column by column as
    // LAPACK's dlaswp does, and U is the panel's rows of A itself: no copy, nothing to write back.
    std::vector<int> touched;
    for (int i = 0; i < jb; ++i) {
      const auto g = static_cast<int>(panel.pivots[i]);
      if (g != jn + i) touched.insert(touched.end(), {jn + i, g});
    }
    for (int k = 0; k < ncols; ++k) {
      double* column = a + static_cast<std::ptrdiff_t>(begin + k) * lda;
      if (k + kPrefetchColumns < ncols) {
        prefetch_rows<1>(column + static_cast<std::ptrdiff_t>(kPrefetchColumns) * lda, touched);
      }
      for (int i = 0; i < jb; ++i) {
        const auto g = static_cast<int>(panel.pivots[i]);
        if (g != jn + i) std::swap(column[jn + i], column[g]);
      }
    }
    u = a + jn + static_cast<std::ptrdiff_t>(begin) * lda;
    ldu = lda;
    const double solving = MPI_Wtime();
    cblas_dtrsm(CblasColMajor, CblasLeft, algo_.l1_notrans ? CblasLower : CblasUpper,
                algo_.l1_notrans ? CblasNoTrans : CblasTrans, CblasUnit, jb, ncols, 1.0, t, jb, u,
                ldu);
    timing_.trsm += MPI_Wtime() - solving;
  } else {
    // The swaps, and U spread to every process of the column and solved.
    u = swap_and_spread(panel, begin, end);
    ldu = jb;
  }
  // The swaps' time is what is left once the solve is counted apart.
  const double solved = MPI_Wtime();
  timing_.swap += solved - started - (timing_.trsm - trsm_before);
  if (nprow > 1 && myrow == j % nprow) {
    // U becomes the panel's rows of these columns: jb contiguous rows of each column.
    const int lr = local_index(jn, nb, nprow);
    std::vector<int> lines;  // a row of each cache line of the panel's rows
    for (int i = 0; i < jb; i += 8)
      lines.push_back(lr + i);
    lines.push_back(lr + jb - 1);
    for (int k = 0; k < ncols; ++k) {
      if (k + kPrefetchColumns < ncols) {
        prefetch_rows<1>(a + static_cast<std::ptrdiff_t>(begin + k + kPrefetchColumns) * lda,
                         lines);
      }
      std::memcpy(a + lr + static_cast<std::ptrdiff_t>(begin + k) * lda,
                  u + static_cast<std::ptrdiff_t>(k) * ldu,
                  static_cast<std::size_t>(jb) * sizeof(double));
    }
  }
  // The trailing update: A22 -= L21 U. In pieces where asked, between which the broadcast of a
  // newer panel moves on (as HPL_pdupdate probes): the first of a few blocks of columns, each next
  // one twice as wide, so that the broadcast is probed early, while it is likely in flight, and
  // the DGEMMs stay few and wide (each piece costs OpenBLAS another packing of L). The pieces do
  // not depend on when the broadcast arrives, since how a BLAS splits a product can change its
  // rounding: the same run gives the same bits.
  const int lr0 = numroc(jn, nb, myrow, nprow);
  const int lr2 = numroc(jn + jb, nb, myrow, nprow);
  const int m2 = matrix_.mp - lr2;
  PanelBroadcast* pending = overlapped >= 0 ? &bcast_[slot(overlapped)] : nullptr;
  for (int k0 = 0, piece = in_pieces ? kUpdateBlocks * nb : ncols; m2 > 0 && k0 < ncols;
       k0 += piece, piece *= 2) {
    if (pending != nullptr && pending->progress()) pending = nullptr;
    const int width_k = std::min(piece, ncols - k0);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m2, width_k, jb, -1.0, l + (lr2 - lr0),
                rows, u + static_cast<std::ptrdiff_t>(k0) * ldu, ldu, 1.0,
                a + lr2 + static_cast<std::ptrdiff_t>(begin + k0) * lda, lda);
  }
  timing_.update += MPI_Wtime() - solved;
}

void Factorization::factor(int first, const std::function<bool(int)>& checkpoint_due,
                           const std::function<void(int)>& checkpoint) {
  const int total = panels();
  for (int p = first; p < total; ++p) {
    const auto [begin, end] = panel_columns(p);
    // Panel p's columns receive the panels in flight, then the panel is factored and sent. Every
    // rank receives the panels in flight here, in order, as the process column of panel p must.
    for (const int k : in_flight_)
      apply_received(k, begin, end);
    factor_and_send(p);
    in_flight_.push_back(p);
    const bool take = checkpoint_due(p);
    if (take || p + 1 == total) {
      drain(p);
      if (take) checkpoint(p + 1);
    } else if (static_cast<int>(in_flight_.size()) > algo_.depth) {
      // Panel p travels during this update.
      apply_received(in_flight_.front(), end, matrix_.nq, overlaps_in_pieces(), p);
      in_flight_.pop_front();
    }
  }
  for (int s = 0; s < slots_; ++s)
    bcast_[s].wait();
}

std::vector<double> Factorization::solve() {
  const double started = MPI_Wtime();
  const int n = matrix_.n;
  const int nb = matrix_.nb;
  const int nprow = grid_.nprow(), npcol = grid_.npcol();
  const int myrow = grid_.myrow(), mycol = grid_.mycol();
  const int lda = matrix_.lda;
  std::vector<double> x(static_cast<std::size_t>(n), 0.0);
  const int bcol = owner(n, nb, npcol);
  const int lb = local_index(n, nb, npcol);
  const int nqa = numroc(n, nb, mycol, npcol);
  std::vector<double> v, xl;
  for (int k = panels() - 1; k >= 0; --k) {
    const int kn = k * nb;
    const int kb = std::min(nb, n - kn);
    const int prow = k % nprow, pcol = k % npcol;
    v.assign(static_cast<std::size_t>(kb), 0.0);
    if (myrow == prow) {
      const int lr = local_index(kn, nb, nprow);
      if (mycol == bcol) {
        for (int i = 0; i < kb; ++i)
          v[static_cast<std::size_t>(i)] =
              matrix_.a[lr + i + static_cast<std::ptrdiff_t>(lb) * lda];
      }
      const int c0 = numroc(kn + kb, nb, mycol, npcol);
      if (nqa > c0) {
        xl.resize(static_cast<std::size_t>(nqa - c0));
        for (int c = c0; c < nqa; ++c)
          xl[static_cast<std::size_t>(c - c0)] =
              x[static_cast<std::size_t>(global_index(c, nb, mycol, npcol))];
        cblas_dgemv(CblasColMajor, CblasNoTrans, kb, nqa - c0, -1.0,
                    matrix_.a + lr + static_cast<std::ptrdiff_t>(c0) * lda, lda, xl.data(), 1, 1.0,
                    v.data(), 1);
      }
      if (npcol > 1) {
        SKT_MPI(MPI_Reduce(mycol == pcol ? MPI_IN_PLACE : v.data(), v.data(), kb, MPI_DOUBLE,
                           MPI_SUM, pcol, grid_.row()));
      }
      if (mycol == pcol) {
        const int lc = local_index(kn, nb, npcol);
        cblas_dtrsv(CblasColMajor, CblasUpper, CblasNoTrans, CblasNonUnit, kb,
                    matrix_.a + lr + static_cast<std::ptrdiff_t>(lc) * lda, lda, v.data(), 1);
      }
    }
    SKT_MPI(MPI_Bcast(v.data(), kb, MPI_DOUBLE, grid_.rank_of(prow, pcol), grid_.all()));
    std::copy(v.begin(), v.end(), x.begin() + kn);
  }
  timing_.solve += MPI_Wtime() - started;
  return x;
}

}  // namespace skt::hpl
