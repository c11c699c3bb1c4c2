// Exact-answer tests of the simulator, ASTRA-sim style: each case has
// a closed-form time.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::sim {
namespace {

using sched::CollectiveSpec;
using sched::Label;
using sched::OpKind;
using sched::Schedule;

// The role only names the op in messages here: the simulator prices ops by kind.
Label named(sched::OpRole role) {
  Label label;
  label.role = role;
  return label;
}

constexpr double kNodeBw = 10e9, kNodeLat = 5e-6, kGpuBw = 100e9, kGpuLat = 1e-6;

core::Topology cluster(int nodes, int gpus, Fairness fairness = Fairness::kPerCollective) {
  core::Cluster c;
  c.name = "test";
  c.fairness = fairness;
  c.levels = {{"node", nodes, kNodeBw, kNodeLat}, {"gpu", gpus, kGpuBw, kGpuLat}};
  c.device.flops = 100e12;
  c.device.memory_bandwidth = 1e12;
  return core::Topology(c);
}

CollectiveSpec uniform_a2a(const std::vector<int>& group, double pair) {
  CollectiveSpec spec;
  spec.kind = OpKind::kAllToAll;
  spec.group = group;
  const size_t n = group.size();
  spec.pair_bytes.assign(n * n, pair);
  for (size_t i = 0; i < n; ++i) spec.pair_bytes[i * n + i] = 0;
  spec.label = named(sched::OpRole::kDispatchA2A);
  return spec;
}

TEST(Simulator, OneFlowTakesLatencyPlusBytesOverBandwidth) {
  Schedule s(2);
  const auto p =
      s.add_send_recv({0, 0, {}}, {1, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  const SimResult r = simulate(s, cluster(2, 1));
  EXPECT_NEAR(r.ops[p.recv].end, kNodeLat + 1e9 / kNodeBw, 1e-12);
  EXPECT_NEAR(r.makespan_s, kNodeLat + 0.1, 1e-12);
  EXPECT_EQ(r.flows, 1);
  ASSERT_FALSE(r.busiest_links.empty());
  EXPECT_DOUBLE_EQ(r.busiest_links[0].bytes, 1e9);
}

TEST(Simulator, TwoFlowsOnOneLinkEachGetHalf) {
  Schedule s(4);  // ranks 0,1 on node 0; 2,3 on node 1: both flows cross node 0's egress
  const auto a =
      s.add_send_recv({0, 0, {}}, {2, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  const auto b =
      s.add_send_recv({1, 0, {}}, {3, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  const SimResult r = simulate(s, cluster(2, 2));
  EXPECT_NEAR(r.ops[a.recv].end, kNodeLat + 2e9 / kNodeBw, 1e-12);
  EXPECT_NEAR(r.ops[b.recv].end, kNodeLat + 2e9 / kNodeBw, 1e-12);
}

TEST(Simulator, PriorityLetsAHighPriorityFlowFinishAsIfAlone) {
  Schedule s(4);
  const auto low =
      s.add_send_recv({0, 0, {}}, {2, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  const auto high =
      s.add_send_recv({1, 0, {}}, {3, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  s.set_priority(high.send, 1);
  const SimResult r = simulate(s, cluster(2, 2));
  EXPECT_NEAR(r.ops[high.recv].end, kNodeLat + 1e9 / kNodeBw, 1e-12);
  EXPECT_NEAR(r.ops[low.recv].end, kNodeLat + 2e9 / kNodeBw, 1e-12);
}

// 2(n-1)/n x S / B plus one latency per ring step, on one node of n devices.
TEST(Simulator, RingAllReduceMatchesItsFormula) {
  for (int n : {2, 4, 8}) {
    Schedule s(n);
    CollectiveSpec spec;
    spec.kind = OpKind::kAllReduce;
    for (int r = 0; r < n; ++r) spec.group.push_back(r);
    spec.bytes = 1e9;
    spec.label = named(sched::OpRole::kGradDenseAllReduce);
    s.add_collective(spec, 0);
    const SimResult r = simulate(s, cluster(1, n));
    const double want = 2.0 * (n - 1) * kGpuLat + 2.0 * (n - 1) / n * 1e9 / kGpuBw;
    EXPECT_NEAR(r.makespan_s, want, want * 1e-9) << n;
  }
}

TEST(Simulator, RingAllGatherAndReduceScatterMatchTheirFormula) {
  for (OpKind kind : {OpKind::kAllGather, OpKind::kReduceScatter}) {
    Schedule s(4);
    CollectiveSpec spec;
    spec.kind = kind;
    spec.group = {0, 1, 2, 3};
    spec.bytes = 4e8;
    spec.label = named(sched::OpRole::kGradDenseAllReduce);
    s.add_collective(spec, 0);
    const double want = 3 * kGpuLat + 0.75 * 4e8 / kGpuBw;
    EXPECT_NEAR(simulate(s, cluster(1, 4)).makespan_s, want, want * 1e-9);
  }
}

// 2 nodes x 4: each node sends 4 x 4 pair messages over its node link (10 GB/s) while each
// device sends 3 over its NVLink (100 GB/s): the node link bounds the A2A.
TEST(Simulator, FlatAllToAllAcrossTwoNodesIsBoundByTheNodeLink) {
  Schedule s(8);
  s.add_collective(uniform_a2a({0, 1, 2, 3, 4, 5, 6, 7}, 1e7), 0);
  const SimResult r = simulate(s, cluster(2, 4));
  EXPECT_NEAR(r.makespan_s, kNodeLat + 16 * 1e7 / kNodeBw, 1e-12);
  EXPECT_EQ(r.busiest_links[0].name.substr(0, 4), "node");
  // 2 nodes x 16 pair messages cross nodes; 8 devices x 3 stay inside their node.
  ASSERT_EQ(r.bytes_by_level.size(), 2u);
  EXPECT_DOUBLE_EQ(r.bytes_by_level[0], 2 * 16 * 1e7);
  EXPECT_DOUBLE_EQ(r.bytes_by_level[1], 8 * 3 * 1e7);
}

// 2DH: intra-node phase (each device sends 3 messages of 2 pair loads to its peers), then
// each device sends its node's 4 messages for its counterpart: 4 flows share the node link.
TEST(Simulator, HierarchicalAllToAllRunsItsPhases) {
  Schedule s(8);
  auto spec = uniform_a2a({0, 1, 2, 3, 4, 5, 6, 7}, 1e7);
  spec.algorithm = sched::Algorithm::k2DH;
  s.add_collective(spec, 0);
  const SimResult r = simulate(s, cluster(2, 4));
  const double intra = kGpuLat + 3 * 2e7 / kGpuBw;
  const double inter = kNodeLat + 4 * 4e7 / kNodeBw;
  EXPECT_NEAR(r.makespan_s, intra + inter, 1e-12);
}

// Per-collective fairness: an A2A's 16 node-crossing pair flows and one send share node 0's
// link evenly; plain max-min over flows would give the send 1/17 of it.
TEST(Simulator, CollectivesShareALinkEvenlyWhateverTheirFlowCount) {
  for (Fairness fairness : {Fairness::kPerCollective, Fairness::kPerFlow}) {
    Schedule s(8);
    s.add_collective(uniform_a2a({0, 1, 2, 3, 4, 5, 6, 7}, 1e8), 0);
    const auto p = s.add_send_recv({0, 1, {}}, {4, 1, {}}, 1e8, 0,
                                   named(sched::OpRole::kStageSendActivations));
    SimOptions options;
    options.fairness = fairness;
    const SimResult r = simulate(s, cluster(2, 4), options);
    const double share = fairness == Fairness::kPerCollective ? 0.5 : 1.0 / 17;
    // The send runs at its share until the A2A (16 x 1e8 bytes at the rest) ends.
    const double a2a_end = kNodeLat + 16e8 / (kNodeBw * (1 - share));
    const double sent = (a2a_end - kNodeLat) * kNodeBw * share;
    const double want =
        sent >= 1e8 ? kNodeLat + 1e8 / (kNodeBw * share) : a2a_end + (1e8 - sent) / kNodeBw;
    EXPECT_NEAR(r.ops[p.recv].end, want, 1e-9) << int(fairness);
  }
}

// Without an option the cluster's fairness holds; the option overrides it.
TEST(Simulator, TheClustersFairnessHoldsUnlessTheOptionsSayOtherwise) {
  Schedule s(8);
  s.add_collective(uniform_a2a({0, 1, 2, 3, 4, 5, 6, 7}, 1e8), 0);
  const auto p =
      s.add_send_recv({0, 1, {}}, {4, 1, {}}, 1e8, 0, named(sched::OpRole::kStageSendActivations));
  const core::Topology per_flow = cluster(2, 4, Fairness::kPerFlow);
  SimOptions flow, collective;
  flow.fairness = Fairness::kPerFlow;
  collective.fairness = Fairness::kPerCollective;
  EXPECT_EQ(simulate(s, per_flow).ops[p.recv].end,
            simulate(s, cluster(2, 4), flow).ops[p.recv].end);
  EXPECT_EQ(simulate(s, per_flow, collective).ops[p.recv].end,
            simulate(s, cluster(2, 4)).ops[p.recv].end);
  EXPECT_NE(simulate(s, per_flow).ops[p.recv].end, simulate(s, cluster(2, 4)).ops[p.recv].end);
}

TEST(Simulator, ComputeTakesFlopsOverPeakAndStreamsRunInOrder) {
  Schedule s(1);
  const auto a = s.add_compute(0, 0, 1e12, 0, named(sched::OpRole::kAttention));
  const auto b = s.add_compute(0, 0, 2e12, 0, named(sched::OpRole::kAttention));
  // Another stream's compute runs at once, sharing the device with a: both take twice as long.
  const auto c = s.add_compute(0, 1, 1e12, 0, named(sched::OpRole::kAttention));
  const auto d = s.add_copy(0, 1, 1e9, named(sched::OpRole::kDispatchEspAllGatherCopy),
                            {b});  // event: waits for b
  const SimResult r = simulate(s, cluster(1, 1));
  EXPECT_DOUBLE_EQ(r.ops[a].end, 0.02);
  EXPECT_DOUBLE_EQ(r.ops[c].end, 0.02);
  EXPECT_DOUBLE_EQ(r.ops[b].start, 0.02);
  EXPECT_DOUBLE_EQ(r.ops[b].end, 0.04);
  EXPECT_DOUBLE_EQ(r.ops[d].start, 0.04);
  EXPECT_DOUBLE_EQ(r.ops[d].end, 0.041);  // 1 GB at 1 TB/s
  EXPECT_DOUBLE_EQ(r.rank_end_s[0], 0.041);
}

// A device measured per phase (`profile --model` on CPU ranks) prices backward-phase compute
// at its backward rate; forward and unlabelled compute keep `flops`.
TEST(Simulator, BackwardComputeTakesFlopsOverTheBackwardRate) {
  core::Cluster c;
  c.name = "test";
  c.levels = {{"gpu", 1, kGpuBw, kGpuLat}};
  c.device.flops = 100e12;
  c.device.backward_flops = 400e12;
  Label fwd = named(sched::OpRole::kAttention), bwd = named(sched::OpRole::kAttention);
  fwd.phase = sched::Phase::kForward;
  bwd.phase = sched::Phase::kBackward;
  Schedule s(1);
  const auto f = s.add_compute(0, 0, 1e12, 0, fwd);
  const auto b = s.add_compute(0, 0, 2e12, 0, bwd);
  const auto u = s.add_compute(0, 0, 1e12, 0, named(sched::OpRole::kAttention));
  const SimResult r = simulate(s, core::Topology(c));
  EXPECT_DOUBLE_EQ(r.ops[f].end, 0.01);
  EXPECT_DOUBLE_EQ(r.ops[b].end - r.ops[b].start, 0.005);  // 2 TFLOP at 400 TFLOP/s
  EXPECT_DOUBLE_EQ(r.ops[u].end - r.ops[u].start, 0.01);
  c.device.backward_flops = 0;  // not measured: one rate for both phases
  EXPECT_DOUBLE_EQ(simulate(s, core::Topology(c)).rank_end_s[0], 0.04);
}

// With overlapped_compute_share 0.5, compute runs at half rate while a communication op of
// its rank is in flight (ready, not done), and at full rate otherwise.
TEST(Simulator, ComputeSlowsWhileItsRankCommunicates) {
  core::Cluster c;
  c.name = "test";
  c.levels = {{"node", 3, kNodeBw, 0.0}};
  c.device.flops = 100e12;
  c.device.overlapped_compute_share = 0.5;
  Schedule s(3);
  // Ranks 0 and 1: 1 s of compute on stream 0 while a 0.4 s transfer runs on stream 1.
  const auto a = s.add_compute(0, 0, 100e12, 0, named(sched::OpRole::kAttention));
  const auto b = s.add_compute(1, 0, 100e12, 0, named(sched::OpRole::kAttention));
  const auto p = s.add_send_recv({0, 1, {}}, {1, 1, {}}, 0.4 * kNodeBw, 0,
                                 named(sched::OpRole::kStageSendActivations));
  // Rank 2 computes 1 s while its send waits (ready) for rank 1's receive, posted after b.
  const auto waits = s.add_compute(2, 0, 100e12, 0, named(sched::OpRole::kAttention));
  s.add_send_recv({2, 1, {}}, {1, 1, {b}}, 0, 1, named(sched::OpRole::kStageSendActivations));
  const SimResult r = simulate(s, core::Topology(c));
  EXPECT_NEAR(r.ops[p.recv].end, 0.4, 1e-12);
  // 0.4 s at half rate does 0.2 s of work; the other 0.8 s at full rate.
  EXPECT_NEAR(r.ops[a].end, 1.2, 1e-12);
  EXPECT_NEAR(r.ops[b].end, 1.2, 1e-12);
  // Waiting counts as communicating: 0.6 s of work by 1.2, then 0.4 s at full rate.
  EXPECT_NEAR(r.ops[waits].end, 1.6, 1e-12);
  c.device.overlapped_compute_share = 1;  // the default: communication costs compute nothing
  EXPECT_NEAR(simulate(s, core::Topology(c)).ops[a].end, 1.0, 1e-12);
}

// Lina: a gradient AllReduce of priority < 0 waits while an A2A is pending or running on its
// ranks, then gets the link alone.
TEST(Simulator, DeferredAllReduceWaitsForTheAllToAll) {
  Schedule s(4);
  const auto before =
      s.add_compute(0, 0, 1e12, 0, named(sched::OpRole::kAttention));  // A2A pending 10 ms
  auto a2a = uniform_a2a({0, 1, 2, 3}, 1e7);
  s.add_collective(a2a, {0, 0, 0, 0}, {{before}, {}, {}, {}});
  CollectiveSpec ar;
  ar.kind = OpKind::kAllReduce;
  ar.group = {0, 2};
  ar.bytes = 1e8;
  ar.priority = -1;
  ar.label = named(sched::OpRole::kAttention);
  const auto grad = s.add_collective(ar, 2);
  const SimResult r = simulate(s, cluster(2, 2));
  const double a2a_end = 0.01 + kNodeLat + 4 * 1e7 / kNodeBw;
  EXPECT_NEAR(r.ops[grad.ops[0]].start, a2a_end, 1e-12);
  EXPECT_NEAR(r.ops[grad.ops[0]].end, a2a_end + 2 * kNodeLat + 1e8 / kNodeBw, 1e-12);
}

// A deferred AllReduce that an A2A's missing member waits on must not wait for that A2A
// (a deadlock), whichever order the ops were created in.
TEST(Simulator, DeferredCollectiveAnAllToAllWaitsOnStartsAtOnce) {
  for (bool a2a_first : {true, false}) {
    Schedule s(4);
    CollectiveSpec p = uniform_a2a({0, 1}, 1e6);
    CollectiveSpec ar;
    ar.kind = OpKind::kAllReduce;
    ar.group = {0, 1};
    ar.bytes = 1e6;
    ar.priority = -1;
    ar.label = named(sched::OpRole::kAttention);
    sched::CollectiveId pid = s.declare_collective(p);
    sched::OpId p0 = sched::kNone;
    if (a2a_first) p0 = s.join(pid, 0, 1);
    const auto grad = s.add_collective(ar, 2);
    if (!a2a_first) p0 = s.join(pid, 0, 1);
    s.join(pid, 1, 2);  // rank 1 joins the A2A after the AllReduce, on the same stream
    s.add_compute(2, 0, 1e15, 0, named(sched::OpRole::kAttention));  // 10 s elsewhere
    const SimResult r = simulate(s, cluster(2, 2));
    EXPECT_DOUBLE_EQ(r.ops[grad.ops[0]].start, 0.0) << a2a_first;
    EXPECT_LT(r.ops[p0].end, 1.0) << a2a_first;
  }
}

// A zero-byte deferred collective ends the moment it starts; what it unblocks and what gets
// deferred meanwhile still runs.
TEST(Simulator, DeferredCollectivesStartedInARowAllRun) {
  Schedule s(4);
  s.add_collective(uniform_a2a({0, 1}, 1e6), 1);
  for (auto [group, bytes] : {std::pair{core::RankGroup{0, 1}, 0.0}, {{1, 2}, 1e6}}) {
    CollectiveSpec ar;
    ar.kind = OpKind::kAllReduce;
    ar.group = group;
    ar.bytes = bytes;
    ar.priority = -1;
    ar.label = named(sched::OpRole::kAttention);
    s.add_collective(ar, 2);
  }
  const auto slow = s.add_compute(3, 0, 1e14, 0, named(sched::OpRole::kAttention));
  s.add_collective(uniform_a2a({2, 3}, 1e6), {1, 1}, {{}, {slow}});
  EXPECT_NO_THROW(simulate(s, cluster(2, 2)));
}

// Compute by dtype: the schedule's compute dtype picks the device's peak (an A100's sheet),
// times the device's compute efficiency unless the options override it.
TEST(Simulator, ComputeRunsAtItsDtypesPeakTimesTheEfficiency) {
  core::Cluster c;
  c.name = "a100";
  c.levels = {{"gpu", 1, kGpuBw, kGpuLat}};
  c.device.flops = 312e12;
  c.device.flops_by_dtype = {{core::Dtype::kFp32, 19.5e12}, {core::Dtype::kTf32, 156e12}};
  c.device.compute_efficiency = 0.5;
  const core::Topology topo(c);
  const auto time_of = [&](core::Dtype dtype, SimOptions options = {}) {
    Schedule s(1);
    s.set_compute_dtype(dtype);
    s.add_compute(0, 0, 39e12, 0, named(sched::OpRole::kAttention));
    return simulate(s, topo, options).makespan_s;
  };
  EXPECT_DOUBLE_EQ(time_of(core::Dtype::kFp32), 39e12 / (19.5e12 * 0.5));  // 4 s
  EXPECT_DOUBLE_EQ(time_of(core::Dtype::kTf32), 39e12 / (156e12 * 0.5));
  EXPECT_DOUBLE_EQ(time_of(core::Dtype::kBf16), 39e12 / (312e12 * 0.5));  // not listed: tflops
  SimOptions full;
  full.compute_efficiency = 1.0;
  EXPECT_DOUBLE_EQ(time_of(core::Dtype::kFp32, full), 2.0);
  c.device.compute_efficiency = 0;  // a device the parser would refuse
  EXPECT_ERROR_HAS(simulate(Schedule(1), core::Topology(c)), "efficiency");
}

TEST(Simulator, RejectsAScheduleForAnotherCluster) {
  Schedule s(3);
  EXPECT_ERROR_HAS(simulate(s, cluster(2, 2)), "3 ranks", "has 4");
  SimOptions bad;
  bad.compute_efficiency = 0;
  EXPECT_ERROR_HAS(simulate(Schedule(4), cluster(2, 2), bad), "efficiency");
}

}  // namespace
}  // namespace moecomm::sim
