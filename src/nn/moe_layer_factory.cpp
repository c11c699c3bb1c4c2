#include "nn/moe_layer_factory.h"

#include <vector>

#include "core/error.h"
#include "core/suggest.h"
#include "nn/capacity_order.h"
#include "nn/dropless_order.h"
#include "nn/expert_choice_gate.h"
#include "nn/gshard_gate.h"
#include "nn/sigmoid_gate.h"
#include "nn/xmoe_gate.h"

namespace moecomm::nn {

namespace {
constexpr GateKind kGateKinds[] = {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE,
                                   GateKind::kExpertChoice};
}  // namespace

std::string_view to_string(GateKind g) {
  switch (g) {
    case GateKind::kGShard:
      return "gshard";
    case GateKind::kSigmoid:
      return "sigmoid";
    case GateKind::kXMoE:
      return "xmoe";
    case GateKind::kExpertChoice:
      return "expert-choice";
  }
  return "?";
}

const std::vector<std::string>& gate_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (GateKind g : kGateKinds) v.emplace_back(to_string(g));
    return v;
  }();
  return names;
}

GateKind parse_gate_kind(std::string_view name, const std::string& where) {
  for (GateKind g : kGateKinds)
    if (to_string(g) == name) return g;
  std::string list;
  for (const std::string& n : gate_kind_names()) list += (list.empty() ? "" : ", ") + n;
  throw Error(where, "must be one of " + list + ", got '" + std::string(name) + "'" +
                         core::did_you_mean(name, gate_kind_names()));
}

std::unique_ptr<Gate> make_gate(const MoeLayerSpec& s) {
  const int groups = s.router_groups, group_top_k = s.router_group_top_k;
  switch (s.gate) {
    case GateKind::kGShard:
      return std::make_unique<GShardGate>(GShardGateConfig{
          s.hidden, s.experts, s.top_k, true, s.gate_noise, s.seed, groups, group_top_k});
    case GateKind::kSigmoid:
      return std::make_unique<SigmoidGate>(
          SigmoidGateConfig{s.hidden, s.experts, s.top_k, s.seed, groups, group_top_k});
    case GateKind::kXMoE:
      return std::make_unique<XMoEGate>(XMoEGateConfig{s.hidden, s.experts, s.top_k, s.xmoe_dim,
                                                       s.xmoe_temperature, true, s.seed, groups,
                                                       group_top_k});
    case GateKind::kExpertChoice:
      if (core::limits_groups(groups, group_top_k))
        throw Error("expert-choice gate: router_group_top_k",
                    "node-limited routing limits each token's choice; the expert-choice gate "
                    "lets experts choose tokens (use a token-choice gate: gshard, sigmoid, "
                    "xmoe)");
      return std::make_unique<ExpertChoiceGate>(
          ExpertChoiceGateConfig{s.hidden, s.experts, s.expert_choice_capacity, s.seed});
  }
  throw Error("moe layer", "unknown gate kind");
}

uint64_t upcycle_base_seed(uint64_t seed) {
  return expert_seed(seed, -1);
}

std::unique_ptr<Expert> make_layer_expert(const MoeLayerSpec& s, int global_expert) {
  const auto build = [&](uint64_t seed) {
    return make_expert(s.ffn_type, s.hidden, s.ffn_hidden, seed, s.expert_shard.index,
                       s.expert_shard.count);
  };
  std::unique_ptr<Expert> own = build(expert_seed(s.seed, global_expert));
  if (s.expert_spread < 0.0f) return own;
  // Upcycled: base + spread * own; both are sliced by the same shard.
  std::unique_ptr<Expert> base = build(upcycle_base_seed(s.seed));
  std::vector<Param> to = own->params(), from = base->params();
  for (size_t p = 0; p < to.size(); ++p) {
    Tensor& w = *to[p].value;
    for (int64_t i = 0; i < w.size(); ++i) w[i] = (*from[p].value)[i] + s.expert_spread * w[i];
  }
  return own;
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
  for (int l = 0; l < local; ++l) experts.push_back(make_layer_expert(s, first + l));
  auto layer = std::make_unique<MoeLayer>(make_gate(s), std::move(order), std::move(experts),
                                          s.experts, exchange);
  layer->set_chunks(s.chunks_fwd, s.chunks_bwd);
  layer->set_recompute_experts(s.recompute_experts);
  return layer;
}

}  // namespace moecomm::nn
