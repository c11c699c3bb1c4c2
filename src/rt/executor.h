#pragma once
// Runs one rank's part of a schedule for real (DESIGN.md "One schedule, three executors"): one
// thread per stream runs its ops in order; an op waits for its events (ops on other streams
// of this rank); collectives run on a communicator per (group, streams) so different
// streams' collectives may be in flight at once; send/recv use a world communicator with the
// op's tag. Compute and copy ops call a kernel; collectives move real buffers. Every op's
// start and end wall time is recorded so a run can be set beside the simulator's, op by op.
#include "rt/mpi_base.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "rt/comm_pool.h"
#include "rt/dedup_a2a.h"
#include "rt/link_bytes.h"
#include "rt/wait.h"
#include "sched/schedule.h"

namespace moecomm::rt {

// A collective's or send/recv's data, in and out in place (floats for the reductions):
//   A2A: in: blocks by destination member, counts = bytes per member; out: blocks by source
//     member, counts = bytes received from each member.
//   AllGather: in: this member's block; out: all blocks in member order. With counts (the
//     same on every member): AllGather-v, counts[i] bytes from member i.
//   ReduceScatter: in: n equal fp32 blocks; out: this member's summed block. With counts:
//     ReduceScatter-v, counts[j] bytes of the input for member j.
//   AllReduce: fp32 sum in place. Broadcast: the root's data everywhere (size set on all).
//   Send: in: the payload. Recv: out: the payload (size set before).
struct OpBuffer {
  std::vector<std::byte> data = {};
  std::vector<int64_t> counts = {};
  // A2A, when the receiver knows them: the bytes from each member (the flat A2A then skips
  // its counts exchange); empty: exchanged.
  std::vector<int64_t> recv_counts = {};
  // a2a=dedup (rt/dedup_a2a.h): the rows with their tokens, in place of data and counts. The
  // dispatch leaves what arrived in `keyed`; the combine leaves its sums per token in
  // `reduced`, for `tokens` tokens of this member.
  std::shared_ptr<KeyedRows> keyed = nullptr;
  std::shared_ptr<ReducedRows> reduced = nullptr;
  int64_t tokens = 0;
};

struct ExecOptions {
  double timeout_s = 60;   // per MPI operation
  int ranks_per_node = 1;  // node = rank / ranks_per_node: byte levels, 1DH and 2DH
};

struct OpTime {
  double start = -1;  // seconds since the run's common start (after a barrier); -1: not run
  double end = -1;
};

struct ExecResult {
  std::vector<OpTime> ops;  // indexed by OpId; this rank's ops are filled
  // Lina's gate (sched/policy.h): votes taken and seconds the micro-ops waited in them.
  int64_t gate_votes = 0;
  double gate_held_s = 0;
  LinkBytes a2a_bytes;           // bytes this rank's A2As sent, by link level
  LinkBytes other_bytes;         // the same for its other collectives
  std::vector<LinkBytes> bytes;  // by OpId: what each of this rank's collectives sent
  double wall_s = 0;             // from the common start to this rank's last op end
};

class Executor {
 public:
  using Kernel = std::function<void()>;
  // Returns the op's buffer, or nullptr to let the executor allocate one (zeros) from the
  // op's sizes: the A2A pair matrix row gives the counts.
  using BufferFn = std::function<OpBuffer*(sched::OpId)>;

  // Collective over `world` (size = the schedule's world): validates the schedule and builds
  // the communicators it needs. Throws moecomm::Error on a bad schedule.
  Executor(MPI_Comm world, const sched::Schedule& schedule, ExecOptions options = {});
  ~Executor();

  // Compute and copy ops run their kernel, or the default kernel, or nothing.
  void set_kernel(sched::OpId op, Kernel kernel) { kernels_[op] = std::move(kernel); }
  void set_default_kernel(std::function<void(sched::OpId)> kernel) {
    default_kernel_ = std::move(kernel);
  }
  void set_buffers(BufferFn buffers) { buffers_ = std::move(buffers); }
  // Runs on the op's stream right after every op of this rank ends (a collective's received
  // data can be read from its buffer there), before the ops that wait for it start.
  void set_after(std::function<void(sched::OpId)> after) { after_ = std::move(after); }

  // Collective over `world`. Rethrows the first failure of any stream (CommTimeout names the
  // op); the caller decides whether to abort the job (see run_or_abort).
  ExecResult run();

 private:
  struct Completion {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
  };

  void build_comms();
  void run_stream(int stream);
  bool communicates_only(int stream) const;
  void wait_for(sched::OpId dep);
  void run_op(sched::OpId id);
  void run_collective(sched::OpId id);
  void run_dedup(const sched::Collective& c, const Comm& comm, OpBuffer& buf, const CallOptions& o);
  void run_p2p(sched::OpId id);
  CallOptions call_options(sched::OpId id, LinkBytes* bytes) const;
  OpBuffer* buffer_for(sched::OpId id, OpBuffer& fallback) const;
  void finish(sched::OpId id);
  void fail(std::exception_ptr error);
  // Lina's gate (sched/policy.h): enter before the op runs, leave after.
  void enter_gate(sched::OpId id);
  void leave_gate(sched::OpId id);
  bool vote_busy(sched::OpId id, int busy);

  MPI_Comm world_;
  const sched::Schedule& s_;
  ExecOptions options_;
  int me_ = 0;
  CommPool comms_;
  std::vector<CommKey> collective_key_;  // by CollectiveId
  std::vector<CommKey> gate_key_;        // by CollectiveId: a micro-op's vote communicator
  std::unordered_map<sched::OpId, Kernel> kernels_;
  std::function<void(sched::OpId)> default_kernel_;
  BufferFn buffers_;
  std::function<void(sched::OpId)> after_;

  std::vector<std::unique_ptr<Completion>> done_;  // by OpId; this rank's ops only
  std::vector<OpTime> times_;
  std::vector<LinkBytes> op_bytes_;  // by OpId: each op's call writes its own
  double t0_ = 0;
  std::atomic<bool> failed_{false};
  std::mutex gate_m_;
  std::condition_variable gate_cv_;
  int traffic_ = 0;    // collectives that wait for micro-ops, ready or running on this rank
  int micro_ops_ = 0;  // micro-ops running (or voting to run) on this rank
  int64_t votes_ = 0;  // written by the gradient stream only
  double held_s_ = 0;
  std::mutex error_m_;
  std::exception_ptr error_;
};

// Rank 0 gets every rank's op times merged (indexed by OpId); other ranks get theirs back.
// Collective over `world`.
std::vector<OpTime> gather_op_times(MPI_Comm world, const std::vector<OpTime>& mine,
                                    double timeout_s = 60);

}  // namespace moecomm::rt
