#include "place/trace_evaluation.h"

#include <algorithm>

#include "core/error.h"
#include "place/async_sample_placer.h"
#include "place/routing_predictor.h"

namespace moecomm::place {

namespace {

double share_moved(const std::vector<int>& from, const std::vector<int>& to, int group) {
  int moved = 0;
  for (size_t i = 0; i < from.size(); ++i) moved += (from[i] / group != to[i] / group);
  return from.empty() ? 0.0 : static_cast<double>(moved) / from.size();
}

double pair_time(const RoutingCounts& gather, const RoutingCounts& scatter,
                 const std::vector<int>& sample_device, const std::vector<int>& expert_device,
                 const core::Topology& topology, double bytes_per_token) {
  return a2a_time(a2a_traffic(gather, sample_device, expert_device, topology), topology,
                  bytes_per_token) +
         a2a_time(a2a_traffic(scatter, sample_device, expert_device, topology), topology,
                  bytes_per_token);
}

}  // namespace

std::vector<PairEvaluation> evaluate_trace(const RoutingTrace& trace,
                                           const core::Topology& topology,
                                           const std::vector<int>& expert_device,
                                           const TraceEvaluationOptions& options) {
  const DeviceGrid grid = DeviceGrid::of(topology);
  if (trace.samples() < grid.devices()) {
    throw Error("trace", std::to_string(trace.samples()) + " samples cannot fill the " +
                             std::to_string(grid.devices()) + " devices of the cluster");
  }
  const std::vector<int> home = home_placement(trace.samples(), grid.devices());
  // The predictor learns after each iteration for the next; the last one teaches nothing.
  const int64_t updates = int64_t{trace.layers() - 1} * int64_t(trace.iterations.size() - 1);
  check_predictor_size(trace.layers(), trace.experts, updates);
  RoutingPredictor predictor(trace.layers(), trace.experts, options.predictor_decay);
  AsyncSamplePlacer placer(options.solver);
  SamplePlacer oracle_placer(options.solver);
  std::vector<PairEvaluation> out;
  for (size_t it = 0; it < trace.iterations.size(); ++it) {
    std::vector<RoutingCounts> counts;
    for (const LayerRouting& layer : trace.iterations[it]) {
      counts.push_back(count_routing(layer, trace.experts));
    }
    std::vector<int> current = home;  // each iteration's batch starts at home
    for (int l = 0; l + 1 < trace.layers(); ++l) {
      PairEvaluation pair;
      pair.iteration = static_cast<int>(it);
      pair.layer = l;
      pair.predicted = predictor.has_statistics(l);
      const RoutingCounts predicted = predictor.predict(l, counts[l]);
      placer.submit(add_counts(counts[l], predicted), expert_device, grid);
      // What the scatter and experts overlap with in Algorithm 1; here, the baseline.
      const RoutingCounts truth = add_counts(counts[l], counts[l + 1]);
      pair.before = a2a_traffic(truth, home, expert_device, topology);
      pair.time_before_s = pair_time(counts[l], counts[l + 1], home, expert_device, topology,
                                     options.bytes_per_token);
      const CollectedPlacement chosen = placer.collect();
      const std::vector<int>& placed = chosen.placement.sample_device;
      pair.solve_us = chosen.placement.solve_us;
      pair.wait_us = chosen.wait_us;
      pair.after = a2a_traffic(truth, placed, expert_device, topology);
      pair.time_after_s = pair_time(counts[l], counts[l + 1], placed, expert_device, topology,
                                    options.bytes_per_token);
      pair.oracle =
          a2a_traffic(truth, oracle_placer.place(truth, expert_device, grid).sample_device,
                      expert_device, topology);
      pair.prediction_error = prediction_error(predicted, counts[l + 1]);
      pair.moved_across_nodes = share_moved(current, placed, grid.devices_per_node);
      pair.moved_across_devices = share_moved(current, placed, 1);
      current = placed;
      out.push_back(std::move(pair));
    }
    if (it + 1 < trace.iterations.size())
      for (int l = 0; l + 1 < trace.layers(); ++l) predictor.observe(l, counts[l], counts[l + 1]);
    if (options.progress) {
      options.progress(static_cast<int>(it) + 1, static_cast<int>(trace.iterations.size()));
    }
  }
  return out;
}

TraceSummary summarize(const std::vector<PairEvaluation>& pairs) {
  TraceSummary s;
  s.pairs = static_cast<int>(pairs.size());
  if (pairs.empty()) return s;
  for (const PairEvaluation& p : pairs) {
    s.inter_before += p.before.inter_node();
    s.inter_after += p.after.inter_node();
    s.inter_oracle += p.oracle.inter_node();
    s.intra_before += p.before.intra_node();
    s.intra_after += p.after.intra_node();
    s.intra_oracle += p.oracle.intra_node();
    s.time_before_s += p.time_before_s;
    s.time_after_s += p.time_after_s;
    s.moved_across_nodes += p.moved_across_nodes;
    s.moved_across_devices += p.moved_across_devices;
    s.solve_us_mean += p.solve_us;
    s.solve_us_max = std::max(s.solve_us_max, p.solve_us);
    s.wait_us_mean += p.wait_us;
    if (p.predicted) {
      ++s.predicted_pairs;
      s.prediction_error += p.prediction_error;
    }
  }
  const double gain = s.inter_before - s.inter_after, best = s.inter_before - s.inter_oracle;
  s.oracle_share = best > 0 ? gain / best : 1.0;
  const double n = s.pairs;
  for (double* v :
       {&s.inter_before, &s.inter_after, &s.inter_oracle, &s.intra_before, &s.intra_after,
        &s.intra_oracle, &s.time_before_s, &s.time_after_s, &s.moved_across_nodes,
        &s.moved_across_devices, &s.solve_us_mean, &s.wait_us_mean}) {
    *v /= n;
  }
  if (s.predicted_pairs > 0) s.prediction_error /= s.predicted_pairs;
  return s;
}

}  // namespace moecomm::place
