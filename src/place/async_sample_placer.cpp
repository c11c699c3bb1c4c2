#include "place/async_sample_placer.h"

#include <chrono>
#include <utility>

#include "core/error.h"

namespace moecomm::place {

AsyncSamplePlacer::AsyncSamplePlacer(std::string_view solver)
    : placer_(solver), worker_([this] { work(); }) {}

AsyncSamplePlacer::~AsyncSamplePlacer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void AsyncSamplePlacer::submit(RoutingCounts num, std::vector<int> expert_device, DeviceGrid grid) {
  placer_.check(num, expert_device, grid);  // bad input fails here, not at collect()
  {
    std::lock_guard lock(mutex_);
    if (pending_) {
      throw Error("placement", "submit() called again before collect() took the last result");
    }
    pending_ = true;
    job_ = Job{std::move(num), std::move(expert_device), grid};
  }
  changed_.notify_all();
}

CollectedPlacement AsyncSamplePlacer::collect() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  if (!pending_) throw Error("placement", "collect() called with nothing submitted");
  changed_.wait(lock, [this] { return result_.has_value() || error_; });
  CollectedPlacement out;
  out.wait_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  pending_ = false;
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
  out.placement = std::move(*result_);
  result_.reset();
  return out;
}

void AsyncSamplePlacer::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stop_ || job_.has_value(); });
    if (stop_) return;
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    std::optional<SamplePlacement> result;
    std::exception_ptr error;
    try {
      result = placer_.place(job.num, job.expert_device, job.grid);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    result_ = std::move(result);
    error_ = error;
    changed_.notify_all();
  }
}

}  // namespace moecomm::place
