#include "nn/moe_layer_factory.h"

#include "core/error.h"
#include "nn/capacity_order.h"
#include "nn/dropless_order.h"
#include "nn/expert_choice_gate.h"
#include "nn/gshard_gate.h"
#include "nn/sigmoid_gate.h"
#include "nn/xmoe_gate.h"

namespace moecomm::nn {

std::unique_ptr<Gate> make_gate(const MoeLayerSpec& s) {
  switch (s.gate) {
    case GateKind::kGShard:
      return std::make_unique<GShardGate>(
          GShardGateConfig{s.hidden, s.experts, s.top_k, true, s.gate_noise, s.seed});
    case GateKind::kSigmoid:
      return std::make_unique<SigmoidGate>(SigmoidGateConfig{s.hidden, s.experts, s.top_k, s.seed});
    case GateKind::kXMoE:
      return std::make_unique<XMoEGate>(XMoEGateConfig{s.hidden, s.experts, s.top_k, s.xmoe_dim,
                                                       s.xmoe_temperature, true, s.seed});
    case GateKind::kExpertChoice:
      return std::make_unique<ExpertChoiceGate>(
          ExpertChoiceGateConfig{s.hidden, s.experts, s.expert_choice_capacity, s.seed});
  }
  throw Error("moe layer", "unknown gate kind");
}

std::unique_ptr<MoeLayer> make_moe_layer(const MoeLayerSpec& s, TokenExchange& exchange) {
  if (s.capacity_factor < 0.0f) throw Error("moe layer", "capacity_factor must be >= 0");
  std::unique_ptr<Order> order;
  if (s.capacity_factor > 0.0f)
    order = std::make_unique<CapacityOrder>(s.capacity_factor);
  else
    order = std::make_unique<DroplessOrder>();
  const int ranks = exchange.ranks();
  if (s.experts <= 0 || ranks <= 0 || s.experts % ranks != 0)
    throw Error("moe layer", "experts must be a positive multiple of the EP size");
  const int local = s.experts / ranks, first = exchange.rank() * local;
  std::vector<std::unique_ptr<Expert>> experts;
  for (int l = 0; l < local; ++l)
    experts.push_back(make_expert(s.expert, s.hidden, s.ffn_hidden, expert_seed(s.seed, first + l),
                                  s.expert_shard.index, s.expert_shard.count));
  auto layer = std::make_unique<MoeLayer>(make_gate(s), std::move(order), std::move(experts),
                                          s.experts, exchange);
  layer->set_chunks(s.chunks_fwd, s.chunks_bwd);
  return layer;
}

}  // namespace moecomm::nn
