#include "sched/layer_workload.h"

#include <numeric>

namespace moecomm::sched {

LayerWorkload layer_workload(const core::ModelConfig& m, const core::ParallelConfig& p) {
  LayerWorkload w;
  const double h = double(m.hidden), f = double(m.ffn_hidden), e = double(m.experts);
  w.tokens = double(m.micro_batch) * m.seq_len / p.cp;
  w.routed_tokens = w.tokens * m.top_k * m.capacity_factor.value_or(1.0);
  w.token_bytes = h * m.dtype_bytes;
  w.a2a_bytes = w.routed_tokens * w.token_bytes;
  w.activation_bytes = w.tokens * w.token_bytes;
  // K/V width: h / heads per head times kv_heads (heads divides h, kv_heads divides heads).
  const double kv_width = double(m.hidden / m.heads * m.kv_head_count());
  if (p.cp > 1) w.cp_kv_bytes = 2.0 * p.cp * w.tokens * kv_width / p.tp * m.dtype_bytes;
  w.attention_flops = w.tokens * (2.0 * m.attention_params() + 4.0 * double(m.seq_len) * h) / p.tp;
  w.gate_flops = 2.0 * w.tokens * h * e;
  const double rows = w.routed_tokens * p.esp / std::gcd(p.tp, p.esp);
  w.expert_flops = 2.0 * m.ffn_gemms() * rows * h * f / p.esp;
  w.dense_ffn_flops = 2.0 * w.tokens * m.dense_ffn_params() / p.tp;
  w.shared_expert_flops = 2.0 * w.tokens * m.shared_expert_params() / p.tp;
  w.dense_grad_bytes =
      ((m.attention_params() + m.shared_expert_params()) / p.tp + h * e) * m.dtype_bytes;
  w.dense_layer_grad_bytes = (m.attention_params() + m.dense_ffn_params()) / p.tp * m.dtype_bytes;
  w.dense_layers = m.dense_layers;
  w.expert_param_bytes = e / p.ep * m.expert_params() / p.esp * m.dtype_bytes;
  w.expert_grad_bytes = w.expert_param_bytes;
  return w;
}

}  // namespace moecomm::sched
