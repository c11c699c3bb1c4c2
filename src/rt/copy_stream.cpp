#include "rt/copy_stream.h"

#include <utility>

#include "rt/thread_priority.h"

namespace moecomm::rt {

CopyStream::CopyStream() : thread_([this] { run(); }) {}

CopyStream::~CopyStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_future<void> CopyStream::enqueue(std::function<void()> task) {
  std::packaged_task<void()> job(std::move(task));
  std::shared_future<void> done = job.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(job));
  }
  cv_.notify_all();
  return done;
}

void CopyStream::run() {
  prioritize_comm_thread();
  for (;;) {
    std::packaged_task<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      job = std::move(tasks_.front());
      tasks_.pop_front();
    }
    job();  // stores the exception in the future
  }
}

}  // namespace moecomm::rt
