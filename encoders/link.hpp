// A group operation's line to the other members: its communicator, and a watch for a member that
// gives the operation up.
//
// A member whose part of an operation fails cannot simply leave: the others would wait forever for
// messages it will never send. So every blocking wait of a group operation also watches for an
// abort notice from any member, and throws MemberAborted when one comes; the failing member sends
// that notice (abort_members) once it has unwound. Every member then leaves the operation with an
// exception and the library turns them into one agreed error. After an aborted operation the
// communicator may hold messages that nobody will receive: it must not be used again.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <vector>

namespace skt::enc {

class MemberAborted : public std::runtime_error {
 public:
  explicit MemberAborted(int member);
  int member() const noexcept { return member_; }

 private:
  int member_;
};

class GroupLink {
 public:
  // Posts the watch on `comm` (whose ranks are the member indices).
  explicit GroupLink(MPI_Comm comm);
  ~GroupLink();
  GroupLink(const GroupLink&) = delete;
  GroupLink& operator=(const GroupLink&) = delete;

  MPI_Comm comm() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // MPI_Waitall, unless a member aborts first: then MemberAborted. `statuses` may be null.
  void wait_all(int count, MPI_Request* requests, MPI_Status* statuses);
  // MPI_Waitsome over requests that are not all null: the number completed, their indices in
  // `indices`; MemberAborted if a member aborts first.
  int wait_some(int count, MPI_Request* requests, int* indices);
  // The same without waiting: 0 when none has completed yet.
  int test_some(int count, MPI_Request* requests, int* indices);
  // Seconds spent in the two waits so far: what the operation spent on its transfers rather than
  // on its own work.
  double waited_seconds() const noexcept { return waited_; }

  // Tells every other member of `comm` that this one gives up the operation under way. Never
  // blocks: the notices are left to MPI.
  static void abort_members(MPI_Comm comm) noexcept;

  // What an operation that unwinds does with its outstanding requests: receives are cancelled (and
  // completed, so MPI never writes into memory let go of), sends are released without waiting,
  // since their receiver may never come. The memory of released sends must stay mapped until the
  // job has agreed on the failure.
  static void abandon_receives(MPI_Request* requests, int count) noexcept;
  static void abandon_sends(MPI_Request* requests, int count) noexcept;

 private:
  void check_watch();
  int some(int count, MPI_Request* requests, int* indices, bool wait);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int notice_ = 0;
  MPI_Request watch_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> merged_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  double waited_ = 0;
};

}  // namespace skt::enc
