#pragma once
// HybridEP's experts on the wire (hybridep.txt Sec. IV-B), apart from when and over which
// communicator they travel: per MoE layer, this rank's own experts encoded for the domain
// AllGather (as they are, or with compression < 1 as the top-k residual against the shared
// expert, nn/sr_codec.h), the gathered bytes decoded into the copies, the copies' gradients
// laid out for the ReduceScatter that returns them to their owners, and the sum of the own
// experts that an AllReduce over the EP group turns into the next shared expert. The runtime
// moves these bytes as the schedule's ops (model_binding.h).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "nn/moe_layer.h"

namespace moecomm::rt {

struct HybridCodecConfig {
  double compression = 1.0;   // sched::Strategy::compression: 1 sends experts as they are
  bool shared_expert = true;  // residuals against the shared expert (w/ S) or zero (w/o S)
  int experts = 0;            // E, the layer's experts over the EP group (the shared average)
  // Error feedback (Strategy::sr_feedback): every copy holder keeps the residual it has
  // received so far, R; each step sends the top-k of w - (s + R) and adds it to R, so a copy
  // converges to its owner's expert instead of losing the residual's tail every step.
  bool feedback = false;
};

class HybridCodec {
 public:
  // layers: the model's MoE layers, each holding its domain's S L experts in member order, of
  // which local experts [owned_first, owned_first + owned) are this rank's, the member at
  // domain_rank of the domain's domain_size.
  HybridCodec(std::vector<nn::MoeLayer*> layers, int owned_first, int owned, int domain_size,
              int domain_rank, const HybridCodecConfig& config);
  ~HybridCodec();

  // The model of another micro-batch of the step (gradient accumulation), laid out as the
  // first's: decode writes its copies too, slot_grads sums its slots' gradients and take_grads
  // clears them (the experts travel once per step for all micro-batches).
  void add_replica(const std::vector<nn::MoeLayer*>& layers);
  int layers() const { return static_cast<int>(layers_.size()); }
  bool shares() const;  // whether a shared expert is kept (compressed, w/ S)
  // The shared expert from the last AllReduced sum (call before encoding a step's experts).
  void refresh_shared(int layer);
  // This rank's own experts of `layer`, encoded: its AllGather block (kept, encode_buffer).
  const std::vector<std::byte>& encode(int layer);
  const std::vector<std::byte>& encode_buffer(int layer) const;
  // The domain's AllGather output (every member's block, member order) into the copies.
  void decode(int layer, std::span<const std::byte> gathered);
  // Every slot's gradient, member-major, summed over the replicas: the ReduceScatter's input
  // (block m for member m).
  std::vector<float> slot_grads(int layer) const;
  // The ReduceScatter's output (the own experts' summed gradients) into the own experts; the
  // copies' gradients and every replica's are cleared (a copy's gradient lives one step).
  void take_grads(int layer, std::span<const float> mine);
  // The sum of this rank's own experts (flat): AllReduced over the EP group, E times the next
  // shared expert (set_shared_sum). Empty without a shared expert.
  std::vector<float> own_sum(int layer) const;
  void set_shared_sum(int layer, std::span<const float> summed);
  int64_t wire_bytes_per_expert() const;  // what one expert costs on the wire

 private:
  struct Layer;
  bool is_own(int slot) const { return slot >= owned_first_ && slot < owned_first_ + owned_; }
  std::span<const float> reference(Layer& layer, size_t slot, size_t tensor);
  void keep_residual(Layer& layer, size_t slot, size_t tensor, std::span<const float> copy);

  std::vector<std::unique_ptr<Layer>> layers_;
  int owned_first_, owned_, domain_size_, domain_rank_;
  HybridCodecConfig config_;
};

}  // namespace moecomm::rt
