#include "rt/abort.h"

#include "rt/mpi_base.h"

#include <cstdio>
#include <exception>

namespace moecomm::rt {

int run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "error: rank %d: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "error: unknown exception\n");
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace moecomm::rt
