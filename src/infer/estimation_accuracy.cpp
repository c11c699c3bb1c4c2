#include "infer/estimation_accuracy.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "infer/popularity_estimator.h"

namespace moecomm::infer {

EstimationAccuracy evaluate_estimation(const PathProfile& profile, const place::RoutingTrace& test,
                                       const AccuracyOptions& options) {
  const std::string where = "estimation accuracy";
  if (test.experts != profile.experts() || test.layers() != profile.layers())
    throw Error(where, "the test trace has " + std::to_string(test.experts) + " experts and " +
                           std::to_string(test.layers()) + " layers, the profile " +
                           std::to_string(profile.experts()) + " and " +
                           std::to_string(profile.layers()));
  if (options.batch_samples < 1)
    throw Error(where + ": batch_samples",
                "must be at least 1, got " + std::to_string(options.batch_samples));
  const int top_k = options.top_k == 0 ? test.top_k : options.top_k;
  if (top_k < 1 || top_k > test.experts)
    throw Error(where + ": top_k", "must be in [1, " + std::to_string(test.experts) + "], got " +
                                       std::to_string(top_k));
  const int first = options.first_layer < 0 ? profile.path_length() - 1 : options.first_layer;
  if (first > profile.layers() - 2)
    throw Error(where + ": first_layer",
                "must be at most layers - 2 = " + std::to_string(profile.layers() - 2) + ", got " +
                    std::to_string(first));
  EstimationAccuracy acc;
  for (const auto& layers : test.iterations) {
    const int samples = layers.front().samples();
    for (int s = 0; s < samples; s += options.batch_samples) {
      const int end = std::min(samples, s + options.batch_samples);
      for (int i = first; i + 1 < profile.layers(); ++i) {
        const auto paths = token_paths(layers, i, profile.path_length(), s, end);
        const auto estimated = estimate_popularity(profile, i, paths, top_k);
        const auto actual =
            popularity_of_counts(expert_counts(layers[i + 1], test.experts, s, end));
        ++acc.estimates;
        if (same_top_experts(estimated, actual, 2 * top_k)) ++acc.accurate;
      }
    }
  }
  return acc;
}

}  // namespace moecomm::infer
