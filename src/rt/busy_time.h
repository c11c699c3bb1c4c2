#pragma once
// Wall time during which at least one call of a kind was running on this rank: the union of
// the calls' intervals over every thread, so chunks in flight together count once. `moecomm
// bench` compares it with the simulator's union of the same ops (issue 7). Thread-safe.
#include <chrono>
#include <mutex>

namespace moecomm::rt {

class BusyTime {
 public:
  using Clock = std::chrono::steady_clock;

  void enter();
  void leave();
  // Busy seconds so far, a running interval included up to now.
  double seconds() const;

 private:
  mutable std::mutex mu_;
  int active_ = 0;
  Clock::time_point since_{};
  double total_s_ = 0;
};

// enter() on construction, leave() on destruction; a null BusyTime is ignored.
class BusyScope {
 public:
  explicit BusyScope(BusyTime* busy) : busy_(busy) {
    if (busy_) busy_->enter();
  }
  ~BusyScope() {
    if (busy_) busy_->leave();
  }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;

 private:
  BusyTime* busy_;
};

}  // namespace moecomm::rt
