#pragma once
// What the commands that run under mpirun (train, infer) share: MPI start-up with
// MPI_THREAD_MULTIPLE (their communication threads), one error path for bad input or a stalled
// collective ("error: rank R: ..." then MPI_Abort, so no rank is left waiting), and input
// checks that end the job cleanly with one message.
#include <CLI/CLI.hpp>

#include <functional>
#include <ostream>
#include <string>

#include "cli/flag_checks.h"  // kFinite, which the commands under mpirun check flags with

namespace moecomm::cli {

// A variable `moecomm testbed run` exports (MOECOMM_TESTBED_RANKS_PER_NODE, ...): 0 when
// unset; throws Error naming it when it is not a positive integer.
int testbed_env_int(const char* name);

int mpi_world_rank();
int mpi_world_size();

// Input checks that every rank runs alike, before any collective of the job: when a rank's
// `error` is not empty, the first such rank prints "error: <error>" and every rank gets false,
// so that bad input is reported once and the job ends through MPI_Finalize with one status
// (no MPI_Abort banner). Collective over MPI_COMM_WORLD.
bool all_ranks_accept(const std::string& error, std::ostream& err);

// Initialises MPI when needed, runs `body` and returns its status; an exception prints
// "error: rank R: what" on `err` and aborts the job (status 2 with one rank).
int run_under_mpi(std::ostream& err, const std::function<int()>& body);

}  // namespace moecomm::cli
