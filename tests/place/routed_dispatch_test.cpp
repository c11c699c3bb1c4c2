// The simulator's routed dispatch takes the model's node-limited routing: its synthetic
// routing is generate_routing_trace's with the model's router_groups and router_group_top_k.
#include "place/routed_dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/model_setup.h"
#include "place/traffic.h"

namespace moecomm::place {
namespace {

// testbed-moe-s (16 experts, top-2, seq_len 64, micro_batch 4) on 2 nodes x 8 GPUs.
core::ModelSetup setup(int groups, int group_top_k) {
  core::ModelSetup s = core::resolve_model_setup("testbed-moe-s", "netmoe-a800-2x8", "");
  s.model.router_groups = groups;
  s.model.router_group_top_k = group_top_k;
  return s;
}

double total(const RoutedDispatch& d) {
  double sum = 0;
  for (const std::vector<double>& m : d.matrices) sum = std::accumulate(m.begin(), m.end(), sum);
  return sum;
}

TEST(RoutedDispatch, TakesTheModelsNodeLimitedRouting) {
  SyntheticRoutingSpec spec;
  spec.locality = 0.5;
  const RoutedDispatch plain = routed_dispatch(setup(1, 0), spec, false, "flow");
  // No limit: the plain routing, byte for byte.
  for (auto [groups, group_top_k] : {std::pair{2, 0}, {2, 2}, {16, 16}})
    EXPECT_EQ(routed_dispatch(setup(groups, group_top_k), spec, false, "flow").matrices,
              plain.matrices)
        << groups << " " << group_top_k;
  // One group per node, each token on one node: other routes, the same bytes in all.
  const RoutedDispatch limited = routed_dispatch(setup(2, 1), spec, false, "flow");
  EXPECT_NE(limited.matrices, plain.matrices);
  EXPECT_EQ(total(limited), total(plain));
  // The matrices are the counts of generate_routing_trace with the model's groups: the first
  // EP group's member 0's row, from its samples' tokens at the second layer (the scatter).
  const core::ModelSetup s = setup(2, 1);
  const std::vector<double>& m = limited.matrices.at(0);
  const int n = static_cast<int>(std::lround(std::sqrt(double(m.size()))));
  spec.samples = static_cast<int>(n * s.model.micro_batch);
  spec.tokens = static_cast<int>(s.model.seq_len);
  spec.experts = 16;
  spec.top_k = static_cast<int>(s.model.top_k);
  spec.layers = 2;
  spec.iterations = 1;
  spec.router_groups = 2;
  spec.router_group_top_k = 1;
  const RoutingCounts scatter = count_routing(generate_routing_trace(spec).iterations[0][1], 16);
  const double token_bytes = double(s.model.hidden) * s.model.dtype_bytes;
  const std::vector<int> home = home_placement(spec.samples, n);
  const std::vector<int> owner = expert_blocks(16, n);
  std::vector<double> row(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < spec.samples; ++i)
    if (home[static_cast<size_t>(i)] == 0)
      for (int e = 0; e < 16; ++e)
        row[static_cast<size_t>(owner[static_cast<size_t>(e)])] += scatter.at(i, e) * token_bytes;
  EXPECT_EQ(std::vector<double>(m.begin(), m.begin() + n), row);
}

}  // namespace
}  // namespace moecomm::place
