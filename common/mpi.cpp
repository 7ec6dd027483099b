#include "common/mpi.hpp"

#include <utility>

namespace skt {

namespace {
std::string describe(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  return std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
         std::string(text, static_cast<std::size_t>(length));
}
}  // namespace

MpiError::MpiError(int code, const char* call, const char* file, int line)
    : std::runtime_error(describe(code, call, file, line)), code_(code) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    reset();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
  }
  return *this;
}

bool mpi_initialized() {
  int initialized = 0;
  SKT_MPI(MPI_Initialized(&initialized));
  return initialized != 0;
}

int world_rank() {
  int rank = 0;
  SKT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

std::string broadcast_string(MPI_Comm comm, std::string text, int root) {
  int length = static_cast<int>(text.size());
  SKT_MPI(MPI_Bcast(&length, 1, MPI_INT, root, comm));
  text.resize(static_cast<std::size_t>(length));
  SKT_MPI(MPI_Bcast(text.data(), length, MPI_CHAR, root, comm));
  return text;
}

Comm Comm::duplicate(MPI_Comm comm) {
  MPI_Comm copy = MPI_COMM_NULL;
  SKT_MPI(MPI_Comm_dup(comm, &copy));
  Comm owned(copy);
  SKT_MPI(MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN));
  return owned;
}

Comm Comm::split(MPI_Comm comm, int color, int key) {
  MPI_Comm part = MPI_COMM_NULL;
  SKT_MPI(MPI_Comm_split(comm, color, key, &part));
  Comm owned(part);
  if (part != MPI_COMM_NULL) SKT_MPI(MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN));
  return owned;
}

Comm Comm::split_shared(MPI_Comm comm) {
  MPI_Comm part = MPI_COMM_NULL;
  SKT_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &part));
  Comm owned(part);
  SKT_MPI(MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN));
  return owned;
}

int Comm::rank() const {
  int r = 0;
  SKT_MPI(MPI_Comm_rank(comm_, &r));
  return r;
}

int Comm::size() const {
  int n = 0;
  SKT_MPI(MPI_Comm_size(comm_, &n));
  return n;
}

void Comm::reset() noexcept {
  if (comm_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }
}

namespace {

// `ranges` of `base` as one message: posted by `post(first byte, count, datatype)`.
template <typename Byte, typename Post>
void post_ranges(Byte* base, const ByteRanges& ranges, Post post) {
  if (ranges.size() < 2) {
    post(ranges.empty() ? base : base + ranges.front().first,
         ranges.empty() ? 0 : static_cast<int>(ranges.front().second), MPI_BYTE);
    return;
  }
  struct OwnedType {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    ~OwnedType() {
      if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    }
  } owned;
  std::vector<int> lengths;
  std::vector<MPI_Aint> displacements;
  for (const auto& [offset, length] : ranges) {
    lengths.push_back(static_cast<int>(length));
    displacements.push_back(static_cast<MPI_Aint>(offset - ranges.front().first));
  }
  SKT_MPI(MPI_Type_create_hindexed(static_cast<int>(ranges.size()), lengths.data(),
                                   displacements.data(), MPI_BYTE, &owned.type));
  SKT_MPI(MPI_Type_commit(&owned.type));
  post(base + ranges.front().first, 1, owned.type);
}

}  // namespace

void isend_ranges(const std::byte* base, const ByteRanges& ranges, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  post_ranges(base, ranges, [&](const std::byte* first, int count, MPI_Datatype type) {
    SKT_MPI(MPI_Isend(first, count, type, dest, tag, comm, request));
  });
}

void irecv_ranges(std::byte* base, const ByteRanges& ranges, int source, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  post_ranges(base, ranges, [&](std::byte* first, int count, MPI_Datatype type) {
    SKT_MPI(MPI_Irecv(first, count, type, source, tag, comm, request));
  });
}

void Requests::isend(const void* data, std::size_t bytes, int dest, int tag, MPI_Comm comm) {
  requests_.push_back(MPI_REQUEST_NULL);
  SKT_MPI(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm, &requests_.back()));
}

void Requests::irecv(void* data, std::size_t bytes, int source, int tag, MPI_Comm comm) {
  requests_.push_back(MPI_REQUEST_NULL);
  SKT_MPI(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm, &requests_.back()));
}

void Requests::wait(std::size_t index) {
  SKT_MPI(MPI_Wait(&requests_.at(index), MPI_STATUS_IGNORE));
}

void Requests::wait_all() {
  SKT_MPI(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  requests_.clear();
}

void Requests::cancel() noexcept {
  for (auto& request : requests_) {
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
  }
}

void wait_reporting_delays(MPI_Request& request, double first_report,
                           const std::function<void(double waited)>& report) {
  if (first_report <= 0) {
    SKT_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE));
    return;
  }
  const double start = MPI_Wtime();
  double next = first_report;
  for (int done = 0;;) {
    SKT_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done != 0) return;
    const double waited = MPI_Wtime() - start;
    if (waited >= next) {
      report(waited);
      next *= 2;
    }
  }
}

}  // namespace skt
