#include "rt/abort.h"

#include "rt/mpi_base.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "rt/wait.h"

namespace moecomm::rt {

void let_peers_report(const std::exception& error) {
  if (dynamic_cast<const CommTimeout*>(&error) == nullptr) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(kPeerReportGraceSeconds));
}

int run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    let_peers_report(e);
  } catch (...) {
    std::fprintf(stderr, "error: unknown exception\n");
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace moecomm::rt
