#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "core/error.h"
#include "mpi_test_util.h"
#include "rt/executor.h"

namespace moecomm::rt {
namespace {

using sched::OpId;
using sched::OpKind;
using test::all_ranks;
using test::world_rank;
using test::world_size;

std::vector<std::byte> to_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
std::vector<float> to_floats(const std::vector<std::byte>& b) {
  std::vector<float> out(b.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

// A small MoE step per rank: stream 0 runs gate -> dispatch A2A -> expert; stream 1 runs the
// gradient AllReduce once the gate is done (an event); stream 2 passes a token around a ring.
struct StepSchedule {
  sched::Schedule s{world_size()};
  std::vector<OpId> gate, a2a, expert, allreduce, send, recv;

  StepSchedule() {
    const int n = world_size();
    for (int r = 0; r < n; ++r) {
      gate.push_back(s.add_compute(r, 0, 1e6, 0, test::label(sched::OpRole::kGate)));
    }
    sched::CollectiveSpec spec;
    spec.kind = OpKind::kAllToAll;
    spec.group = all_ranks();
    spec.pair_bytes = test::pair_bytes(all_ranks());
    spec.label = test::label(sched::OpRole::kDispatchA2A, 0);
    std::vector<std::vector<OpId>> deps;
    for (int r = 0; r < n; ++r) deps.push_back({gate[r]});
    a2a = s.add_collective(spec, 0, deps).ops;
    for (int r = 0; r < n; ++r) {
      expert.push_back(s.add_compute(r, 0, 1e6, 0, test::label(sched::OpRole::kExpert)));
    }
    sched::CollectiveSpec grad;
    grad.kind = OpKind::kAllReduce;
    grad.group = all_ranks();
    grad.bytes = 4.0 * 6;
    grad.label = test::label(sched::OpRole::kGradDenseAllReduce);
    allreduce = s.add_collective(grad, 1, deps).ops;
    for (int r = 0; r < n; ++r) {
      const auto pair = s.add_send_recv({r, 2}, {(r + 1) % n, 2}, 8, 5,
                                        test::label(sched::OpRole::kStageSendActivations));
      send.push_back(pair.send);
    }
    recv.resize(n);
    for (int r = 0; r < n; ++r) recv[(r + 1) % n] = s.op(send[r]).twin;
  }
};

// Lina's gate (sched/policy.h): rank 0 reaches the A2A 50 ms late, so the others wait in it
// from the start; a gradient micro-op (priority -1) ready from the start on every rank must
// not start before the A2A has ended on its rank, and the votes say so.
TEST(Executor, MicroOpsWaitForTheA2AsReadyOnAnyRank) {
  const int n = world_size(), me = world_rank();
  sched::Schedule s(n);
  const OpId late = s.add_compute(0, 0, 1, 0, test::label(sched::OpRole::kAttention));
  sched::CollectiveSpec a2a;
  a2a.kind = OpKind::kAllToAll;
  a2a.group = all_ranks();
  a2a.pair_bytes = test::pair_bytes(all_ranks());
  a2a.label = test::label(sched::OpRole::kDispatchA2A, 0);
  a2a.priority = 1;
  std::vector<std::vector<OpId>> deps(static_cast<size_t>(n));
  deps[0] = {late};
  const std::vector<OpId> a2as = s.add_collective(a2a, 1, deps).ops;
  sched::CollectiveSpec grad;
  grad.kind = OpKind::kAllReduce;
  grad.group = all_ranks();
  grad.bytes = 64;
  grad.label = test::label(sched::OpRole::kGradDenseAllReduce);
  grad.priority = -1;
  const std::vector<OpId> micro = s.add_collective(grad, 2).ops;

  Executor executor(MPI_COMM_WORLD, s, {.timeout_s = test::kTimeout, .ranks_per_node = 2});
  executor.set_kernel(late, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  const ExecResult result = executor.run();
  EXPECT_GE(result.ops[micro[me]].start, result.ops[a2as[me]].end);
  EXPECT_GE(result.gate_votes, 1);
  EXPECT_GT(result.gate_held_s, 0.0);
  if (me != 0) {
    EXPECT_GE(result.ops[micro[me]].start, 0.04);
  }
}

TEST(Executor, RunsAStepWithRealBuffers) {
  const int n = world_size(), me = world_rank();
  const StepSchedule step;
  std::map<OpId, OpBuffer> buffers;
  const test::SendBlocks blocks = test::send_blocks(all_ranks(), me);
  buffers[step.a2a[me]] = {to_bytes(blocks.data), {}};
  for (int64_t c : blocks.counts) buffers[step.a2a[me]].counts.push_back(4 * c);
  buffers[step.allreduce[me]] = {to_bytes(std::vector<float>(6, 1.0f * me)), {}};
  buffers[step.send[me]] = {to_bytes({1.0f * me, 2.0f * me}), {}};
  buffers[step.recv[me]] = {std::vector<std::byte>(8), {}};

  Executor executor(MPI_COMM_WORLD, step.s, {.timeout_s = test::kTimeout, .ranks_per_node = 2});
  executor.set_buffers([&](OpId id) { return buffers.count(id) ? &buffers[id] : nullptr; });
  std::atomic<int> expert_runs = 0;
  executor.set_kernel(step.gate[me],
                      [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  executor.set_default_kernel([&](OpId id) { expert_runs += id == step.expert[me]; });
  const ExecResult result = executor.run();

  EXPECT_EQ(to_floats(buffers[step.a2a[me]].data), test::expected_blocks(all_ranks(), me));
  EXPECT_EQ(to_floats(buffers[step.allreduce[me]].data), std::vector<float>(6, n * (n - 1) / 2.0f));
  const int from = (me + n - 1) % n;
  EXPECT_EQ(to_floats(buffers[step.recv[me]].data), (std::vector<float>{1.0f * from, 2.0f * from}));
  EXPECT_EQ(expert_runs, 1);

  const auto& t = result.ops;
  for (OpId id : step.s.ops_of(me)) {
    EXPECT_GE(t[id].start, 0) << step.s.describe(id);
    EXPECT_GE(t[id].end, t[id].start) << step.s.describe(id);
    EXPECT_LE(t[id].end, result.wall_s) << step.s.describe(id);
  }
  EXPECT_GE(t[step.gate[me]].end - t[step.gate[me]].start, 0.004);
  EXPECT_LE(t[step.gate[me]].end, t[step.a2a[me]].start);  // stream order
  EXPECT_LE(t[step.a2a[me]].end, t[step.expert[me]].start);
  EXPECT_LE(t[step.gate[me]].end, t[step.allreduce[me]].start);  // the event

  LinkBytes expected;
  const std::vector<double> pairs = test::pair_bytes(all_ranks());
  for (int dst = 0; dst < n; ++dst) {
    expected.add(me, dst, static_cast<int64_t>(pairs[size_t(me) * n + dst]), 2);
  }
  EXPECT_EQ(result.a2a_bytes, expected);

  const std::vector<OpTime> all = gather_op_times(MPI_COMM_WORLD, result.ops, test::kTimeout);
  if (me == 0) {
    for (OpId id = 0; id < step.s.num_ops(); ++id) EXPECT_GE(all[id].start, 0) << id;
  }
}

// Buffers sized from the schedule, every collective kind, hierarchical A2A, a collective whose
// members sit on different streams, and a broadcast root that is not member 0.
TEST(Executor, AllocatesBuffersFromTheSchedule) {
  const int n = world_size();
  sched::Schedule s(n);
  const auto add = [&](OpKind kind, double bytes, std::vector<int> streams,
                       sched::Algorithm algorithm = sched::Algorithm::kDefault) {
    sched::CollectiveSpec spec;
    spec.kind = kind;
    spec.group = all_ranks();
    spec.bytes = bytes;
    if (kind == OpKind::kAllToAll) spec.pair_bytes = test::pair_bytes(all_ranks());
    if (kind == OpKind::kBroadcast) spec.root = n - 1;
    spec.algorithm = algorithm;
    spec.label = test::label(sched::OpRole::kGradDenseAllReduce);
    return s.add_collective(spec, streams).ops;
  };
  std::vector<int> alternate;
  for (int r = 0; r < n; ++r) alternate.push_back(r % 2);
  add(OpKind::kAllToAll, 0, {0}, sched::Algorithm::k2DH);
  add(OpKind::kAllToAll, 0, {1}, sched::Algorithm::k1DH);
  add(OpKind::kAllGather, 4.0 * n, {0});
  add(OpKind::kReduceScatter, 100, alternate);
  add(OpKind::kAllReduce, 30, {1});
  add(OpKind::kBroadcast, 12, alternate);
  for (int r = 0; r < n; ++r)
    s.add_copy(r, 0, 64, test::label(sched::OpRole::kDispatchEspAllGatherCopy));
  Executor executor(MPI_COMM_WORLD, s, {.timeout_s = test::kTimeout, .ranks_per_node = 2});
  const ExecResult result = executor.run();
  for (OpId id : s.ops_of(world_rank())) EXPECT_GE(result.ops[id].end, 0) << s.describe(id);
  EXPECT_GT(result.a2a_bytes[LinkLevel::kInterNode], 0);
}

TEST(Executor, RejectsASchedulesOfAnotherWorld) {
  sched::Schedule s(world_size() + 1);
  EXPECT_THROW(Executor(MPI_COMM_WORLD, s), Error);
}

TEST(Executor, AKernelFailureStopsTheRun) {
  sched::Schedule s(world_size());
  std::vector<OpId> fails;
  for (int r = 0; r < world_size(); ++r) {
    fails.push_back(s.add_compute(r, 0, 0, 0, test::label(sched::OpRole::kAttention)));
    s.add_compute(r, 1, 0, 0, test::label(sched::OpRole::kGate), {fails.back()});
  }
  Executor executor(MPI_COMM_WORLD, s, {.timeout_s = test::kTimeout});
  executor.set_kernel(fails[world_rank()], [] { throw std::runtime_error("kernel failed"); });
  EXPECT_THROW(executor.run(), std::runtime_error);
}

}  // namespace
}  // namespace moecomm::rt
