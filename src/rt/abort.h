#pragma once
// The top level of an MPI program: a failure on one rank (a timeout above all) must end the
// whole job with a non-zero status instead of leaving the other ranks waiting forever.
#include <functional>

namespace moecomm::rt {

// Runs `body` and returns its status; on an exception prints "error: rank R: <what>" to
// stderr and calls MPI_Abort(MPI_COMM_WORLD, 1), which does not return.
int run_or_abort(const std::function<int()>& body);

}  // namespace moecomm::rt
