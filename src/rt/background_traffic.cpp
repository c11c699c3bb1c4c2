#include "rt/background_traffic.h"

#include <algorithm>
#include <vector>

#include "rt/collectives.h"

namespace moecomm::rt {

BackgroundTraffic::BackgroundTraffic(const Comm& comm, int64_t bytes, CallOptions options)
    : comm_(comm),
      floats_(std::max<int64_t>(1, bytes / static_cast<int64_t>(sizeof(float)))),
      options_(std::move(options)),
      thread_([this] { run(); }) {}

BackgroundTraffic::~BackgroundTraffic() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
}

void BackgroundTraffic::run() {
  try {
    std::vector<float> data(static_cast<size_t>(floats_));
    while (true) {
      std::fill(data.begin(), data.end(), 0.0f);
      data[0] = stop_.load() ? 1.0f : 0.0f;  // summed: every member sees any member's stop
      ring_all_reduce_sum(comm_, data, options_);
      ++calls_;
      if (data[0] > 0) return;
    }
  } catch (...) {
    error_ = std::current_exception();
  }
}

int64_t BackgroundTraffic::stop() {
  stop_ = true;
  thread_.join();
  if (error_) std::rethrow_exception(error_);
  return calls_;
}

}  // namespace moecomm::rt
