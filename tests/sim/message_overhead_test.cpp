// LogGP's per-message overhead o in the simulator: exact times, and the two regimes of the
// hierarchical A2A (it wins with many ranks and small per-peer messages, as Tutel measured at
// 2,048 GPUs, and loses at 2 nodes x 4 ranks, as our testbed measured).
#include <gtest/gtest.h>

#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

using sched::CollectiveSpec;
using sched::OpKind;
using sched::Schedule;

core::Topology cluster(int nodes, int gpus, double node_overhead, double gpu_overhead) {
  core::Cluster c;
  c.name = "test";
  c.levels = {{"node", nodes, 25e9, 5e-6, node_overhead}, {"gpu", gpus, 200e9, 1e-6, gpu_overhead}};
  c.device.flops = 100e12;
  c.device.memory_bandwidth = 1e12;
  return core::Topology(c);
}

// The role only names the op in messages here: the simulator prices ops by kind.
sched::Label named(sched::OpRole role) {
  sched::Label label;
  label.role = role;
  return label;
}

// One A2A over all ranks, every pair `pair` bytes, decomposed by `algorithm`.
double a2a_seconds(const core::Topology& topology, double pair, sched::Algorithm algorithm) {
  const int n = topology.world_size();
  Schedule s(n);
  CollectiveSpec spec;
  spec.kind = OpKind::kAllToAll;
  for (int r = 0; r < n; ++r) spec.group.push_back(r);
  spec.pair_bytes.assign(size_t(n) * n, pair);
  for (int i = 0; i < n; ++i) spec.pair_bytes[size_t(i) * n + i] = 0;
  spec.algorithm = algorithm;
  spec.label = named(sched::OpRole::kDispatchA2A);
  s.add_collective(spec, 0);
  return simulate(s, topology).makespan_s;
}

TEST(MessageOverhead, OneMessagePaysLatencyPlusTwoOverheads) {
  Schedule s(2);
  const auto p =
      s.add_send_recv({0, 0, {}}, {1, 0, {}}, 1e9, 0, named(sched::OpRole::kStageSendActivations));
  const SimResult r = simulate(s, cluster(2, 1, 3e-6, 0));
  EXPECT_NEAR(r.ops[p.recv].end, 5e-6 + 2 * 3e-6 + 1e9 / 25e9, 1e-12);  // LogP: L + 2o + G k
}

TEST(MessageOverhead, RingStepsAndFlatAllToAllPayTheirMessages) {
  const core::Topology t = cluster(4, 1, 2e-6, 0);  // 4 nodes, one rank each
  Schedule s(4);
  CollectiveSpec ar;
  ar.kind = OpKind::kAllReduce;
  ar.group = {0, 1, 2, 3};
  ar.bytes = 4e8;
  ar.label = named(sched::OpRole::kGradDenseAllReduce);
  s.add_collective(ar, 0);
  // 2(n-1) ring steps, each latency + 2o; 2(n-1)/n of the buffer over the link.
  EXPECT_NEAR(simulate(s, t).makespan_s, 6 * (5e-6 + 4e-6) + 1.5 * 4e8 / 25e9, 1e-12);
  // Flat A2A: one latency, 3 messages sent and 3 received, 3 x 1e6 bytes out of each node.
  EXPECT_NEAR(a2a_seconds(t, 1e6, sched::Algorithm::kFlat), 5e-6 + 6 * 2e-6 + 3e6 / 25e9, 1e-12);
}

TEST(MessageOverhead, NoOverheadCostsWhatItCostBefore) {
  const core::Topology t = cluster(4, 1, 0, 0);
  EXPECT_NEAR(a2a_seconds(t, 1e6, sched::Algorithm::kFlat), 5e-6 + 3e6 / 25e9, 1e-12);
}

// Tutel's regime: 128 nodes x 8 GPUs, 4 KB per peer. A flat A2A sends 1,023 messages from
// every rank; 2DH sends 7 inside the node and 127 across, each carrying 8 peers' bytes.
TEST(MessageOverhead, HierarchicalAllToAllWinsWithManyRanksAndSmallMessages) {
  const core::Topology t = cluster(128, 8, 2e-6, 0.5e-6);
  const double flat = a2a_seconds(t, 4096, sched::Algorithm::kFlat);
  const double two_dh = a2a_seconds(t, 4096, sched::Algorithm::k2DH);
  EXPECT_GE(flat, 2 * (127 * 8 * 2e-6 + 7 * 0.5e-6));  // its overheads alone
  EXPECT_LT(two_dh, flat / 2);
  // Without the overheads, the same A2A is bandwidth-bound and the extra phase loses.
  const core::Topology free = cluster(128, 8, 0, 0);
  EXPECT_GT(a2a_seconds(free, 4096, sched::Algorithm::k2DH),
            a2a_seconds(free, 4096, sched::Algorithm::kFlat));
}

// Our testbed's regime: 2 nodes x 4 ranks, 1 MB per peer: the 2DH's extra intra-node phase
// costs more than the 4 messages it saves.
TEST(MessageOverhead, FlatAllToAllWinsWithFewRanksAndLargeMessages) {
  const core::Topology t = cluster(2, 4, 2e-6, 0.5e-6);
  EXPECT_LT(a2a_seconds(t, 1e6, sched::Algorithm::kFlat),
            a2a_seconds(t, 1e6, sched::Algorithm::k2DH));
}

}  // namespace
}  // namespace moecomm::sim
