#include "encoders/link.hpp"

#include <deque>
#include <string>

#include "common/mpi.hpp"

namespace skt::enc {

namespace {
constexpr int kAbortTag = 0x5ab;
}  // namespace

MemberAborted::MemberAborted(int member)
    : std::runtime_error("member " + std::to_string(member) +
                         " of the group gave up the operation"),
      member_(member) {}

GroupLink::GroupLink(MPI_Comm comm) : comm_(comm) {
  SKT_MPI(MPI_Comm_rank(comm, &rank_));
  SKT_MPI(MPI_Comm_size(comm, &size_));
  SKT_MPI(MPI_Irecv(&notice_, 1, MPI_INT, MPI_ANY_SOURCE, kAbortTag, comm, &watch_));
}

GroupLink::~GroupLink() {
  abandon_receives(&watch_, 1);
}

void GroupLink::check_watch() {
  if (watch_ != MPI_REQUEST_NULL) return;
  // The watch completed: a member's notice arrived.
  throw MemberAborted(notice_);
}

void GroupLink::wait_all(int count, MPI_Request* requests, MPI_Status* statuses) {
  const double start = MPI_Wtime();
  merged_.assign(requests, requests + count);
  merged_.push_back(watch_);
  indices_.resize(merged_.size());
  statuses_.resize(merged_.size());
  int remaining = 0;
  for (int i = 0; i < count; ++i)
    remaining += requests[i] != MPI_REQUEST_NULL ? 1 : 0;
  while (remaining > 0) {
    int done = 0;
    SKT_MPI(MPI_Waitsome(count + 1, merged_.data(), &done, indices_.data(), statuses_.data()));
    watch_ = merged_[static_cast<std::size_t>(count)];
    for (int k = 0; k < done; ++k) {
      const int i = indices_[static_cast<std::size_t>(k)];
      if (i == count) continue;
      --remaining;
      requests[i] = MPI_REQUEST_NULL;
      if (statuses != nullptr) statuses[i] = statuses_[static_cast<std::size_t>(k)];
    }
    check_watch();
  }
  waited_ += MPI_Wtime() - start;
}

int GroupLink::wait_some(int count, MPI_Request* requests, int* indices) {
  return some(count, requests, indices, true);
}

int GroupLink::test_some(int count, MPI_Request* requests, int* indices) {
  return some(count, requests, indices, false);
}

int GroupLink::some(int count, MPI_Request* requests, int* indices, bool wait) {
  merged_.assign(requests, requests + count);
  merged_.push_back(watch_);
  indices_.resize(merged_.size());
  int done = 0;
  const double start = MPI_Wtime();
  if (wait) {
    SKT_MPI(MPI_Waitsome(count + 1, merged_.data(), &done, indices_.data(), MPI_STATUSES_IGNORE));
  } else {
    SKT_MPI(MPI_Testsome(count + 1, merged_.data(), &done, indices_.data(), MPI_STATUSES_IGNORE));
  }
  waited_ += MPI_Wtime() - start;
  watch_ = merged_[static_cast<std::size_t>(count)];
  int out = 0;
  for (int k = 0; k < done; ++k) {
    const int i = indices_[static_cast<std::size_t>(k)];
    if (i == count) continue;
    requests[i] = MPI_REQUEST_NULL;  // completed and freed by MPI, even if the watch fired too
    indices[out++] = i;
  }
  check_watch();
  return out;
}

void GroupLink::abort_members(MPI_Comm comm) noexcept {
  // The notices' buffer must outlive their sends, which are never waited for: it is kept for the
  // life of the process (an aborted operation is rare, and a notice is one int).
  static std::deque<int> senders;
  int me = 0, size = 0;
  if (MPI_Comm_rank(comm, &me) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) return;
  senders.push_back(me);
  for (int member = 0; member < size; ++member) {
    if (member == me) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&senders.back(), 1, MPI_INT, member, kAbortTag, comm, &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
}

void GroupLink::abandon_receives(MPI_Request* requests, int count) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&requests[i]);
    MPI_Wait(&requests[i], MPI_STATUS_IGNORE);
  }
}

void GroupLink::abandon_sends(MPI_Request* requests, int count) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (int i = 0; i < count; ++i) {
    if (requests[i] != MPI_REQUEST_NULL) MPI_Request_free(&requests[i]);
  }
}

}  // namespace skt::enc
