// Solves a placement and simulates a ring AllReduce through the installed moecomm package;
// check_install.cmake compares the lines it prints with their exact values.
#include <cstdio>
#include <cstdlib>

#include "core/presets.h"
#include "core/topology.h"
#include "place/assignment.h"
#include "sim/simulator.h"

int main() {
  using namespace moecomm;
  // Three samples into two nodes holding 2 and 1: only sample 1 on node 1 costs 1 + 2 + 3 = 6.
  place::AssignmentProblem problem;
  problem.rows = 3;
  problem.bins = 2;
  problem.cost = {1, 5, 4, 2, 3, 9};
  problem.capacity = {2, 1};
  const place::Assignment a = place::make_assignment_solver("flow")->solve(problem);
  std::printf("placement cost %lld bins %d %d %d\n", static_cast<long long>(a.cost), a.bin_of[0],
              a.bin_of[1], a.bin_of[2]);

  // 1 GB over a ring of 4 devices at 100 GB/s and 1 us: 2(n-1) latencies + 2(n-1)/n S/B.
  core::Cluster c;
  c.name = "consumer";
  c.levels = {{"node", 1, 10e9, 5e-6}, {"gpu", 4, 100e9, 1e-6}};
  c.device.flops = 100e12;
  c.device.memory_bandwidth = 1e12;
  sched::Schedule s(4);
  sched::CollectiveSpec ar;
  ar.kind = sched::OpKind::kAllReduce;
  ar.group = {0, 1, 2, 3};
  ar.bytes = 1e9;
  ar.label.role = sched::OpRole::kGradDenseAllReduce;
  s.add_collective(ar, 0);
  std::printf("allreduce %.6f s\n", sim::simulate(s, core::Topology(c)).makespan_s);

  // The installed presets, named as the package reports them.
  setenv("MOECOMM_DATA_DIR", MOECOMM_PRESETS, 1);
  std::printf("preset %s\n", core::load_cluster(core::kDefaultCluster).name.c_str());
  return 0;
}
