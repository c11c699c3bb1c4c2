#include "rt/busy_time.h"

namespace moecomm::rt {

void BusyTime::enter() {
  std::lock_guard lock(mu_);
  if (active_++ == 0) since_ = Clock::now();
}

void BusyTime::leave() {
  std::lock_guard lock(mu_);
  if (--active_ == 0) total_s_ += std::chrono::duration<double>(Clock::now() - since_).count();
}

double BusyTime::seconds() const {
  std::lock_guard lock(mu_);
  double s = total_s_;
  if (active_ > 0) s += std::chrono::duration<double>(Clock::now() - since_).count();
  return s;
}

}  // namespace moecomm::rt
