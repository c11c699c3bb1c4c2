#pragma once
// Per-rank quantities of one transformer block (attention, gate, experts, shared experts; the
// first dense_layers blocks: attention and a dense FFN) for a model and a parallel
// configuration: what the builders put on ops. Balanced routing is assumed (every
// expert gets the same share of the routed tokens); NetMoE's matrices override the A2A.
// The one computation of these quantities: the plan's estimates read them too
// (plan/moe_workload.h adds where the groups sit on the topology). Bytes and flops.
#include <cstdint>

#include "core/model_config.h"
#include "core/parallel_config.h"

namespace moecomm::sched {

struct LayerWorkload {
  // t = b s / cp: tokens of one micro-batch on one rank (the TP group shares them).
  double tokens = 0;
  // t k cf (cf = 1 when dropless): rows of the dispatch buffer (capacity layout [E, C, M]).
  double routed_tokens = 0;
  double token_bytes = 0;  // h x dtype: one token row
  // routed x token_bytes: bytes one rank dispatches in one A2A with replicated TP dispatch
  // (MoNTA Eq. 3, I = b s h BPE, times k and cf); its own share stays on the rank.
  double a2a_bytes = 0;
  // t x h x dtype: the TP AllReduce after attention (Megatron) and a pipeline-stage hand-off.
  double activation_bytes = 0;
  // Context parallelism (cp > 1, else 0): the attention's K and V of the whole sequence for
  // the rank's heads, 2 cp t h_kv / tp x dtype with h_kv = h kv_heads / heads (grouped-query
  // attention shares a K/V head among heads / kv_heads query heads): the output of the
  // forward's AllGather over the CP group (MoNTA Fig. 11 after Llama 3's all-gather CP) and
  // the input of the backward's ReduceScatter of their gradients.
  double cp_kv_bytes = 0;
  // Forward flops on one rank; backward is twice (input and weight gradients).
  // Attention: projections 2 t x attention_params (Q and O h x h, K and V h x h_kv: 8 t h^2
  // without GQA), scores and context 4 t s h (every query head); / tp.
  double attention_flops = 0;
  // Gate: t x h by h x E GEMM, 2 t h E (replicated in the TP group).
  double gate_flops = 0;
  // Experts: 2 x ffn_gemms x rows x h x ffn_hidden / esp. Each ESP member holds ffn_hidden / esp
  // of its experts and runs it on rows = routed x esp / gcd(tp, esp): what its EP A2A delivers
  // (balanced routing) plus what the ESP AllGather adds. tp = 1: routed x esp (the ESP group's
  // esp token sets gathered); tp = esp dropped (MoNTA O1, FSMoE): esp x routed / tp = routed;
  // esp dividing tp, replicated: routed (TP copies arrive as sent, no AllGather); tp = 2,
  // esp = 4 (FSMoE's model; no schedule): the group's two token sets, 2 x routed.
  double expert_flops = 0;
  // A dense block's FFN (Megatron's MLP, column- then row-parallel over TP): 2 t h f_dense x
  // ffn_gemms / tp. An MoE block's shared experts, run on every token as one such MLP each
  // (DeepSeekMoE): 2 t h f_shared x ffn_gemms x shared_experts / tp.
  double dense_ffn_flops = 0;
  double shared_expert_flops = 0;
  // Gradients of one MoE block's dense part on one rank, AllReduced over dp x cp: attention
  // attention_params / tp and the shared experts / tp (sharded) plus the gate h E (replicated
  // in TP), times dtype.
  double dense_grad_bytes = 0;
  // The same for one of the first dense_layers blocks: attention and the dense FFN, / tp.
  double dense_layer_grad_bytes = 0;
  int64_t dense_layers = 0;  // blocks [0, dense_layers) of the model are dense
  // Whether global block `layer` has a dense FFN (no gate, no token path, no experts).
  bool dense_block(int layer) const { return layer < dense_layers; }
  // Block `layer`'s dense gradient bytes (dense_layer_grad_bytes or dense_grad_bytes).
  double block_dense_grad_bytes(int layer) const {
    return dense_block(layer) ? dense_layer_grad_bytes : dense_grad_bytes;
  }
  // One rank's expert shards: (E / ep) experts x ffn_gemms h f / esp parameters x dtype.
  double expert_param_bytes = 0;
  double expert_grad_bytes = 0;  // the same count, AllReduced over edp
};

LayerWorkload layer_workload(const core::ModelConfig& model, const core::ParallelConfig& parallel);

}  // namespace moecomm::sched
