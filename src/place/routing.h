#pragma once
// Token routing of one MoE layer and its per-sample counts (NetMoE Eq. 2).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moecomm::place {

// route[i][t][k]: the k-th expert chosen for token t of sample i (NetMoE's route in
// N^{I x L x K}), stored flat. Shapes are fixed at construction; ids are checked against
// `experts` by whoever builds it from user input (see routing_trace.h).
class LayerRouting {
 public:
  LayerRouting() = default;
  LayerRouting(int samples, int tokens, int top_k);

  int samples() const { return samples_; }
  int tokens() const { return tokens_; }
  int top_k() const { return top_k_; }
  int32_t& at(int sample, int token, int k) { return ids_[index(sample, token, k)]; }
  int32_t at(int sample, int token, int k) const { return ids_[index(sample, token, k)]; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  size_t index(int sample, int token, int k) const {
    return (static_cast<size_t>(sample) * tokens_ + token) * top_k_ + k;
  }
  int samples_ = 0, tokens_ = 0, top_k_ = 0;
  std::vector<int32_t> ids_;
};

// num[i][e]: tokens sample i sends to expert e, row-major I x E.
struct RoutingCounts {
  int samples = 0;
  int experts = 0;
  std::vector<int64_t> num;

  RoutingCounts() = default;
  RoutingCounts(int samples_, int experts_)
      : samples(samples_), experts(experts_), num(static_cast<size_t>(samples_) * experts_, 0) {}
  int64_t& at(int i, int e) { return num[static_cast<size_t>(i) * experts + e]; }
  int64_t at(int i, int e) const { return num[static_cast<size_t>(i) * experts + e]; }
  int64_t total() const;
};

// NetMoE Eq. 2: num_{i,e} = sum_{l,k} 1[route_{i,l,k} = e]. Throws Error on an id outside
// [0, experts).
RoutingCounts count_routing(const LayerRouting& routing, int experts);

// Element-wise a + b (the gather(l) + scatter(l+1) counts of Eq. 10); shapes must match.
RoutingCounts add_counts(const RoutingCounts& a, const RoutingCounts& b);

}  // namespace moecomm::place
