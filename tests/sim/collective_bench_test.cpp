// One collective alone on a cluster, reported as nccl-tests reports it (doc/PERFORMANCE.md):
// exact bus bandwidths on line-rate clusters.
#include "sim/collective_bench.h"

#include <gtest/gtest.h>

#include <vector>

#include "support/expect_error.h"

namespace moecomm::sim {
namespace {

using sched::OpKind;

// 2 nodes of 8 GPUs; the node level's bandwidth is the whole node's (4 x 200 Gb/s NICs).
core::Topology a100_2x8(double node_latency = 0, double gpu_latency = 0) {
  core::Cluster c;
  c.name = "a100-2x8";
  c.levels = {{"node", 2, 100e9, node_latency}, {"gpu", 8, 300e9, gpu_latency}};
  c.device.flops = 312e12;
  c.device.memory_bandwidth = 1.6e12;
  return core::Topology(c);
}

std::vector<int> ranks(int lo, int hi) {
  std::vector<int> r;
  for (int i = lo; i < hi; ++i) r.push_back(i);
  return r;
}

SimOptions exact() {
  SimOptions o;
  o.completion_tolerance = 0;
  return o;
}

TEST(CollectiveBench, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kAllReduce, 16), 2 * 15.0 / 16);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kAllGather, 16), 15.0 / 16);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kReduceScatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kAllToAll, 2), 0.5);
}

TEST(CollectiveBench, AnAllToAllAcrossTwoNodesRunsAtEachGpusShareOfTheNodesNics) {
  // Each node sends 8 ranks x 8 remote peers x S/16 = 4S through its 100 GB/s: algbw 25 GB/s,
  // busbw 15/16 of it (the 23.44 GB/s line rate of the public 2 x 8 A100 measurement).
  const double s = 4.0 * (1 << 30);
  const CollectiveRun r =
      simulate_collective(a100_2x8(), OpKind::kAllToAll, ranks(0, 16), s, exact());
  EXPECT_NEAR(r.time_s, 4 * s / 100e9, 1e-9 * r.time_s);
  EXPECT_NEAR(r.algbw, 25e9, 1e-9 * 25e9);
  EXPECT_NEAR(r.busbw, 23.4375e9, 1e-9 * 23.4375e9);
}

TEST(CollectiveBench, RingsRunAtTheirBottleneckLinksBusBandwidth) {
  const double s = 1 << 30;
  // One node: every ring flow on a GPU's NVLink; busbw is its bandwidth.
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter}) {
    const CollectiveRun one = simulate_collective(a100_2x8(), kind, ranks(0, 8), s, exact());
    EXPECT_NEAR(one.busbw, 300e9, 1e-9 * 300e9) << sched::to_string(kind);
    // Two nodes: the ring crosses each node's NICs once; busbw is the node's bandwidth.
    const CollectiveRun two = simulate_collective(a100_2x8(), kind, ranks(0, 16), s, exact());
    EXPECT_NEAR(two.busbw, 100e9, 1e-9 * 100e9) << sched::to_string(kind);
  }
}

TEST(CollectiveBench, ARingPaysItsLatencyOncePerStep) {
  const double s = 64 << 20, lat = 5e-6;
  const CollectiveRun r =
      simulate_collective(a100_2x8(0, lat), OpKind::kAllReduce, ranks(0, 8), s, exact());
  const double want = 2 * 7 * lat + 2 * 7.0 / 8 * s / 300e9;
  EXPECT_NEAR(r.time_s, want, 1e-9 * want);
  EXPECT_DOUBLE_EQ(r.algbw, s / r.time_s);
}

TEST(CollectiveBench, AMeasuredCurveScalesTheBusBandwidth) {
  core::Cluster c = a100_2x8().cluster();
  c.efficiency["node"]["alltoall"] = {{1 << 20, 0.4}, {1 << 30, 0.8}};
  const core::Topology topology(c);
  const CollectiveRun big =
      simulate_collective(topology, OpKind::kAllToAll, ranks(0, 16), 1 << 30, exact());
  EXPECT_NEAR(big.busbw, 0.8 * 23.4375e9, 1e-9 * 23.4375e9);
  const CollectiveRun small =
      simulate_collective(topology, OpKind::kAllToAll, ranks(0, 16), 1 << 20, exact());
  EXPECT_NEAR(small.busbw, 0.4 * 23.4375e9, 1e-9 * 23.4375e9);
}

TEST(CollectiveBench, TheA2AsSizeIsEachRanksSendBufferItselfIncluded) {
  const sched::Schedule s = collective_schedule(OpKind::kAllToAll, ranks(0, 4), 4, 4e6);
  ASSERT_EQ(s.num_collectives(), 1);
  for (double b : s.collective(0).pair_bytes) EXPECT_DOUBLE_EQ(b, 1e6);
}

TEST(CollectiveBench, NamesAndBadInputs) {
  EXPECT_EQ(parse_collective("reducescatter", "x"), OpKind::kReduceScatter);
  EXPECT_EQ(collective_key(OpKind::kAllGather), "allgather");
  EXPECT_ERROR_HAS(parse_collective("all_reduce", "--collective"), "unknown collective");
  EXPECT_ERROR_HAS(simulate_collective(a100_2x8(), OpKind::kAllReduce, {3}, 1e6), "2 ranks");
  EXPECT_ERROR_HAS(simulate_collective(a100_2x8(), OpKind::kAllReduce, {0, 1}, 0), "positive");
}

}  // namespace
}  // namespace moecomm::sim
