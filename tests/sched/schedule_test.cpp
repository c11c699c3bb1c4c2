#include "sched/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/expect_error.h"

namespace moecomm::sched {
namespace {

Label fwd(OpRole role, int chunk = -1) {
  return Label{role, 0, Phase::kForward, chunk, "baseline"};
}

CollectiveSpec a2a(const core::RankGroup& group, double per_pair, OpRole role) {
  const size_t n = group.size();
  CollectiveSpec s;
  s.kind = OpKind::kAllToAll;
  s.group = group;
  s.pair_bytes.assign(n * n, per_pair);
  s.label = fwd(role);
  return s;
}

CollectiveSpec allreduce(const core::RankGroup& group, double bytes, OpRole role) {
  CollectiveSpec s;
  s.kind = OpKind::kAllReduce;
  s.group = group;
  s.bytes = bytes;
  s.label = Label{role, 0, Phase::kBackward, -1, "bucketed"};
  return s;
}

// One MoE layer's forward on 4 ranks (EP = 4), built by hand: gate compute -> dispatch A2A
// -> expert compute -> combine A2A, computes on stream 0 and A2As on stream 1 joined by
// events, and a gradient AllReduce over the DP pairs {0, 2}, {1, 3} on stream 2.
struct Layer {
  Schedule s{4};
  std::vector<OpId> gate, expert;
  Schedule::Issued dispatch, combine;
  std::vector<Schedule::Issued> grads;

  Layer() {
    for (int r = 0; r < 4; ++r) gate.push_back(s.add_compute(r, 0, 1e9, 1e6, fwd(OpRole::kGate)));
    dispatch = s.add_collective(a2a({0, 1, 2, 3}, 100, OpRole::kDispatchA2A), 1,
                                {{gate[0]}, {gate[1]}, {gate[2]}, {gate[3]}});
    for (int r = 0; r < 4; ++r)
      expert.push_back(s.add_compute(r, 0, 4e9, 2e6, fwd(OpRole::kExpert), {dispatch.ops[r]}));
    combine = s.add_collective(a2a({0, 1, 2, 3}, 50, OpRole::kCombineA2A), 1,
                               {{expert[0]}, {expert[1]}, {expert[2]}, {expert[3]}});
    for (const core::RankGroup& g : {core::RankGroup{0, 2}, core::RankGroup{1, 3}})
      grads.push_back(s.add_collective(allreduce(g, 8e6, OpRole::kGradDenseAllReduce), 2));
  }
};

TEST(Schedule, OneLayerForwardAccessors) {
  Layer l;
  const Schedule& s = l.s;
  s.validate();
  EXPECT_EQ(s.num_ops(), 4 * 4 + 4);
  EXPECT_EQ(s.num_collectives(), 4);
  EXPECT_EQ(s.num_streams(0), 3);
  EXPECT_EQ(s.ops_of(2), (std::vector<OpId>{l.gate[2], l.dispatch.ops[2], l.expert[2],
                                            l.combine.ops[2], l.grads[0].ops[1]}));
  EXPECT_EQ(s.stream_ops(1, 0), (std::vector<OpId>{l.gate[1], l.expert[1]}));
  EXPECT_EQ(s.stream_ops(1, 1), (std::vector<OpId>{l.dispatch.ops[1], l.combine.ops[1]}));
  EXPECT_TRUE(s.stream_ops(1, 7).empty());
  EXPECT_EQ(s.op(l.combine.ops[3]).prev, l.dispatch.ops[3]);
  EXPECT_EQ(s.op(l.gate[3]).prev, kNone);
  EXPECT_EQ(s.deps(l.expert[3]), (std::vector<OpId>{l.dispatch.ops[3]}));

  const Op& d = s.op(l.dispatch.ops[2]);
  EXPECT_EQ(d.kind, OpKind::kAllToAll);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.stream, 1);
  EXPECT_EQ(d.member, 2);
  EXPECT_EQ(d.collective, l.dispatch.id);
  EXPECT_DOUBLE_EQ(d.bytes, 300);  // row without the diagonal
  const Collective& c = s.collective(l.dispatch.id);
  EXPECT_EQ(c.algorithm, Algorithm::kFlat);  // default resolved
  EXPECT_EQ(c.ops, l.dispatch.ops);
  EXPECT_DOUBLE_EQ(c.pair(1, 3), 100);
  EXPECT_EQ(s.collective(l.grads[1].id).group, (core::RankGroup{1, 3}));
  EXPECT_EQ(s.collective(l.grads[1].id).algorithm, Algorithm::kRing);

  EXPECT_EQ(s.label(l.dispatch.ops[0]).role, OpRole::kDispatchA2A);
  EXPECT_EQ(s.labels().size(), 5u);  // interned: one per builder step, not per op
  EXPECT_EQ(to_string(s.label(l.grads[0].ops[0])),
            "grad.dense.allreduce [layer 0, backward, knob bucketed]");
  EXPECT_EQ(s.describe(l.expert[1]), "op 9 (rank 1, stream 0, \"moe.expert\")");
}

TEST(Schedule, Totals) {
  Layer l;
  const Totals t = l.s.totals();
  const KindTotal& compute = t[size_t(OpKind::kCompute)];
  EXPECT_EQ(compute.ops, 8);
  EXPECT_DOUBLE_EQ(compute.flops, 4 * (1e9 + 4e9));
  EXPECT_DOUBLE_EQ(compute.bytes, 4 * (1e6 + 2e6));
  const KindTotal& all_to_all = t[size_t(OpKind::kAllToAll)];
  EXPECT_EQ(all_to_all.ops, 8);
  EXPECT_DOUBLE_EQ(all_to_all.bytes, 4 * 3 * (100 + 50));
  EXPECT_EQ(t[size_t(OpKind::kAllReduce)].ops, 4);
  EXPECT_DOUBLE_EQ(t[size_t(OpKind::kAllReduce)].bytes, 4 * 8e6);
  EXPECT_EQ(t[size_t(OpKind::kSend)].ops, 0);
}

TEST(Schedule, PrioritiesCopiesAndSendRecv) {
  Schedule s(2);
  CollectiveSpec spec = allreduce({0, 1}, 10, OpRole::kGradDenseAllReduce);
  spec.priority = -1;  // Lina: gradients yield to A2A
  const auto ar = s.add_collective(spec, {2, 3});
  EXPECT_EQ(s.op(ar.ops[0]).priority, -1);
  EXPECT_EQ(s.op(ar.ops[1]).stream, 3);
  s.set_priority(ar.ops[1], 5);
  EXPECT_EQ(s.op(ar.ops[1]).priority, 5);

  const OpId copy = s.add_copy(0, 1, 64, fwd(OpRole::kDispatchEspAllGatherCopy));
  const auto p = s.add_send_recv({0, 0, {copy}}, {1, 0}, 64, 7, fwd(OpRole::kStageSendActivations));
  EXPECT_EQ(s.op(p.send).twin, p.recv);
  EXPECT_EQ(s.op(p.recv).peer, 0);
  EXPECT_EQ(s.op(p.recv).tag, 7);
  EXPECT_EQ(s.deps(p.send), (std::vector<OpId>{copy}));
  // Per-rank halves pair up in the order added (MPI non-overtaking).
  const OpId r1 = s.add_recv(1, 1, 0, 8, 3, fwd(OpRole::kStageSendActivations));
  const OpId r2 = s.add_recv(1, 1, 0, 9, 3, fwd(OpRole::kStageSendActivations));
  const OpId s1 = s.add_send(0, 1, 1, 8, 3, fwd(OpRole::kStageSendActivations));
  const OpId s2 = s.add_send(0, 1, 1, 9, 3, fwd(OpRole::kStageSendActivations));
  EXPECT_EQ(s.op(s1).twin, r1);
  EXPECT_EQ(s.op(s2).twin, r2);
  s.validate();
  EXPECT_EQ(s.totals()[size_t(OpKind::kCopy)].bytes, 64);
}

TEST(ScheduleErrors, Cycles) {
  Schedule s(1);
  const OpId a = s.add_compute(0, 0, 1, 1, fwd(OpRole::kAttention));
  const OpId b = s.add_compute(0, 1, 1, 1, fwd(OpRole::kGate), {a});
  s.validate();
  s.depends(a, b);  // across streams: a -> b -> a
  EXPECT_ERROR_HAS(s.validate(), "dependency cycle", "\"attn\"", "\"gate\"");

  Schedule self(1);
  const OpId x = self.add_compute(0, 0, 1, 1, fwd(OpRole::kAttention));
  self.depends(x, x);
  EXPECT_ERROR_HAS(self.validate(), "op 0 (rank 0, stream 0, \"attn\")", "dependency cycle");
}

// The classic deadlock: rank 0 issues C1 then C2, rank 1 issues C2 then C1.
TEST(ScheduleErrors, CollectivesInOppositeOrdersDeadlock) {
  Schedule s(2);
  const CollectiveId c1 = s.declare_collective(allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce));
  const CollectiveId c2 = s.declare_collective(allreduce({0, 1}, 1, OpRole::kGradExpertAllReduce));
  s.join(c1, 0, 0);
  s.join(c2, 0, 0);
  s.join(c2, 1, 0);
  s.join(c1, 1, 0);
  EXPECT_ERROR_HAS(s.validate(), "deadlock", "rank 0", "rank 1", "\"grad.dense.allreduce\"",
                   "\"grad.expert.allreduce\"", " ~ ");

  Schedule ok(2);  // same order on both ranks: fine
  const CollectiveId d1 = ok.declare_collective(allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce));
  const CollectiveId d2 = ok.declare_collective(allreduce({0, 1}, 1, OpRole::kGradExpertAllReduce));
  for (int r : {1, 0}) {
    ok.join(d1, r, 0);
    ok.join(d2, r, 0);
  }
  ok.validate();
}

TEST(ScheduleErrors, SendRecvDeadlockAcrossStreamsAndEvents) {
  Schedule s(2);
  // Each rank receives before it sends; the event chain makes it a cycle.
  const OpId r0 = s.add_recv(0, 0, 1, 8, 0, fwd(OpRole::kStageRecvActivations));
  const OpId r1 = s.add_recv(1, 0, 0, 8, 0, fwd(OpRole::kStageRecvGrads));
  s.add_send(0, 1, 1, 8, 0, fwd(OpRole::kStageSendActivations), {r0});
  s.add_send(1, 1, 0, 8, 0, fwd(OpRole::kStageSendGrads), {r1});
  EXPECT_ERROR_HAS(s.validate(), "dependency cycle", "\"pp.recv.activations\"",
                   "\"pp.send.grads\"");
}

TEST(ScheduleErrors, UnmatchedSendRecv) {
  Schedule s(2);
  s.add_send(0, 0, 1, 8, 4, fwd(OpRole::kStageSendActivations));
  EXPECT_ERROR_HAS(s.validate(), "op 0 (rank 0, stream 0, \"pp.send.activations\")",
                   "send to rank 1 (tag 4) has no matching recv");
  Schedule t(2);
  t.add_recv(1, 0, 0, 8, 4, fwd(OpRole::kStageSendActivations));
  t.add_send(0, 0, 1, 8, 5, fwd(OpRole::kStageSendGrads));
  EXPECT_ERROR_HAS(t.validate(), "recv from rank 0 (tag 4) has no matching send");
  Schedule u(2);
  u.add_send(0, 0, 1, 8, 0, fwd(OpRole::kAttention));
  u.add_recv(1, 0, 0, 9, 0, fwd(OpRole::kGate));
  EXPECT_ERROR_HAS(u.validate(), "has 8 bytes", "has 9");
  Schedule v(2);
  v.add_send(0, 0, 0, 8, 0, fwd(OpRole::kStageSendActivations));
  v.add_recv(0, 0, 0, 8, 0, fwd(OpRole::kStageSendActivations));
  EXPECT_ERROR_HAS(v.validate(), "itself");
}

TEST(ScheduleErrors, InconsistentCollectives) {
  Schedule missing(3);
  const CollectiveId c =
      missing.declare_collective(allreduce({0, 1, 2}, 1, OpRole::kGradDenseAllReduce));
  missing.join(c, 0, 0);
  missing.join(c, 1, 0);
  EXPECT_ERROR_HAS(missing.validate(),
                   "collective 0 (all_reduce over 3 ranks, \"grad.dense.allreduce\")",
                   "group rank 2 has no op");

  Schedule twice(2);
  const CollectiveId d =
      twice.declare_collective(allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce));
  twice.join(d, 0, 0);
  twice.join(d, 1, 0);
  twice.join(d, 1, 1);
  EXPECT_ERROR_HAS(twice.validate(), "op 2 (rank 1, stream 1", "twice", "first as op 1");

  Schedule stranger(3);
  const CollectiveId e =
      stranger.declare_collective(allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce));
  stranger.join(e, 0, 0);
  stranger.join(e, 1, 0);
  stranger.join(e, 2, 0);
  EXPECT_ERROR_HAS(stranger.validate(), "op 2 (rank 2", "not in the group of collective 0");

  Schedule dup(2);
  dup.add_collective(allreduce({0, 1, 1}, 1, OpRole::kGradDenseAllReduce), 0);
  EXPECT_ERROR_HAS(dup.validate(), "rank 1 appears twice");

  Schedule algo(2);
  CollectiveSpec spec = allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce);
  spec.algorithm = Algorithm::k2DH;
  algo.add_collective(spec, 0);
  EXPECT_ERROR_HAS(algo.validate(), "algorithm 2dh does not apply to all_reduce");

  Schedule root(3);
  spec = allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce);
  spec.kind = OpKind::kBroadcast;
  spec.root = 2;
  root.add_collective(spec, 0);
  EXPECT_ERROR_HAS(root.validate(), "root 2 is not in the group");

  Schedule empty(2);
  empty.declare_collective(allreduce({}, 1, OpRole::kGradDenseAllReduce));
  EXPECT_ERROR_HAS(empty.validate(), "group is empty");

  Schedule kind(2);
  spec = allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce);
  spec.kind = OpKind::kCopy;
  EXPECT_ERROR_HAS(kind.add_collective(spec, 0), "copy is not a collective");
  spec.kind = OpKind::kAllReduce;
  EXPECT_ERROR_HAS(kind.add_collective(spec, {0, 1, 2}), "1 stream or one per member");
  EXPECT_ERROR_HAS(kind.add_collective(spec, 0, {{}}), "a list per member");
  EXPECT_ERROR_HAS(kind.join(9, 0, 0), "collective 9 does not exist");
}

TEST(ScheduleErrors, RanksOutsideTheWorld) {
  Schedule s(4);
  EXPECT_ERROR_HAS(s.add_compute(4, 0, 1, 1, fwd(OpRole::kGate)), "op 0 (rank 4, \"gate\")",
                   "rank 4 is outside [0, 4)");
  EXPECT_ERROR_HAS(s.add_copy(-1, 0, 1, fwd(OpRole::kDispatchEspAllGatherCopy)),
                   "rank -1 is outside [0, 4)");
  EXPECT_ERROR_HAS(s.add_collective(allreduce({0, 7}, 1, OpRole::kGradDenseAllReduce), 0),
                   "rank 7 is outside [0, 4)");
  Schedule t(4);
  t.declare_collective(allreduce({0, 7}, 1, OpRole::kGradDenseAllReduce));
  EXPECT_ERROR_HAS(t.validate(), "group rank 7 is outside [0, 4)");
  Schedule u(4);
  u.add_send(0, 0, 9, 1, 0, fwd(OpRole::kStageSendActivations));
  EXPECT_ERROR_HAS(u.validate(), "peer rank 9 is outside [0, 4)");
  EXPECT_ERROR_HAS(Schedule(0), "world size must be positive");
  EXPECT_ERROR_HAS(u.add_compute(0, -1, 1, 1, fwd(OpRole::kAttention)), "stream -1 is outside");
}

TEST(Schedule, StreamsAreNamedWhereNamed) {
  Schedule s(2);
  s.name_stream(1, "token comm");
  EXPECT_EQ(s.stream_name(1), "token comm");
  EXPECT_EQ(s.stream_name(0), "stream 0");  // unnamed, below a named one
  EXPECT_EQ(s.stream_name(5), "stream 5");  // unnamed, past the named ones
  s.name_stream(1, "tokens");
  EXPECT_EQ(s.stream_name(1), "tokens");
  EXPECT_ERROR_HAS(s.name_stream(64, "x"), "stream 64 is outside [0, 64)");
  EXPECT_ERROR_HAS(s.name_stream(-1, "x"), "stream -1 is outside");
  EXPECT_ERROR_HAS(s.name_stream(2, ""), "stream 2 needs a non-empty name");
}

// A collective keeps the codec its builder gave it; SR's ratio must be in (0, 1].
TEST(ScheduleErrors, CodecCompression) {
  Schedule s(2);
  CollectiveSpec spec = allreduce({0, 1}, 8, OpRole::kExpertTransferAllGather);
  spec.kind = OpKind::kAllGather;
  spec.codec = {core::Dtype::kFp32, 0.25, true, false};
  const CollectiveId id = s.add_collective(spec, 0).id;
  s.validate();
  EXPECT_EQ(s.collective(id).codec, spec.codec);
  for (double bad : {0.0, 1.5, std::nan("")}) {
    Schedule t(2);
    spec.codec.compression = bad;
    t.add_collective(spec, 0);
    EXPECT_ERROR_HAS(t.validate(), "\"moe.hybrid.expert_allgather\"",
                     "codec compression = ", "must be in (0, 1]");
  }
}

TEST(ScheduleErrors, PairMatricesAndSizes) {
  Schedule s(2);
  CollectiveSpec spec = a2a({0, 1}, 1, OpRole::kDispatchA2A);
  spec.pair_bytes.pop_back();
  s.add_collective(spec, 0);
  EXPECT_ERROR_HAS(s.validate(), "op 0 (rank 0, stream 0, \"moe.dispatch.a2a\")",
                   "pair matrix has 3 entries, a group of 2 needs 4");
  Schedule t(2);
  spec = a2a({0, 1}, 1, OpRole::kDispatchA2A);
  spec.pair_bytes[1] = -5;
  t.add_collective(spec, 0);
  EXPECT_ERROR_HAS(t.validate(), "pair bytes [0][1] = -5");
  Schedule u(2);
  spec = allreduce({0, 1}, 1, OpRole::kGradDenseAllReduce);
  spec.pair_bytes = {1, 1, 1, 1};
  u.add_collective(spec, 0);
  EXPECT_ERROR_HAS(u.validate(), "pair matrix belongs to all_to_all only");
  Schedule v(2);
  v.add_collective(allreduce({0, 1}, -3, OpRole::kGradDenseAllReduce), 0);
  EXPECT_ERROR_HAS(v.validate(), "bytes = -3");
  Schedule w(1);
  w.add_compute(0, 0, -1, 1, fwd(OpRole::kGate));
  EXPECT_ERROR_HAS(w.validate(), "op 0 (rank 0, stream 0, \"gate\")", "flops = -1");
  Schedule x(1);
  x.add_copy(0, 0, -2, fwd(OpRole::kDispatchEspAllGatherCopy));
  EXPECT_ERROR_HAS(x.validate(), "bytes = -2");
}

TEST(ScheduleErrors, DependencyErrors) {
  Schedule s(2);
  const OpId a = s.add_compute(0, 0, 1, 1, fwd(OpRole::kAttention));
  EXPECT_ERROR_HAS(s.add_compute(1, 0, 1, 1, fwd(OpRole::kGate), {5}),
                   "dependency op 5 does not exist");
  EXPECT_ERROR_HAS(s.depends(a, -1), "dependency op -1 does not exist");
  s.add_compute(1, 0, 1, 1, fwd(OpRole::kGate), {a});
  EXPECT_ERROR_HAS(s.validate(), "(rank 1, stream 0, \"gate\")", "depends on op 0", "another rank");
}

// Thousands of ranks x tens of ops: 8192 ranks, 5 layers of gate -> A2A -> expert -> A2A over
// EP groups of 8, plus one world-wide AllReduce per rank. Runs; speed is for benchmarks.
TEST(Schedule, ScalesToThousandsOfRanks) {
  const int world = 8192, ep = 8, layers = 5;
  Schedule s(world);
  std::vector<OpId> last(world, kNone);
  auto after = [&](int r) { return last[r] == kNone ? std::vector<OpId>{} : std::vector{last[r]}; };
  for (int layer = 0; layer < layers; ++layer) {
    for (int r = 0; r < world; ++r)
      last[r] = s.add_compute(r, 0, 1e9, 1e6, fwd(OpRole::kGate), after(r));
    for (OpRole role : {OpRole::kDispatchA2A, OpRole::kCombineA2A}) {
      for (int g = 0; g < world / ep; ++g) {
        core::RankGroup group(ep);
        std::vector<std::vector<OpId>> deps(ep);
        for (int i = 0; i < ep; ++i) deps[i] = after(group[i] = g * ep + i);
        const auto issued = s.add_collective(a2a(group, 1e3, role), 1, deps);
        for (int i = 0; i < ep; ++i) last[group[i]] = issued.ops[i];
      }
      if (role == OpRole::kDispatchA2A)
        for (int r = 0; r < world; ++r)
          last[r] = s.add_compute(r, 0, 1e9, 1e6, fwd(OpRole::kExpert), after(r));
    }
  }
  core::RankGroup everyone(world);
  for (int r = 0; r < world; ++r) everyone[r] = r;
  s.add_collective(allreduce(everyone, 1e8, OpRole::kGradDenseAllReduce), 2);
  s.validate();
  EXPECT_EQ(s.num_ops(), world * (layers * 4 + 1));
  EXPECT_EQ(s.totals()[size_t(OpKind::kAllToAll)].ops, world * layers * 2);
  EXPECT_EQ(s.labels().size(), 5u);
}

}  // namespace
}  // namespace moecomm::sched
