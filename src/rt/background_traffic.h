#pragma once
// Communication kept busy in the background, for `moecomm profile` to measure what it costs
// the compute running beside it (Device::overlapped_compute_share).
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>

#include "rt/comm.h"
#include "rt/wait.h"

namespace moecomm::rt {

// A thread that runs ring AllReduces of `bytes` back to back over `comm` (its own
// communicator: MPI_THREAD_MULTIPLE), as the runtime's gradient and expert streams do during
// a step. Every member constructs one; stop() is collective.
class BackgroundTraffic {
 public:
  BackgroundTraffic(const Comm& comm, int64_t bytes, CallOptions options);
  ~BackgroundTraffic();
  BackgroundTraffic(const BackgroundTraffic&) = delete;
  BackgroundTraffic& operator=(const BackgroundTraffic&) = delete;

  // Every member stops after the same AllReduce: the stop flags travel in its sum. Rethrows
  // what the thread threw (a stalled AllReduce's timeout). Returns the AllReduces run.
  int64_t stop();

 private:
  void run();

  const Comm& comm_;
  int64_t floats_;
  CallOptions options_;
  std::atomic<bool> stop_{false};
  int64_t calls_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace moecomm::rt
