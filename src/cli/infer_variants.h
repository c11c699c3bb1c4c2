#pragma once
// The five variants `moecomm infer` times, in report order (Lina Sec. 7.3.1's columns):
// plain EP, Lina without estimation (phase two only), Lina without fine-tuning (phase one
// only), Lina, and Ideal (a perfectly balanced routing).

namespace moecomm::cli {

enum InferVariant { kBaseline, kNoEstimation, kNoFineTuning, kLina, kIdeal, kVariants };

// JSON keys and table labels, indexed by InferVariant.
inline constexpr const char* kVariantNames[kVariants] = {"baseline", "lina_no_estimation",
                                                         "lina_no_fine_tuning", "lina", "ideal"};
inline constexpr const char* kVariantLabels[kVariants] = {"baseline", "Lina w/o estimation",
                                                          "Lina w/o fine-tuning", "Lina", "ideal"};

}  // namespace moecomm::cli
