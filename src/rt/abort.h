#pragma once
// The top level of an MPI program: a failure on one rank (a timeout above all) must end the
// whole job with a non-zero status instead of leaving the other ranks waiting forever.
#include <exception>
#include <functional>

namespace moecomm::rt {

// Runs `body` and returns its status; on an exception prints "error: rank R: <what>" to
// stderr and calls MPI_Abort(MPI_COMM_WORLD, 1), which does not return.
int run_or_abort(const std::function<int()>& body);

// Call after printing `error` and before MPI_Abort. A timed-out collective (CommTimeout)
// means a peer died or stalled; the other ranks waiting on it time out within moments of this
// one, and MPI_Abort would kill them before they say which op they were in. So a timeout
// waits kPeerReportGraceSeconds first; any other error returns at once.
inline constexpr double kPeerReportGraceSeconds = 1.0;
void let_peers_report(const std::exception& error);

}  // namespace moecomm::rt
