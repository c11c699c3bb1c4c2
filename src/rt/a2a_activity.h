#pragma once
// What the token path's A2As are doing on this rank, for the gradient scheduler (grad_sync.h).
// The token exchange calls begin() when an A2A is about to be issued and end() when it has
// completed; the MoE layer may say when the next combine is due. Thread-safe.
//
// The gate implements Lina's strict priority without preemption (ATC '23 Sec. 4.1): a
// gradient micro-op may take a hold only while no A2A is pending or running; an A2A that
// becomes pending while a hold exists waits in begin() until the running micro-op ends
// ("subsequent operations have to wait until the running one finish"), so an AllReduce and
// an A2A never share the network on this rank. Without a hold (bucketed, fsmoe) begin() never
// waits. Every rank must make its begin/end calls in the same program order as its peers
// (SPMD): the lina scheduler's freedom from deadlock rests on it (grad_sync.cpp). A timeout
// on the A2A itself should start after begin() returns.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace moecomm::rt {

enum class A2APhase { kDispatch, kCombine };

class A2AActivity {
 public:
  using Clock = std::chrono::steady_clock;

  struct Snapshot {
    int pending = 0;  // begun and not ended (waiting at the gate included)
    int64_t dispatch_ends = 0;
    std::optional<Clock::time_point> combine_due;  // when the next combine A2A is expected
    double running_s = 0;    // time so far with an A2A running (past the gate) on this rank
    double gate_wait_s = 0;  // time A2As waited in begin() for a gradient micro-op
  };

  // RAII: while alive, new A2As wait in begin(). Move-only.
  class Hold {
   public:
    Hold(Hold&& o) noexcept : activity_(std::exchange(o.activity_, nullptr)) {}
    Hold& operator=(Hold&& o) noexcept;
    Hold(const Hold&) = delete;
    ~Hold();

   private:
    friend class A2AActivity;
    explicit Hold(A2AActivity* a) : activity_(a) {}
    A2AActivity* activity_;
  };

  // An A2A of `phase` is about to be issued; returns when it may be (no hold exists).
  void begin(A2APhase phase);
  // That A2A has completed.
  void end(A2APhase phase);
  // The layer's estimate: the next combine A2A begins `seconds` from now. Without one, after
  // a dispatch ends the combine is expected after the expert time measured last time (the
  // gap from a dispatch's end to the next combine's begin, an EMA).
  void expect_combine_in(double seconds);

  Snapshot snapshot() const;
  // A hold when no A2A is pending and `clear` accepts the snapshot; nullopt otherwise.
  std::optional<Hold> try_hold(const std::function<bool(const Snapshot&)>& clear);

  // `on_change` runs after every begin, end and expectation, on the caller's thread, without
  // this object's state lock held. remove_observer() waits for a running call to return.
  int add_observer(std::function<void()> on_change);
  void remove_observer(int id);

 private:
  void release_hold();
  void notify_observers();
  Snapshot snapshot_locked(Clock::time_point now) const;
  void set_running(int delta, Clock::time_point now);

  mutable std::mutex mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  int pending_ = 0, running_ = 0;
  int64_t dispatch_ends_ = 0;
  std::optional<Clock::time_point> due_, due_set_;
  std::optional<Clock::time_point> last_dispatch_end_;
  double expert_gap_s_ = -1;  // EMA; < 0: not measured yet
  Clock::time_point running_since_{};
  double running_s_ = 0, gate_wait_s_ = 0;

  std::mutex observers_mu_;  // held while observers run
  std::map<int, std::function<void()>> observers_;
  int next_observer_ = 0;
};

}  // namespace moecomm::rt
