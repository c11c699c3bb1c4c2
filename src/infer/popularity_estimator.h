#pragma once
// Lina Sec. 5.2, estimation: before layer i+1's gate runs, each token's path j(t) up to
// layer i selects the profiled Psi_{j(t)}^{i+1}; only its top-k experts are kept (they
// demand the most resources), and Eq. 1 averages their probabilities over the batch:
//
//   pop(e) = sum_t P_{j(t)}^{i+1}(e) [e in top-k of Psi_{j(t)}] / N_t,  n_e = N pop(e).
//
// Popularity here is a share of the layer's token-slots (it sums to at most 1, to less
// when the top-k cut drops mass); experts in no token's top-k get 0, "no estimate".
#include <cstdint>
#include <vector>

#include "infer/path_profile.h"
#include "place/routing.h"

namespace moecomm::infer {

// The paths of a batch: for every token of samples [first_sample, last_sample) of
// `routing` (one iteration's layers, as in a RoutingTrace), its top-1 experts at layers
// max(0, layer-path_length+1) .. layer, oldest first. Throws Error on a layer or sample
// range outside the routing or path_length < 1.
std::vector<std::vector<int32_t>> token_paths(const std::vector<place::LayerRouting>& routing,
                                              int layer, int path_length, int first_sample,
                                              int last_sample);

// Lina Eq. 1: the estimated popularity pop(e) of every expert at layer+1 for tokens with
// these paths (each ending at `layer`), from the top_k experts of each path's Psi. Throws
// Error on no paths, top_k outside [1, experts], or a path the profile rejects.
std::vector<double> estimate_popularity(const PathProfile& profile, int layer,
                                        const std::vector<std::vector<int32_t>>& paths, int top_k);

// The actual popularity once the gate has run: each expert's share of the token-slots of
// samples [first_sample, last_sample) of `routing`, and the counts it comes from.
std::vector<int64_t> expert_counts(const place::LayerRouting& routing, int experts,
                                   int first_sample, int last_sample);
std::vector<double> popularity_of_counts(const std::vector<int64_t>& counts);

// The n most popular experts, most popular first (ties: lower id); all of them when
// n >= experts. Lina Sec. 5.2 phase two and Sec. 7.3.2 compare these with n = 2k.
std::vector<int> top_experts(const std::vector<double>& popularity, int n);

// Whether the two top-n lists hold the same experts. Lina's "lists are identical" is read
// as the same set: the order inside the top-2k does not change which experts are placed.
bool same_top_experts(const std::vector<double>& estimated, const std::vector<double>& actual,
                      int n);

}  // namespace moecomm::infer
