#include "sim/collective_flows.h"

#include <map>

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

FlowPhase flat_a2a(const Collective& c) {
  FlowPhase phase;
  const int n = c.size();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) add(phase, c.group[i], c.group[j], c.pair(i, j));
  }
  return phase;
}

// Members per node in group order; empty when nodes hold different numbers of members.
std::vector<std::vector<int>> members_by_node(const Collective& c, int devices_per_node) {
  std::map<int, std::vector<int>> by_node;
  for (int i = 0; i < c.size(); ++i) by_node[c.group[i] / devices_per_node].push_back(i);
  std::vector<std::vector<int>> nodes;
  for (auto& [node, members] : by_node) {
    if (!nodes.empty() && members.size() != nodes.front().size()) return {};
    nodes.push_back(std::move(members));
  }
  return nodes;
}

std::vector<FlowPhase> two_dh(const Collective& c, const std::vector<std::vector<int>>& nodes) {
  const size_t local = nodes.front().size();
  FlowPhase intra, inter;
  for (const auto& node : nodes) {
    for (size_t l = 0; l < local; ++l) {  // member node[a] -> node[l]: all bytes for index l
      for (size_t a = 0; a < local; ++a) {
        double bytes = 0;
        for (const auto& dst_node : nodes) bytes += c.pair(node[a], dst_node[l]);
        add(intra, c.group[node[a]], c.group[node[l]], bytes);
      }
    }
  }
  for (size_t x = 0; x < nodes.size(); ++x) {
    for (size_t y = 0; y < nodes.size(); ++y) {
      if (x == y) continue;
      for (size_t l = 0; l < local; ++l) {  // node x's index l -> node y's index l
        double bytes = 0;
        for (int src : nodes[x]) bytes += c.pair(src, nodes[y][l]);
        add(inter, c.group[nodes[x][l]], c.group[nodes[y][l]], bytes);
      }
    }
  }
  return {intra, inter};
}

std::vector<FlowPhase> one_dh(const Collective& c, const std::vector<std::vector<int>>& nodes) {
  FlowPhase gather, leaders, scatter;
  for (size_t x = 0; x < nodes.size(); ++x) {
    const int leader = nodes[x].front();
    for (int a : nodes[x]) {
      double off_node = 0;
      for (size_t y = 0; y < nodes.size(); ++y) {
        for (int b : nodes[y]) {
          if (y == x) {
            add(gather, c.group[a], c.group[b], c.pair(a, b));  // on-node bytes go directly
          } else {
            off_node += c.pair(a, b);
          }
        }
      }
      add(gather, c.group[a], c.group[leader], off_node);
    }
    for (size_t y = 0; y < nodes.size(); ++y) {
      if (y == x) continue;
      double bytes = 0;
      for (int a : nodes[x]) {
        for (int b : nodes[y]) bytes += c.pair(a, b);
      }
      add(leaders, c.group[leader], c.group[nodes[y].front()], bytes);
    }
    for (int b : nodes[x]) {
      double from_off_node = 0;
      for (size_t y = 0; y < nodes.size(); ++y) {
        if (y == x) continue;
        for (int a : nodes[y]) from_off_node += c.pair(a, b);
      }
      add(scatter, c.group[leader], c.group[b], from_off_node);
    }
  }
  return {gather, leaders, scatter};
}

}  // namespace

std::vector<FlowPhase> collective_phases(const Collective& c, int devices_per_node) {
  using sched::Algorithm;
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
    case OpKind::kAllToAll: {
      if (c.algorithm == Algorithm::kFlat) return {flat_a2a(c)};
      const auto nodes = members_by_node(c, devices_per_node);
      if (nodes.size() < 2) return {flat_a2a(c)};  // one node or irregular: nothing to gain
      return c.algorithm == Algorithm::k2DH ? two_dh(c, nodes) : one_dh(c, nodes);
    }
    default:
      return {};
  }
}

}  // namespace moecomm::sim
