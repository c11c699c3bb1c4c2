#pragma once
// Small hand-written routing traces for the infer tests.
#include <vector>

#include "place/routing_trace.h"

namespace moecomm::infer::testing {

// choices[layer][sample][token][k] as one iteration of a trace.
inline place::RoutingTrace make_trace(
    int experts, const std::vector<std::vector<std::vector<std::vector<int>>>>& choices) {
  place::RoutingTrace trace;
  trace.experts = experts;
  trace.top_k = static_cast<int>(choices.at(0).at(0).at(0).size());
  auto& layers = trace.iterations.emplace_back();
  for (const auto& layer : choices) {
    const int samples = static_cast<int>(layer.size());
    const int tokens = static_cast<int>(layer[0].size());
    auto& r = layers.emplace_back(samples, tokens, trace.top_k);
    for (int s = 0; s < samples; ++s)
      for (int t = 0; t < tokens; ++t)
        for (int k = 0; k < trace.top_k; ++k) r.at(s, t, k) = layer[s][t][k];
  }
  return trace;
}

// One sample, top-1: paths[token][layer] transposed into a trace.
inline place::RoutingTrace top1_trace(int experts, const std::vector<std::vector<int>>& paths) {
  std::vector<std::vector<std::vector<std::vector<int>>>> choices(paths.at(0).size());
  for (size_t l = 0; l < choices.size(); ++l) {
    choices[l].resize(1);
    for (const auto& p : paths) choices[l][0].push_back({p[l]});
  }
  return make_trace(experts, choices);
}

}  // namespace moecomm::infer::testing
