#pragma once
// The runtime's data-parallel gradient AllReduce, scheduled by the grad_sync knob
// (sched/strategy.h; the simulator's twin is sched/build_grad_sync.cpp). The backward hands
// each layer's final gradients over with layer_ready(); one background thread AllReduces them
// in FIFO order (the same on every rank, so the collectives match) on communicators of their
// own (a channel other than the token path's: MPI_THREAD_MULTIPLE lets both run at once):
//   * bucketed: one AllReduce per layer tensor group, as soon as the thread is free.
//   * lina (ATC '23 Sec. 4.1-4.2): `partitions` micro-ops per group, each run only while no
//     A2A is pending or running and the next combine is not imminent; A2As wait for a running
//     micro-op, which is never interrupted (A2AActivity's gate).
//   * fsmoe (ASPLOS '25 Sec. 5): `partitions` pieces per group, held until their overlap
//     window opens: the end of the next dispatch A2A after layer_ready (the next MoE layer's
//     backward); those still held at finish() go then.
// The caller must not touch a layer's gradients between layer_ready() and finish().
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nn/param.h"
#include "rt/a2a_activity.h"
#include "rt/comm.h"
#include "rt/wait.h"
#include "sched/strategy.h"

namespace moecomm::rt {

struct GradSyncStats {
  int64_t micro_ops = 0;   // AllReduces of gradients run (empty pieces are skipped)
  int64_t bytes = 0;       // gradient bytes this rank AllReduced
  double allreduce_s = 0;  // time inside those AllReduces
  double overlap_s = 0;    // of which an A2A was running on this rank (lina: 0)
  double held_s = 0;       // a micro-op at the head of the queue held back by the policy
  int64_t votes = 0;       // lina: agreement rounds (an AllReduce of one float each)
};

// One gradient AllReduce as it ran on this rank (for timelines and tests).
struct MicroOpRecord {
  int layer = 0;
  bool expert = false;
  int part = 0, parts = 1;
  int64_t elements = 0;
  A2AActivity::Clock::time_point start, end;
};

class GradSync {
 public:
  // dense: the dense gradients' group (dp x cp), which must contain the expert group (the
  // lina agreement runs on it); expert: the expert-data-parallel group, null or size 1 when
  // there is nothing to reduce. options: timeout, byte counting (read it after finish()) and
  // the label prefix (e.g. "grad": ops are "grad.dense.allreduce [layer 2, part 1/4]");
  // options.cancel is replaced by this object's own. Throws moecomm::Error on partitions
  // outside [1, sched::kMaxGradPartitions] or when MPI lacks MPI_THREAD_MULTIPLE.
  GradSync(sched::GradSync policy, int partitions, const Comm& dense, const Comm* expert,
           CallOptions options, A2AActivity& activity);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;
  // Joins the thread; an AllReduce still in flight is cancelled and its buffer kept (leaked):
  // MPI may still write into it.
  ~GradSync();

  // Layer `layer`'s gradients are final (layers arrive last to first). Copies them into
  // staging buffers and queues their micro-ops; they are written back when reduced.
  // Rethrows the background thread's error, if any.
  void layer_ready(int layer, std::vector<nn::Param*> dense, std::vector<nn::Param*> expert);
  // Releases what is held, waits for every micro-op and rethrows the background thread's first
  // error (CommTimeout, ...). Afterwards each gradient is the sum over its group.
  void finish();

  GradSyncStats stats() const;
  std::vector<MicroOpRecord> records() const;  // every micro-op so far, in run order

 private:
  using Clock = A2AActivity::Clock;
  struct Group;  // one layer's dense or expert gradients, staged contiguously
  struct MicroOp {
    Group* group = nullptr;
    int part = 0;
    int64_t offset = 0, count = 0;
  };

  void add_group(int layer, bool expert, const Comm* comm, std::vector<nn::Param*> params);
  void run();
  bool wait_turn(const MicroOp& op, std::optional<A2AActivity::Hold>& hold);
  bool wait_window(const MicroOp& op);
  bool lina_agree(const MicroOp& op, std::optional<A2AActivity::Hold>& hold);
  bool vote(bool clear, const MicroOp& op);
  void execute(const MicroOp& op, Clock::time_point head);
  void fail(std::exception_ptr error);
  CallOptions options_for(const std::string& what, const MicroOp& op) const;

  const sched::GradSync policy_;
  const int partitions_;
  const Comm& dense_;
  const Comm* expert_;
  const Comm* vote_comm_;
  CallOptions options_;
  A2AActivity& activity_;
  int observer_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MicroOp> queue_;
  std::vector<std::unique_ptr<Group>> groups_;  // this step's
  int64_t next_group_ = 0;
  bool busy_ = false, finishing_ = false, stop_ = false;
  std::exception_ptr error_;
  std::atomic<bool> cancel_{false};
  GradSyncStats stats_;
  std::vector<MicroOpRecord> records_;

  // Background thread only.
  std::unique_ptr<float> vote_buf_ = std::make_unique<float>(0.0f);
  int64_t agreed_group_ = -1;  // lina: the last group whose readiness all ranks agreed on
  double s_per_byte_ = 0;      // EMA of measured micro-ops; 0: none yet

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace moecomm::rt
