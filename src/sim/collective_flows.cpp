#include "sim/collective_flows.h"

#include "sched/a2a_routing.h"

namespace moecomm::sim {

namespace {

using sched::Collective;

void add(FlowPhase& phase, int src, int dst, double bytes, int steps = 1) {
  if (src != dst && bytes > 0) phase.push_back({src, dst, bytes, steps});
}

FlowPhase ring(const Collective& c, double bytes_per_member, int steps) {
  FlowPhase phase;
  const int n = c.size();
  for (int i = 0; i < n; ++i) add(phase, c.group[i], c.group[(i + 1) % n], bytes_per_member, steps);
  return phase;
}

FlowPhase broadcast(const Collective& c) {
  const int n = c.size();
  int root = 0;
  while (root < n && c.group[root] != c.root) ++root;
  FlowPhase phase;
  for (int hop = 0; hop + 1 < n; ++hop) {  // chain root -> root+1 -> ... pipelined
    add(phase, c.group[(root + hop) % n], c.group[(root + hop + 1) % n], c.bytes, n - 1);
  }
  return phase;
}

// The A2A's routing plan, each step a phase of one flow per transfer.
std::vector<FlowPhase> routed_a2a(const Collective& c, int devices_per_node) {
  const auto routing =
      sched::cached_a2a_routing(c.algorithm, c.group, devices_per_node, c.direction);
  std::vector<FlowPhase> phases;
  for (const sched::RoutingStep& step : routing->steps) {
    FlowPhase& phase = phases.emplace_back();
    for (const sched::RoutedTransfer& t : step)
      add(phase, c.group[t.from], c.group[t.to],
          sched::transfer_bytes(t, c.pair_bytes, c.size(), c.node_bytes));
  }
  return phases;
}

}  // namespace

std::vector<FlowPhase> collective_phases(const Collective& c, int devices_per_node) {
  using sched::OpKind;
  const int n = c.size();
  if (n <= 1) return {};
  switch (c.kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      return {ring(c, c.bytes * (n - 1) / n, n - 1)};
    case OpKind::kAllReduce:
      return {ring(c, 2.0 * c.bytes * (n - 1) / n, 2 * (n - 1))};
    case OpKind::kBroadcast:
      return {broadcast(c)};
    case OpKind::kAllToAll:
      return routed_a2a(c, devices_per_node);
    default:
      return {};
  }
}

}  // namespace moecomm::sim
