#include "rt/grad_sync.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "rt/collectives.h"
#include "rt/mpi_base.h"
#include "rt/thread_priority.h"

namespace moecomm::rt {

namespace {

using Clock = A2AActivity::Clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
Clock::duration duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// After a failed Lina agreement every rank backs off before voting again: no busy polling on
// shared cores, and votes stay rare next to the A2As they wait for.
constexpr double kMinBackoffS = 0.5e-3, kMaxBackoffS = 8e-3;
constexpr double kEmaWeight = 0.5;  // of the newest micro-op in the seconds-per-byte estimate

bool reduces(const Comm* comm) {
  return comm != nullptr && comm->size() > 1;
}

}  // namespace

struct GradSync::Group {
  int64_t id = 0;
  int layer = 0;
  bool expert = false;
  const Comm* comm = nullptr;
  std::vector<nn::Param*> params;
  std::vector<float> data;  // the params' gradients back to back
  int parts = 1, left = 0;  // pieces in all; not yet reduced (background thread)
  int64_t window = 0;       // fsmoe: held until the activity has seen more dispatch ends
};

GradSync::GradSync(sched::GradSync policy, int partitions, const Comm& dense, const Comm* expert,
                   CallOptions options, A2AActivity& activity)
    : policy_(policy),
      partitions_(partitions),
      dense_(dense),
      expert_(expert),
      vote_comm_(reduces(&dense) ? &dense : expert),
      options_(std::move(options)),
      activity_(activity) {
  if (partitions < 1 || partitions > sched::kMaxGradPartitions) {
    throw Error("grad_partitions", "must be in [1, " + std::to_string(sched::kMaxGradPartitions) +
                                       "], got " + std::to_string(partitions));
  }
  if (reduces(&dense) || reduces(expert)) {
    int provided = 0;
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_MULTIPLE) {
      throw Error("grad_sync", "the gradient thread needs MPI_THREAD_MULTIPLE");
    }
  }
  options_.cancel = &cancel_;
  observer_ = activity_.add_observer([this] {
    { std::lock_guard lock(mu_); }  // the waiter is either before its check or waiting
    cv_.notify_all();
  });
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    activity_.remove_observer(observer_);
    throw;
  }
}

GradSync::~GradSync() {
  activity_.remove_observer(observer_);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cancel_ = true;  // an AllReduce in flight throws Cancelled; fail() keeps its buffer
  cv_.notify_all();
  thread_.join();
}

void GradSync::layer_ready(int layer, std::vector<nn::Param*> dense,
                           std::vector<nn::Param*> expert) {
  {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  // The simulator's order (build_grad_sync.cpp): expert gradients first, then dense.
  add_group(layer, true, expert_, std::move(expert));
  add_group(layer, false, &dense_, std::move(dense));
}

void GradSync::add_group(int layer, bool expert, const Comm* comm, std::vector<nn::Param*> params) {
  int64_t total = 0;
  for (const nn::Param* p : params) total += p->grad->size();
  if (!reduces(comm) || total == 0) return;
  auto g = std::make_unique<Group>();
  g->layer = layer;
  g->expert = expert;
  g->comm = comm;
  g->params = std::move(params);
  g->data.resize(static_cast<size_t>(total));
  for (int64_t at = 0; const nn::Param* p : g->params) {
    std::copy_n(p->grad->data(), p->grad->size(), g->data.data() + at);
    at += p->grad->size();
  }
  // Near-equal pieces (Lina: "equal-sized small chunks"); bucketed is one AllReduce per group.
  g->parts = policy_ == sched::GradSync::kBucketed ? 1 : partitions_;
  std::vector<MicroOp> ops;
  for (int i = 0; i < g->parts; ++i) {
    const int64_t from = total * i / g->parts, to = total * (i + 1) / g->parts;
    if (to > from) ops.push_back({g.get(), i, from, to - from});
  }
  g->left = static_cast<int>(ops.size());
  g->window = activity_.snapshot().dispatch_ends;
  {
    std::lock_guard lock(mu_);
    g->id = next_group_++;
    queue_.insert(queue_.end(), ops.begin(), ops.end());
    groups_.push_back(std::move(g));
  }
  cv_.notify_all();
}

void GradSync::finish() {
  std::unique_lock lock(mu_);
  finishing_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return error_ || (queue_.empty() && !busy_); });
  finishing_ = false;
  if (error_) std::rethrow_exception(error_);
  groups_.clear();
}

void GradSync::run() {
  prioritize_comm_thread();
  for (;;) {
    MicroOp op;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      op = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    try {
      const Clock::time_point head = Clock::now();
      std::optional<A2AActivity::Hold> hold;  // lina: A2As wait until the micro-op is done
      if (!wait_turn(op, hold)) return;       // stopped
      execute(op, head);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

bool GradSync::wait_turn(const MicroOp& op, std::optional<A2AActivity::Hold>& hold) {
  switch (policy_) {
    case sched::GradSync::kBucketed:
      return true;
    case sched::GradSync::kFsmoe:
      return wait_window(op);
    case sched::GradSync::kLina:
      return lina_agree(op, hold);
  }
  return true;
}

// FSMoE Sec. 5: a layer's gradients overlap the next MoE layer's backward, from the end of
// its dispatch A2A ("Gradient-AllReduce is followed by the AlltoAll Dispatch"); the first
// layer's have no later window and go at finish().
bool GradSync::wait_window(const MicroOp& op) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || finishing_ || activity_.snapshot().dispatch_ends > op.group->window;
  });
  return !stop_;
}

// Lina Sec. 4.1-4.2: a micro-op starts only while no A2A is pending or running and, as the
// combine is imminent while the experts compute, only when its estimated duration (seconds
// per byte of the previous micro-ops) fits before the expected combine. These are local
// facts, but an AllReduce needs every member, so the ranks agree first: each votes "clear"
// holding its A2A gate (nothing starts between its vote and the micro-op), and the micro-op
// runs only when all voted clear; otherwise the holds go and all vote again after a back-off.
// Votes never wait for A2As, and A2As wait only for agreed micro-ops, which every member
// starts at once: no rank can wait for another in a cycle. A barrier vote first makes every
// rank's group ready, so no gate is held while a slow rank finishes its backward.
bool GradSync::lina_agree(const MicroOp& op, std::optional<A2AActivity::Hold>& hold) {
  if (op.group->id != agreed_group_) {
    vote(false, op);
    agreed_group_ = op.group->id;
  }
  const double estimate = s_per_byte_ * 4.0 * static_cast<double>(op.count);
  for (double backoff = kMinBackoffS;; backoff = std::min(2 * backoff, kMaxBackoffS)) {
    bool finishing = false;
    {
      std::lock_guard lock(mu_);
      finishing = finishing_;  // the backward is over: no combine is coming
    }
    hold = activity_.try_hold([&](const A2AActivity::Snapshot& s) {
      return finishing || !s.combine_due || Clock::now() + duration(estimate) <= *s.combine_due;
    });
    if (vote(hold.has_value(), op)) return true;
    hold.reset();
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, duration(backoff), [&] { return stop_; })) return false;
  }
}

bool GradSync::vote(bool clear, const MicroOp& op) {
  *vote_buf_ = clear ? 1.0f : 0.0f;
  CallOptions o = options_for("vote", op);
  o.bytes = nullptr;  // not gradient traffic, nor AllReduce time (the simulator has no votes)
  o.busy = nullptr;
  all_reduce_sum(*vote_comm_, std::span<float>(vote_buf_.get(), 1), o);
  {
    std::lock_guard lock(mu_);
    ++stats_.votes;
  }
  return *vote_buf_ == static_cast<float>(vote_comm_->size());
}

void GradSync::execute(const MicroOp& op, Clock::time_point head) {
  Group& g = *op.group;
  const double a2a_before = activity_.snapshot().running_s;
  const Clock::time_point start = Clock::now();
  all_reduce_sum(*g.comm,
                 std::span<float>(g.data.data() + op.offset, static_cast<size_t>(op.count)),
                 options_for("allreduce", op));
  const Clock::time_point end = Clock::now();
  const double overlap = activity_.snapshot().running_s - a2a_before;
  const double bytes = 4.0 * static_cast<double>(op.count);
  const double rate = seconds(end - start) / bytes;
  s_per_byte_ = s_per_byte_ == 0 ? rate : kEmaWeight * rate + (1 - kEmaWeight) * s_per_byte_;
  if (--g.left == 0) {
    for (int64_t at = 0; nn::Param * p : g.params) {
      std::copy_n(g.data.data() + at, p->grad->size(), p->grad->data());
      at += p->grad->size();
    }
  }
  std::lock_guard lock(mu_);
  ++stats_.micro_ops;
  stats_.bytes += 4 * op.count;
  stats_.allreduce_s += seconds(end - start);
  stats_.overlap_s += overlap;
  stats_.held_s += seconds(start - head);
  records_.push_back({g.layer, g.expert, op.part, g.parts, op.count, start, end});
}

void GradSync::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (!error_) error_ = error;
    // An abandoned MPI request may still write into these buffers: keep them for ever.
    for (std::unique_ptr<Group>& g : groups_) (void)g.release();
    groups_.clear();
    (void)vote_buf_.release();
    queue_.clear();
    busy_ = false;
  }
  cv_.notify_all();
}

CallOptions GradSync::options_for(const std::string& what, const MicroOp& op) const {
  CallOptions o = options_;
  o.label += (op.group->expert ? ".expert." : ".dense.") + what + " [layer " +
             std::to_string(op.group->layer) + ", part " + std::to_string(op.part + 1) + "/" +
             std::to_string(op.group->parts) + "]";
  return o;
}

GradSyncStats GradSync::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::vector<MicroOpRecord> GradSync::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

}  // namespace moecomm::rt
