#include "cli/mpi_command.h"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.h"
#include "rt/abort.h"
#include "rt/mpi_base.h"
#include "rt/thread_priority.h"

namespace moecomm::cli {

int mpi_world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int testbed_env_int(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != std::string(text).size() || v < 1)
    throw Error(name, std::string("'") + text + "' is not a positive integer");
  return v;
}

int mpi_world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

bool all_ranks_accept(const std::string& error, std::ostream& err) {
  const int me = mpi_world_rank(), world = mpi_world_size();
  int first = error.empty() ? world : me;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world) return true;
  if (me == first) {
    err << "error: " + error + "\n";  // one write: see run_under_mpi
    err.flush();
  }
  return false;
}

int run_under_mpi(std::ostream& err, const std::function<int()>& body) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // The schedule's AllReduce is a ring (sched::Algorithm::kRing, what the simulator
    // prices); Open MPI's non-blocking AllReduce picks binomial or recursive doubling by size
    // unless told. A value the user set is kept.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  int status = 0;
  try {
    rt::comm_thread_nice();  // a bad MOECOMM_COMM_THREAD_NICE fails here, before any thread
    status = body();
  } catch (const std::exception& e) {
    // Every rank sees the same bad input; one stalled or failed rank must end the job.
    // One write: stderr is unbuffered, and mpirun relays each piece on its own, so a line
    // written in parts can come out split by MPI_Abort's banner.
    err << "error: rank " + std::to_string(mpi_world_rank()) + ": " + e.what() + "\n";
    err.flush();
    if (mpi_world_size() > 1) {
      rt::let_peers_report(e);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    status = 2;
  }
  if (!initialized) MPI_Finalize();
  return status;
}

}  // namespace moecomm::cli
