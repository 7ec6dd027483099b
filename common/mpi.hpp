// The one MPI layer of every module (the library, the encoders, skt-hpl, the tools): one
// checked-call macro that throws with file and line, and owning handles for communicators and
// requests.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace skt {

class MpiError : public std::runtime_error {
 public:
  MpiError(int code, const char* call, const char* file, int line);
  int mpi_code() const noexcept { return code_; }

 private:
  int code_;
};

#define SKT_MPI(call)                                                \
  do {                                                               \
    const int skt_mpi_rc_ = (call);                                  \
    if (skt_mpi_rc_ != MPI_SUCCESS) {                                \
      throw ::skt::MpiError(skt_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                \
  } while (0)

// An owned communicator, freed on destruction. Errors on it are returned, not fatal, so that
// SKT_MPI can turn them into exceptions.
class Comm {
 public:
  Comm() = default;
  ~Comm() { reset(); }
  Comm(Comm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  static Comm duplicate(MPI_Comm comm);
  static Comm split(MPI_Comm comm, int color, int key);
  // The processes of `comm` that share this one's memory (MPI_COMM_TYPE_SHARED): its machine.
  static Comm split_shared(MPI_Comm comm);

  MPI_Comm get() const noexcept { return comm_; }
  int rank() const;
  int size() const;
  explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }

 private:
  explicit Comm(MPI_Comm comm) : comm_(comm) {}
  void reset() noexcept;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Whether MPI has been initialised (MPI_Initialized: finalised since counts too).
bool mpi_initialized();
// This process's rank in MPI_COMM_WORLD.
int world_rank();

// Collective: `root`'s text, on every rank of `comm` (its length first, then its bytes).
std::string broadcast_string(MPI_Comm comm, std::string text, int root = 0);

// Waits for `request` (a collective's, which cannot be cancelled). Once it has waited
// `first_report` seconds, and again at each doubling of that, calls `report` with the seconds
// waited: a collective that some rank never joins waits forever, and whoever watches the job
// should hear why. With first_report <= 0 it just waits.
void wait_reporting_delays(MPI_Request& request, double first_report,
                           const std::function<void(double waited)>& report);

// Byte ranges of one buffer, (offset, length) in order, as one message. With several ranges it
// travels as one derived datatype, freed once the transfer is posted (MPI keeps it until the
// transfer completes). A message may carry fewer bytes than the receiver's ranges hold: they
// fill the ranges in order.
using ByteRanges = std::vector<std::pair<std::size_t, std::size_t>>;
void isend_ranges(const std::byte* base, const ByteRanges& ranges, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request);
void irecv_ranges(std::byte* base, const ByteRanges& ranges, int source, int tag, MPI_Comm comm,
                  MPI_Request* request);

// Outstanding point-to-point requests of one batch. An error that unwinds past them cancels
// what is still pending, so MPI never writes into memory the caller has let go.
class Requests {
 public:
  Requests() = default;
  ~Requests() { cancel(); }
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;

  void isend(const void* data, std::size_t bytes, int dest, int tag, MPI_Comm comm);
  void irecv(void* data, std::size_t bytes, int source, int tag, MPI_Comm comm);
  // Waits for the `index`-th request posted since the last wait_all.
  void wait(std::size_t index);
  // Waits for every request and forgets them.
  void wait_all();

 private:
  void cancel() noexcept;
  std::vector<MPI_Request> requests_;
};

}  // namespace skt
