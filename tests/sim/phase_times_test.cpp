// The phases `moecomm bench` compares: unions of op intervals per rank, averaged over ranks.
#include "sim/phase_times.h"

#include <gtest/gtest.h>

namespace moecomm::sim {
namespace {

using sched::CollectiveSpec;
using sched::OpKind;

CollectiveSpec spec(OpKind kind, sched::OpRole role, sched::Phase phase) {
  CollectiveSpec s;
  s.kind = kind;
  s.group = {0, 1};
  s.bytes = 8;
  if (kind == OpKind::kAllToAll) s.pair_bytes = {0, 8, 8, 0};
  s.label.role = role;
  s.label.phase = phase;
  return s;
}

sched::Label compute_label() {
  sched::Label l;
  l.role = sched::OpRole::kExpert;
  return l;
}

TEST(PhaseTimes, OpsCountFromWhenTheRankReachedThemLinaMicroOpsFromTheirStart) {
  sched::Schedule s(2);
  const sched::OpId gate0 = s.add_compute(0, 0, 1, 0, compute_label());
  const sched::OpId gate1 = s.add_compute(1, 0, 1, 0, compute_label());
  const auto a2a =
      s.add_collective(spec(OpKind::kAllToAll, sched::OpRole::kDispatchA2A, sched::Phase::kForward),
                       1, {{gate0}, {gate1}});
  const auto gather = s.add_collective(
      spec(OpKind::kAllGather, sched::OpRole::kDispatchEspAllGather, sched::Phase::kForward), 4,
      {{a2a.ops[0]}, {a2a.ops[1]}});
  const auto chunk = s.add_collective(  // a second chunk on stream 1, under the AllGather
      spec(OpKind::kAllToAll, sched::OpRole::kDispatchA2A, sched::Phase::kForward), 1);
  const sched::OpId late1 = s.add_compute(1, 0, 1, 0, compute_label());
  const auto bwd =
      s.add_collective(spec(OpKind::kAllToAll, sched::OpRole::kCombineA2A, sched::Phase::kBackward),
                       1, {{}, {late1}});
  CollectiveSpec micro_op =
      spec(OpKind::kAllReduce, sched::OpRole::kGradDenseAllReduce, sched::Phase::kBackward);
  micro_op.priority =
      -1;  // a Lina micro-op (sched/policy.h): held back by the gate outside the call
  const auto grad = s.add_collective(micro_op, 2);
  const auto bucket = s.add_collective(  // reached when the micro-op ended
      spec(OpKind::kAllReduce, sched::OpRole::kGradExpertAllReduce, sched::Phase::kBackward), 2);
  const auto attn = s.add_collective(
      spec(OpKind::kAllReduce, sched::OpRole::kAttnTpAllReduce, sched::Phase::kForward), 3);
  const auto experts = s.add_collective(  // HybridEP's expert transfers: no token path
      spec(OpKind::kReduceScatter, sched::OpRole::kExpertTransferGradReduceScatter,
           sched::Phase::kBackward),
      5);
  SimResult r;
  r.ops.resize(static_cast<size_t>(s.num_ops()));
  auto at = [&](sched::OpId id, double a, double b) { r.ops[static_cast<size_t>(id)] = {a, b}; };
  auto both = [&](const sched::Schedule::Issued& c, double a, double b) {
    at(c.ops[0], a, b);
    at(c.ops[1], a, b);
  };
  at(gate0, 0, 1);
  at(gate1, 0, 2);
  both(a2a, 2, 4);        // rank 0 waits from 1, rank 1 from 2
  both(gather, 4, 6);     // forward: rank 0 [1, 6], rank 1 [2, 6]
  both(chunk, 4.5, 5.5);  // inside the AllGather: counted once
  at(late1, 6.5, 7.5);
  both(bwd, 8, 9);  // rank 0 reached it at 5.5 (its chunk), rank 1 at 7.5
  at(grad.ops[0], 7, 10);
  at(grad.ops[1], 8, 9);
  both(bucket, 11, 12);   // rank 0 waits from 10, rank 1 from 9
  both(attn, 0, 100);     // neither phase
  both(experts, 20, 90);  // neither phase
  r.makespan_s = 100;
  const PhaseTimes p = phase_times(s, r);
  EXPECT_DOUBLE_EQ(p.token_fwd_s, (5.0 + 4.0) / 2);
  EXPECT_DOUBLE_EQ(p.token_bwd_s, (3.5 + 1.5) / 2);
  EXPECT_DOUBLE_EQ(p.grad_sync_s, (5.0 + 4.0) / 2);
  EXPECT_DOUBLE_EQ(p.iteration_s, 100);
}

}  // namespace
}  // namespace moecomm::sim
