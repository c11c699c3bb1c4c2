#pragma once
// What the commands that run under mpirun (train, infer) share: MPI start-up with
// MPI_THREAD_MULTIPLE (their communication threads), one error path for bad input or a stalled
// collective ("error: rank R: ..." then MPI_Abort, so no rank is left waiting), and a
// finite-number validator (CLI::Range lets NaN through: every comparison with it is false).
#include <CLI/CLI.hpp>

#include <functional>
#include <ostream>

namespace moecomm::cli {

extern const CLI::Validator kFinite;

// A variable `moecomm testbed run` exports (MOECOMM_TESTBED_RANKS_PER_NODE, ...): 0 when
// unset; throws Error naming it when it is not a positive integer.
int testbed_env_int(const char* name);

int mpi_world_rank();
int mpi_world_size();

// Initialises MPI when needed, runs `body` and returns its status; an exception prints
// "error: rank R: what" on `err` and aborts the job (status 2 with one rank).
int run_under_mpi(std::ostream& err, const std::function<int()>& body);

}  // namespace moecomm::cli
