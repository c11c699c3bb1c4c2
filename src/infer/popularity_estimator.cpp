#include "infer/popularity_estimator.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "core/error.h"

namespace moecomm::infer {

namespace {

void check_samples(const place::LayerRouting& r, int first, int last, const std::string& where) {
  if (first < 0 || last > r.samples() || first >= last)
    throw Error(where + ": samples", "range [" + std::to_string(first) + ", " +
                                         std::to_string(last) + ") must be non-empty inside [0, " +
                                         std::to_string(r.samples()) + ")");
}

}  // namespace

std::vector<std::vector<int32_t>> token_paths(const std::vector<place::LayerRouting>& routing,
                                              int layer, int path_length, int first_sample,
                                              int last_sample) {
  const std::string where = "token paths";
  if (layer < 0 || layer >= static_cast<int>(routing.size()))
    throw Error(where + ": layer", "must be in [0, " + std::to_string(routing.size()) + "), got " +
                                       std::to_string(layer));
  if (path_length < 1)
    throw Error(where + ": path_length", "must be at least 1, got " + std::to_string(path_length));
  const int from = std::max(0, layer - path_length + 1);
  for (int i = from; i <= layer; ++i) check_samples(routing[i], first_sample, last_sample, where);
  const int tokens = routing[layer].tokens();
  std::vector<std::vector<int32_t>> paths;
  paths.reserve(static_cast<size_t>(last_sample - first_sample) * tokens);
  for (int s = first_sample; s < last_sample; ++s) {
    for (int t = 0; t < tokens; ++t) {
      auto& p = paths.emplace_back();
      for (int i = from; i <= layer; ++i) p.push_back(routing[i].at(s, t, 0));  // top-1
    }
  }
  return paths;
}

std::vector<double> estimate_popularity(const PathProfile& profile, int layer,
                                        const std::vector<std::vector<int32_t>>& paths, int top_k) {
  const std::string where = "popularity estimate";
  if (paths.empty()) throw Error(where, "the batch has no tokens");
  if (top_k < 1 || top_k > profile.experts())
    throw Error(where + ": top_k", "must be in [1, " + std::to_string(profile.experts()) +
                                       "], got " + std::to_string(top_k));
  // Tokens sharing a path share its estimate: look each distinct path up once.
  std::map<std::vector<int32_t>, int64_t> tokens_of_path;
  for (const auto& p : paths) ++tokens_of_path[p];
  std::vector<double> pop(profile.experts(), 0.0);
  for (const auto& [path, tokens] : tokens_of_path) {
    const Distribution& psi = profile.next_distribution(layer, path);
    const size_t k = std::min(psi.size(), static_cast<size_t>(top_k));
    for (size_t j = 0; j < k; ++j) pop[psi[j].expert] += psi[j].share * static_cast<double>(tokens);
  }
  for (double& p : pop) p /= static_cast<double>(paths.size());  // Lina Eq. 1: / N_t
  return pop;
}

std::vector<int64_t> expert_counts(const place::LayerRouting& routing, int experts,
                                   int first_sample, int last_sample) {
  const std::string where = "expert counts";
  check_samples(routing, first_sample, last_sample, where);
  std::vector<int64_t> counts(experts, 0);
  for (int s = first_sample; s < last_sample; ++s)
    for (int t = 0; t < routing.tokens(); ++t)
      for (int k = 0; k < routing.top_k(); ++k) {
        const int32_t e = routing.at(s, t, k);
        if (e < 0 || e >= experts)
          throw Error(where, "expert id " + std::to_string(e) + " is outside [0, " +
                                 std::to_string(experts) + ")");
        ++counts[e];
      }
  return counts;
}

std::vector<double> popularity_of_counts(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) throw Error("popularity of counts", "negative count " + std::to_string(c));
    total += c;
  }
  std::vector<double> pop(counts.size(), 0.0);
  if (total == 0) return pop;
  for (size_t e = 0; e < counts.size(); ++e)
    pop[e] = static_cast<double>(counts[e]) / static_cast<double>(total);
  return pop;
}

std::vector<int> top_experts(const std::vector<double>& popularity, int n) {
  std::vector<int> order(popularity.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t m = std::min(order.size(), static_cast<size_t>(std::max(n, 0)));
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int a, int b) {
    return popularity[a] != popularity[b] ? popularity[a] > popularity[b] : a < b;
  });
  order.resize(m);
  return order;
}

bool same_top_experts(const std::vector<double>& estimated, const std::vector<double>& actual,
                      int n) {
  if (estimated.size() != actual.size())
    throw Error("top experts", "estimated popularity has " + std::to_string(estimated.size()) +
                                   " experts, actual " + std::to_string(actual.size()));
  std::vector<int> a = top_experts(estimated, n), b = top_experts(actual, n);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

}  // namespace moecomm::infer
