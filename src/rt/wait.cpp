#include "rt/wait.h"

#include <chrono>
#include <sstream>
#include <thread>

namespace moecomm::rt {

void wait_all(std::span<MPI_Request> requests, const Comm& comm, const std::string& what,
              const CallOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.timeout_s));
  for (int polls = 0;; ++polls) {
    int done = 0;
    check_mpi(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    if (done) return;
    if (options.cancel && options.cancel->load()) {
      throw Cancelled(options.label + ": " + what + " cancelled: another stream failed");
    }
    if (Clock::now() > deadline) {
      std::ostringstream os;
      os << "timeout: " << options.label << ": " << what << " on rank " << comm.my_global_rank()
         << " over group " << group_text(comm.group()) << " (communicator " << comm.name()
         << ") did not finish within " << options.timeout_s
         << " s; a peer never joined or stopped sending";
      throw CommTimeout(os.str());
    }
    // Spin briefly for latency, then back off: ranks are often oversubscribed on few cores.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
    }
  }
}

}  // namespace moecomm::rt
