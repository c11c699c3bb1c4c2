// The phases `moecomm bench` compares: unions of op intervals per rank, averaged over ranks.
#include "sim/phase_times.h"

#include <gtest/gtest.h>

namespace moecomm::sim {
namespace {

using sched::CollectiveSpec;
using sched::OpKind;

CollectiveSpec spec(OpKind kind, const char* name, sched::Phase phase) {
  CollectiveSpec s;
  s.kind = kind;
  s.group = {0, 1};
  s.bytes = 8;
  if (kind == OpKind::kAllToAll) s.pair_bytes = {0, 8, 8, 0};
  s.label.name = name;
  s.label.phase = phase;
  return s;
}

TEST(PhaseTimes, UnionsOfEachPhasesIntervalsPerRankAveragedOverRanks) {
  sched::Schedule s(2);
  const auto fwd_a =
      s.add_collective(spec(OpKind::kAllToAll, "moe.dispatch.a2a", sched::Phase::kForward), 1);
  const auto fwd_b = s.add_collective(
      spec(OpKind::kAllGather, "moe.dispatch.esp_allgather", sched::Phase::kForward), 4);
  const auto bwd =
      s.add_collective(spec(OpKind::kAllToAll, "moe.combine.a2a", sched::Phase::kBackward), 1);
  const auto grad = s.add_collective(
      spec(OpKind::kAllReduce, "grad.dense.allreduce", sched::Phase::kBackward), 2);
  const auto attn =
      s.add_collective(spec(OpKind::kAllReduce, "attn.tp.allreduce", sched::Phase::kForward), 1);
  sched::Label expert;
  expert.name = "moe.expert";
  const sched::OpId compute = s.add_compute(0, 0, 1e6, 0, expert);
  SimResult r;
  r.ops.resize(static_cast<size_t>(s.num_ops()));
  auto at = [&](sched::OpId id, double a, double b) { r.ops[static_cast<size_t>(id)] = {a, b}; };
  // Rank 0: forward chunks overlap ([1, 3] and [2, 5] -> 4 s); rank 1: disjoint (1 + 1).
  at(fwd_a.ops[0], 1, 3);
  at(fwd_b.ops[0], 2, 5);
  at(fwd_a.ops[1], 0, 1);
  at(fwd_b.ops[1], 4, 5);
  at(bwd.ops[0], 6, 7);
  at(bwd.ops[1], 6, 9);
  at(grad.ops[0], 7, 10);
  at(grad.ops[1], 8, 9);
  at(attn.ops[0], 0, 100);  // neither phase
  at(attn.ops[1], 0, 100);
  at(compute, 0, 50);
  r.makespan_s = 100;
  const PhaseTimes p = phase_times(s, r);
  EXPECT_DOUBLE_EQ(p.token_fwd_s, (4.0 + 2.0) / 2);
  EXPECT_DOUBLE_EQ(p.token_bwd_s, (1.0 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(p.grad_sync_s, (3.0 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(p.iteration_s, 100);
}

}  // namespace
}  // namespace moecomm::sim
