// Communication patterns of HPL's variants: the panel broadcast along a process row (six
// topologies) and the spread of U's rows down a process column (binary exchange, or spread-roll
// with or without equilibration). Every message size is computed from data all ranks share, so no
// sizes travel.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "hpl/hpldat.hpp"

namespace skt::hpl {

// Broadcast of a buffer from `root` over `comm` with one of HPL's topologies. The root's part is
// non-blocking (start), so that with look-ahead it returns to its own update at once; the others
// receive, and pass on, when they call finish, or earlier through progress(), which a rank calls
// between pieces of its update (as HPL_pdupdate probes): with the ring topologies it posts the
// receive, tests it and forwards at once what arrived, so the panel travels while ranks compute.
// start and finish must be called by every rank; wait() before touching the buffer again.
class PanelBroadcast {
 public:
  PanelBroadcast() = default;
  ~PanelBroadcast();
  PanelBroadcast(const PanelBroadcast&) = delete;
  PanelBroadcast& operator=(const PanelBroadcast&) = delete;

  void start(MPI_Comm comm, Bcast topology, int root, double* buffer, std::size_t count, int tag);
  void finish();  // receives (non-roots) and forwards
  // Without blocking: true once this rank holds the whole buffer (and has passed it on).
  bool progress();
  void wait();  // every send of this rank is complete

 private:
  // Where a rank of a ring topology receives from, and the rank it forwards to (-1: none).
  struct Link {
    int source;
    int next;
  };
  std::optional<Link> ring_link() const;  // none for the spread topologies
  void post_send(int dest, const double* data, std::size_t count, int tag);
  void receive(int source, double* data, std::size_t count, int tag);
  void spread(const std::vector<int>& members);

  MPI_Comm comm_ = MPI_COMM_NULL;
  Bcast topology_ = Bcast::ring;
  int root_ = 0;
  int me_ = 0;
  int size_ = 1;
  double* buffer_ = nullptr;
  std::size_t count_ = 0;
  int tag_ = 0;
  bool received_ = false;
  MPI_Request receive_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
};

// Every rank of `comm` contributes rows (`counts[p]` rows from rank p, each `width` doubles,
// packed in `mine` in any layout: they travel as a block; `mine` may already be its place in
// `all`); every rank gets all of them, rank by rank, in `all`. By binary exchange
// (recursive doubling), or by spread-roll (a ring), optionally after equilibration (first
// rebalancing the rows so that every rank passes on the same number).
void gather_rows(MPI_Comm comm, bool binary_exchange, bool equilibrate,
                 const std::vector<int>& counts, std::size_t width, const double* mine,
                 double* all);

}  // namespace skt::hpl
