#pragma once
// How a collective becomes flows:
// a sequence of phases; the flows of a phase run at once, a phase starts when the one
// before has ended.
//   ring AllGather / ReduceScatter: each member sends (n-1)/n S to the next member;
//   ring AllReduce: 2(n-1)/n S. The n-1 (2(n-1)) ring steps are one pipelined flow per
//   member whose latency is paid once per step, so a ring takes steps x alpha + bytes / B.
//   Broadcast: pipelined chain from the root, S per hop, n-1 latencies.
//   A2A: one phase per step of its routing plan (sched/a2a_routing.h, whatever the
//     algorithm), a flow per transfer carrying its blocks' bytes.
#include <vector>

#include "sched/op.h"

namespace moecomm::sim {

struct FlowSpec {
  int src = 0;  // global ranks
  int dst = 0;
  double bytes = 0;
  int steps = 1;  // latencies paid: ring steps along this flow
};
using FlowPhase = std::vector<FlowSpec>;

// devices_per_node: ranks r and s share a node when r / devices_per_node equals
// s / devices_per_node. Flows between a rank and itself are left out.
std::vector<FlowPhase> collective_phases(const sched::Collective& collective, int devices_per_node);

}  // namespace moecomm::sim
