// GoogleTest under mpirun: every rank runs every test, only rank 0 prints the progress, other ranks
// print only their failed checks, and a test fails on all ranks if it failed on any.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

class PrintFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit PrintFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_,
                   result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                   result.message());
    }
  }

 private:
  int rank_;
};

class AgreeOnFailure : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    int failed = info.result()->Failed() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed != 0 && !info.result()->Failed()) {
      ADD_FAILURE() << "failed on another rank";
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new PrintFailures(rank));
  }
  listeners.Append(new AgreeOnFailure);
  const int failed = RUN_ALL_TESTS();
  int any = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any == 0 ? 0 : 1;
}
