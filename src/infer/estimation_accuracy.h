#pragma once
// Lina Sec. 7.3.2's estimation accuracy, measured on a routing trace: an estimate for a
// batch and layer is accurate when its top-2k experts are the actual top-2k experts (the
// same test that decides phase two, so 1 - accuracy is how often phase two re-plans).
#include <cstdint>

#include "infer/path_profile.h"
#include "place/routing_trace.h"

namespace moecomm::infer {

struct AccuracyOptions {
  int batch_samples = 1;  // samples per batch; each iteration's samples are cut in batches
  int first_layer = -1;   // first layer i whose estimate of i+1 is scored; -1: path_length-1
  int top_k = 0;          // experts kept per path (Eq. 1) and k of the top-2k; 0: trace's
};

struct EstimationAccuracy {
  int64_t estimates = 0;  // batches x scored layers
  int64_t accurate = 0;
  double accuracy() const {
    return estimates > 0 ? static_cast<double>(accurate) / static_cast<double>(estimates) : 0;
  }
};

// Estimates every layer i+1 (i from first_layer to layers-2) of every batch of `test`
// with `profile` and compares with the actual routing. Throws Error if the test trace's
// experts or layers differ from the profile's, or on an option out of range.
EstimationAccuracy evaluate_estimation(const PathProfile& profile, const place::RoutingTrace& test,
                                       const AccuracyOptions& options);

}  // namespace moecomm::infer
