#pragma once
// What each rank's communication did during one step, call by call, so a measured step can be
// laid beside the simulator's schedule of it (`moecomm bench --trace`): every wait on a
// collective's requests is one interval on the thread that waited, plus the phases the
// training loop marks. Recording is off until arm(); thread-safe.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rt/mpi_base.h"

namespace moecomm::rt {

struct CallEvent {
  int rank = 0;
  int thread = 0;     // 0: the thread that armed the trace (the training loop's), then in order
  std::string label;  // the call's label ("moe.dispatch.a2a [layer 0]"), or a phase ("forward")
  std::string what;   // the part of the call ("all_to_all_v", "send to rank 3"); "" for a phase
  double begin_s = 0, end_s = 0;  // since arm()
};

class CallTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // Clears what was recorded and starts recording, times counted from now; the calling thread
  // is thread 0.
  void arm(int rank);
  void disarm();
  bool armed() const { return armed_.load(std::memory_order_relaxed); }
  // Ignored unless armed.
  void record(const std::string& label, const std::string& what, Clock::time_point begin,
              Clock::time_point end);
  std::vector<CallEvent> events() const;

 private:
  std::atomic<bool> armed_{false};
  mutable std::mutex mu_;
  int rank_ = 0;
  Clock::time_point origin_{};
  std::map<std::thread::id, int> threads_;
  std::vector<CallEvent> events_;
};

// Every rank's events on `root` (in rank order; empty elsewhere). Collective over `comm`.
std::vector<CallEvent> gather_call_events(const std::vector<CallEvent>& mine, MPI_Comm comm,
                                          int root);

}  // namespace moecomm::rt
