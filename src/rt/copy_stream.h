#pragma once
// A copy stream: one thread that runs its tasks in the order they were queued, as a CUDA
// stream runs its kernels (DESIGN.md "One schedule, two executors": the schedule's copy
// stream). HybridEP's asynchronous communicator (Fig. 10) runs its expert transfers on one,
// beside the compute thread. A task's exception reaches whoever waits for its future; the
// tasks after it still run (each one fails on its own, e.g. on a timeout).
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace moecomm::rt {

class CopyStream {
 public:
  CopyStream();
  ~CopyStream();  // runs what is queued, then joins
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  std::shared_future<void> enqueue(std::function<void()> task);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace moecomm::rt
