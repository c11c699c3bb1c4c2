// The runtime tests' main: every rank runs the same GoogleTest suite under mpirun; rank 0
// prints the report and other ranks print only their failures, and the job's status is a
// failure when any rank failed. `--hang` runs the timeout scenario instead (hang_scenario.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "hang_scenario.h"
#include "rt/abort.h"
#include "rt/mpi_base.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {  // one thread per stream calls MPI
    std::fprintf(stderr, "error: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hang") == 0) {
      const int status = moecomm::rt::run_or_abort(moecomm::rt::test::hang_scenario);
      MPI_Finalize();
      return status;
    }
  }
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
