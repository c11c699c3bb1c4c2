#include "rt/a2a_activity.h"

#include <stdexcept>

namespace moecomm::rt {

namespace {

double seconds(A2AActivity::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

A2AActivity::Hold::~Hold() {
  if (activity_) activity_->release_hold();
}

A2AActivity::Hold& A2AActivity::Hold::operator=(Hold&& o) noexcept {
  if (this != &o) {
    if (activity_) activity_->release_hold();
    activity_ = std::exchange(o.activity_, nullptr);
  }
  return *this;
}

void A2AActivity::begin(A2APhase phase) {
  {
    std::unique_lock lock(mu_);
    ++pending_;
    const Clock::time_point asked = Clock::now();
    if (phase == A2APhase::kCombine) {
      // The expert computation just ended: remember how long it took for the next layer.
      if (last_dispatch_end_) {
        const double gap = seconds(asked - *last_dispatch_end_);
        expert_gap_s_ = expert_gap_s_ < 0 ? gap : 0.5 * (expert_gap_s_ + gap);
        last_dispatch_end_.reset();
      }
      due_.reset();
      due_set_.reset();
    }
    gate_cv_.wait(lock, [&] { return !held_; });
    const Clock::time_point now = Clock::now();
    gate_wait_s_ += seconds(now - asked);
    set_running(+1, now);
  }
  notify_observers();
}

void A2AActivity::end(A2APhase phase) {
  {
    std::lock_guard lock(mu_);
    if (running_ == 0) throw std::logic_error("A2AActivity::end without a matching begin");
    const Clock::time_point now = Clock::now();
    --pending_;
    set_running(-1, now);
    if (phase == A2APhase::kDispatch) {
      ++dispatch_ends_;
      last_dispatch_end_ = now;
      if (expert_gap_s_ >= 0) {
        due_ = now + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(expert_gap_s_));
        due_set_ = now;
      }
    }
  }
  notify_observers();
}

void A2AActivity::expect_combine_in(double s) {
  {
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    due_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    due_set_ = now;
  }
  notify_observers();
}

void A2AActivity::set_running(int delta, Clock::time_point now) {
  if (running_ == 0 && delta > 0) running_since_ = now;
  running_ += delta;
  if (running_ == 0 && delta < 0) running_s_ += seconds(now - running_since_);
}

A2AActivity::Snapshot A2AActivity::snapshot_locked(Clock::time_point now) const {
  Snapshot s;
  s.pending = pending_;
  s.dispatch_ends = dispatch_ends_;
  // An expectation late by more than its own lead time is stale (the estimate was wrong or
  // the combine never came): forget it rather than hold gradients back for ever.
  if (due_ && now <= *due_ + (*due_ - *due_set_)) s.combine_due = due_;
  s.running_s = running_s_ + (running_ > 0 ? seconds(now - running_since_) : 0.0);
  s.gate_wait_s = gate_wait_s_;
  return s;
}

A2AActivity::Snapshot A2AActivity::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_locked(Clock::now());
}

std::optional<A2AActivity::Hold> A2AActivity::try_hold(
    const std::function<bool(const Snapshot&)>& clear) {
  std::lock_guard lock(mu_);
  if (held_ || pending_ > 0 || !clear(snapshot_locked(Clock::now()))) return std::nullopt;
  held_ = true;
  return Hold(this);
}

void A2AActivity::release_hold() {
  {
    std::lock_guard lock(mu_);
    held_ = false;
  }
  gate_cv_.notify_all();
}

int A2AActivity::add_observer(std::function<void()> on_change) {
  std::lock_guard lock(observers_mu_);
  observers_.emplace(next_observer_, std::move(on_change));
  return next_observer_++;
}

void A2AActivity::remove_observer(int id) {
  std::lock_guard lock(observers_mu_);
  observers_.erase(id);
}

void A2AActivity::notify_observers() {
  std::lock_guard lock(observers_mu_);
  for (const auto& [id, on_change] : observers_) on_change();
}

}  // namespace moecomm::rt
