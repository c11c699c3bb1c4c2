#pragma once
// A hang is an error, not a freeze: every MPI operation is issued non-blocking and
// polled against a deadline; past it, CommTimeout names the op, this rank and the group.
#include "rt/mpi_base.h"

#include <atomic>
#include <span>
#include <stdexcept>
#include <string>

#include "rt/comm.h"
#include "rt/link_bytes.h"

namespace moecomm::rt {

class CommTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when `CallOptions::cancel` is set while waiting: another stream failed first.
class Cancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CallOptions {
  std::string label = "collective";  // names the op in errors, e.g. "moe.dispatch.a2a"
  double timeout_s = 60;
  int ranks_per_node = 1;      // node = global rank / ranks_per_node (byte levels, 1DH and 2DH)
  LinkBytes* bytes = nullptr;  // bytes this rank sends, added by level (collectives.h)
  const std::atomic<bool>* cancel = nullptr;
};

// Polls `requests` until all are complete. `what` says what they are ("all_reduce",
// "send to rank 3"); `comm` gives this rank and the group for the message.
void wait_all(std::span<MPI_Request> requests, const Comm& comm, const std::string& what,
              const CallOptions& options);

}  // namespace moecomm::rt
