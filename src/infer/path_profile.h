#pragma once
// Lina Sec. 5.2, profiling: tokens are grouped by the sample path of experts they chose at
// layers i-l+1..i, and for each path j the distribution Psi_j^{i+1} of the experts they
// choose at layer i+1 is recorded (one table per layer, as the unordered_maps of Sec. 6.2).
//
// A path is made of each token's top-1 choice (the first expert a trace lists; the gates
// write them best first). Lina runs inference with k = 1 (Sec. 7.3.2), where the top-1
// choice is the whole path; for k > 1 it stays the most informative feature of the token and
// keeps the number of paths at E^l instead of C(E, k)^l, so the tables stay populated.
// Psi_j^{i+1}(e) counts every one of the k choices at layer i+1: it is e's share of the
// layer's token-slots (it sums to 1), the unit Eq. 1 turns into devices.
//
// Unseen paths: the profile keeps every length 1..l, and a lookup falls back to the
// longest suffix of the path (its most recent experts) seen at least min_tokens times,
// and to layer i+1's marginal distribution when not even the last expert was seen.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "place/routing_trace.h"

namespace moecomm::infer {

struct ExpertShare {
  int expert = 0;
  double share = 0;  // of the layer's token-slots, in [0, 1]
};

// A distribution over experts, sparse, sorted by share descending then expert id, so its
// top-k experts are its first k entries.
using Distribution = std::vector<ExpertShare>;

class PathProfile {
 public:
  // Profiles every iteration, sample and token of `trace`. Throws Error if path_length is
  // outside [1, layers - 1], the trace has fewer than 2 layers, or min_tokens < 1.
  PathProfile(const place::RoutingTrace& trace, int path_length, int64_t min_tokens = 1);

  int experts() const { return experts_; }
  int top_k() const { return top_k_; }
  int layers() const { return layers_; }
  int path_length() const { return path_length_; }

  struct Lookup {
    const Distribution* next = nullptr;  // Psi^{layer+1} of the suffix used
    int matched_length = 0;              // experts of the path used; 0: the marginal
  };
  // path: the token's top-1 experts at layers layer-|path|+1 .. layer, oldest first, at
  // most path_length of them (fewer near the first layer). Throws Error on a layer outside
  // [0, layers - 2], an empty or too long path, or an expert id outside [0, experts).
  Lookup lookup(int layer, std::span<const int32_t> path) const;
  const Distribution& next_distribution(int layer, std::span<const int32_t> path) const {
    return *lookup(layer, path).next;
  }
  // Share of each expert among the layer's token-slots over the whole trace.
  const Distribution& marginal(int layer) const;

 private:
  struct PathHash {
    size_t operator()(const std::vector<int32_t>& path) const;
  };
  int32_t checked_id(int32_t e) const;
  void check_shape(const place::RoutingTrace& trace,
                   const std::vector<place::LayerRouting>& layers) const;
  using Table = std::unordered_map<std::vector<int32_t>, Distribution, PathHash>;

  int experts_ = 0, top_k_ = 0, layers_ = 0, path_length_ = 0;
  std::vector<std::vector<Table>> tables_;  // [layer i][length - 1]: path -> Psi^{i+1}
  std::vector<Distribution> marginals_;     // [layer]
};

}  // namespace moecomm::infer
