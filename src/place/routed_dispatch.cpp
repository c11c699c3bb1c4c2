#include "place/routed_dispatch.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/rank_groups.h"
#include "place/sample_placer.h"

namespace moecomm::place {

namespace {

// The group's members as a grid of nodes x members per node: grid device d is members
// [order[d]] of the group.
struct GroupGrid {
  DeviceGrid grid;
  std::vector<int> order;
};

GroupGrid group_grid(const core::RankGroup& group, int devices_per_node) {
  std::map<int, std::vector<int>> by_node;
  for (int m = 0; m < static_cast<int>(group.size()); ++m)
    by_node[group[m] / devices_per_node].push_back(m);
  GroupGrid g;
  g.grid.nodes = static_cast<int>(by_node.size());
  g.grid.devices_per_node = static_cast<int>(by_node.begin()->second.size());
  for (const auto& [node, members] : by_node) {
    if (static_cast<int>(members.size()) != g.grid.devices_per_node)
      throw Error("routed dispatch", "an EP group has different numbers of members per node");
    g.order.insert(g.order.end(), members.begin(), members.end());
  }
  return g;
}

}  // namespace

RoutedDispatch routed_dispatch(const core::ModelSetup& setup, SyntheticRoutingSpec spec,
                               bool netmoe_placement, const std::string& solver) {
  const core::RankGroups groups = core::build_rank_groups(setup.parallel);
  const int per_node = setup.cluster.levels.back().count;
  // A capacity factor pads every expert's buffer by the same factor (the builder's uniform
  // dispatch carries it too), so routed and uniform runs move the same total.
  const double token_bytes = static_cast<double>(setup.model.hidden) * setup.model.dtype_bytes *
                             setup.model.capacity_factor.value_or(1.0);
  RoutedDispatch out;
  SamplePlacer placer(solver);
  for (size_t k = 0; k < groups.ep.size(); ++k) {
    const core::RankGroup& group = groups.ep[k];
    const int n = static_cast<int>(group.size());
    const GroupGrid gg = group_grid(group, per_node);
    // The group's trace in doubles first: n x micro_batch alone can pass 2^31.
    const double samples = double(n) * double(setup.model.micro_batch);
    const double ids =
        2.0 * samples * double(setup.model.seq_len / setup.parallel.cp) * double(setup.model.top_k);
    if (ids > double(kMaxTraceIds))
      throw Error("synthetic routing",
                  "an EP group's routing of two layers would hold " + std::to_string(int64_t(ids)) +
                      " expert ids (EP size x micro_batch x seq_len / cp x top_k x 2), more than " +
                      std::to_string(kMaxTraceIds) +
                      ": reduce micro_batch or seq_len, or use uniform routing");
    spec.samples = static_cast<int>(samples);
    spec.tokens = static_cast<int>(setup.model.seq_len / setup.parallel.cp);
    spec.experts = static_cast<int>(setup.model.experts);
    spec.top_k = static_cast<int>(setup.model.top_k);
    spec.router_groups = setup.model.router_groups;
    spec.router_group_top_k = setup.model.router_group_top_k;
    spec.layers = 2;
    spec.iterations = 1;
    const RoutingTrace trace = generate_routing_trace(spec);
    ++spec.seed;  // each EP group its own batch
    const RoutingCounts gather = count_routing(trace.iterations[0][0], spec.experts);
    const RoutingCounts scatter = count_routing(trace.iterations[0][1], spec.experts);
    // Experts in contiguous blocks over the members, samples at home on their own member
    // (the builder's convention); the placer works on grid devices.
    std::vector<int> grid_of(n);
    for (int d = 0; d < n; ++d) grid_of[gg.order[d]] = d;
    std::vector<int> expert_member = expert_blocks(spec.experts, n), expert_grid(spec.experts);
    for (int e = 0; e < spec.experts; ++e) expert_grid[e] = grid_of[expert_member[e]];
    std::vector<int> sample_member = home_placement(spec.samples, n);
    if (netmoe_placement) {
      const SamplePlacement p = placer.place(add_counts(gather, scatter), expert_grid, gg.grid);
      for (int s = 0; s < spec.samples; ++s) sample_member[s] = gg.order[p.sample_device[s]];
      out.placement_solve_us += p.solve_us;
    }
    // This layer's scatter from where the samples sit, in group member order.
    std::vector<double> m(static_cast<size_t>(n) * n, 0.0);
    for (int s = 0; s < scatter.samples; ++s) {
      const int from = sample_member[s];
      for (int e = 0; e < scatter.experts; ++e) {
        const int to = expert_member[e];
        const double bytes = scatter.at(s, e) * token_bytes;
        m[static_cast<size_t>(from) * n + to] += bytes;
        if (group[from] / per_node != group[to] / per_node) out.inter_node_bytes += bytes;
      }
    }
    out.matrices.push_back(std::move(m));
  }
  return out;
}

}  // namespace moecomm::place
