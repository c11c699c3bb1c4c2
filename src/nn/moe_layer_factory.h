#pragma once
// Builds gates and MoE layers from a small spec, with weights that depend only on the seed
// and the global expert index, so that a layer on any EP rank holds the same experts as the
// single-process layer (nn/moe_layer.h).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nn/expert.h"
#include "nn/gate.h"
#include "nn/moe_layer.h"

namespace moecomm::nn {

enum class GateKind { kGShard, kSigmoid, kXMoE, kExpertChoice };

// The gates' names, one spelling everywhere (`moecomm train --gate`, moecomm.torch's gate=):
// gshard, sigmoid, xmoe, expert-choice.
std::string_view to_string(GateKind g);
const std::vector<std::string>& gate_kind_names();
// Throws Error at `where` for any other name, with a "did you mean" for a near miss
// ("expert_choice" -> 'expert-choice').
GateKind parse_gate_kind(std::string_view name, const std::string& where);

struct MoeLayerSpec {
  int hidden = 0;
  int ffn_hidden = 0;
  int experts = 0;
  int top_k = 2;  // token-choice gates
  // Node-limited routing of the token-choice gates (core::ModelConfig's keys of these names):
  // experts in router_groups groups, a token choosing among its best router_group_top_k
  // (0: every group). The expert-choice gate has no per-token choice: it refuses a limit.
  int router_groups = 1;
  int router_group_top_k = 0;
  GateKind gate = GateKind::kGShard;
  core::FfnType ffn_type = core::FfnType::kGelu;
  float capacity_factor = 0.0f;         // > 0: capacity layout; 0: dropless
  float expert_choice_capacity = 1.0f;  // c of the expert-choice gate
  int xmoe_dim = 8;
  float xmoe_temperature = 0.07f;
  float gate_noise = 0.0f;  // GShard gate only
  uint64_t seed = 0;
  // Expert sharding (ESP): this rank holds shard expert_shard.index of each of its experts
  // (make_expert); the exchange sums the partial outputs over the ESP group.
  FfnShard expert_shard{};
  int chunks_fwd = 1, chunks_bwd = 1;  // MoeLayer::set_chunks
  bool recompute_experts = false;      // MoeLayer::set_recompute_experts
  // < 0 (default): independent experts, expert e seeded by expert_seed(seed, e).
  // >= 0: "upcycled" experts that share structure (sparse upcycling, Komatsuzaki et al. 2022;
  // the redundancy among experts of HybridEP Fig. 9a): every parameter of expert e is
  // base + expert_spread * own_e, base the expert seeded by upcycle_base_seed(seed) (the same
  // for all experts and ranks) and own_e the independent expert above. 0: identical experts.
  float expert_spread = -1.0f;
};

// The seed of the upcycled experts' common base: expert_seed(seed, -1), whose (e + 1) = 0 no
// real expert index has.
uint64_t upcycle_base_seed(uint64_t seed);

// Global expert e of the layer as make_moe_layer builds it (shard spec.expert_shard, with
// expert_spread applied), the same on every rank.
std::unique_ptr<Expert> make_layer_expert(const MoeLayerSpec& spec, int global_expert);

std::unique_ptr<Gate> make_gate(const MoeLayerSpec& spec);

// The layer of the exchange's rank: experts [rank L, (rank + 1) L).
std::unique_ptr<MoeLayer> make_moe_layer(const MoeLayerSpec& spec, TokenExchange& exchange);

}  // namespace moecomm::nn
