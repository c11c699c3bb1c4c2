#pragma once
// Replays a routing trace through NetMoE placement as a training loop would (Algorithm 1):
// for each iteration and each pair of consecutive layers, the placement for gather(l) +
// scatter(l+1) is solved on the background thread from layer l's true counts and layer
// l+1's predicted counts, then judged against the true counts of layer l+1 once they are
// known, beside the placement an oracle that knew them would choose.
#include <functional>
#include <string>
#include <vector>

#include "core/topology.h"
#include "place/routing_trace.h"
#include "place/traffic.h"

namespace moecomm::place {

struct PairEvaluation {
  int iteration = 0;
  int layer = 0;  // the gather of this layer and the scatter of the next
  // Tokens of gather(l) + scatter(l+1) by level: samples at home (no NetMoE), at the placement
  // chosen with the prediction, and at the oracle's placement.
  A2ATraffic before, after, oracle;
  double time_before_s = 0, time_after_s = 0;  // Eq. 1 for each A2A, summed
  double moved_across_nodes = 0;               // share of samples put on another node than before
  double moved_across_devices = 0;             // share put on another device than before
  double solve_us = 0;
  double wait_us = 0;           // time the gather would have waited for the solver
  bool predicted = false;       // whether the predictor had statistics for this layer
  double prediction_error = 0;  // sum |predicted - true| / sum true, layer l+1 counts
};

struct TraceEvaluationOptions {
  std::string solver = "flow";
  double bytes_per_token = 0;  // hidden x dtype bytes
  double predictor_decay = 0.5;
  std::function<void(int done, int total)> progress;  // after each iteration, if set
};

// Means over the pairs (token counts, times, shares, solve times); prediction figures over
// the pairs where the predictor had statistics.
struct TraceSummary {
  int pairs = 0;
  int predicted_pairs = 0;
  double inter_before = 0, inter_after = 0, inter_oracle = 0;  // tokens
  double intra_before = 0, intra_after = 0, intra_oracle = 0;
  double time_before_s = 0, time_after_s = 0;
  double moved_across_nodes = 0, moved_across_devices = 0;
  double solve_us_mean = 0, solve_us_max = 0, wait_us_mean = 0;
  double prediction_error = 0;
  // Inter-node reduction reached with the predicted scatter, as a share of the oracle's
  // (1 = the prediction cost nothing).
  double oracle_share = 0;
};

TraceSummary summarize(const std::vector<PairEvaluation>& pairs);

std::vector<PairEvaluation> evaluate_trace(const RoutingTrace& trace,
                                           const core::Topology& topology,
                                           const std::vector<int>& expert_device,
                                           const TraceEvaluationOptions& options);

}  // namespace moecomm::place
