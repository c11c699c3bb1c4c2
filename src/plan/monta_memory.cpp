#include "plan/monta_memory.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace moecomm::plan {
namespace {

void require_at_least_one(std::int64_t v, const char* where) {
  if (v < 1) throw Error(where, "must be at least 1, got " + std::to_string(v));
}

void require_non_negative(double v, const char* where) {
  if (!(v >= 0) || !std::isfinite(v))
    throw Error(where, "must be a finite number >= 0, got " + std::to_string(v));
}

}  // namespace

// ZeRO (Rajbhandari et al. 2020, Sec. 3.1), which MoNTA Table 3 follows: mixed-precision
// Adam keeps 2 B fp16 weight + 2 B fp16 gradient + 12 B fp32 state (master weight, momentum,
// variance) per parameter. Stage 1 shards the 12 B over dp, stage 2 also the gradient,
// stage 3 also the weight.
ModelStateBytes model_state_split(int zero, int dp) {
  require_at_least_one(dp, "WeightMemoryInputs.dp");
  switch (zero) {
    case 0:
      return {2.0, 2.0, 12.0};
    case 1:
      return {2.0, 2.0, 12.0 / dp};
    case 2:
      return {2.0, 2.0 / dp, 12.0 / dp};
    case 3:
      return {2.0 / dp, 2.0 / dp, 12.0 / dp};
    default:
      throw Error("WeightMemoryInputs.zero", "must be 0, 1, 2 or 3, got " + std::to_string(zero));
  }
}

double model_state_bytes_per_param(int zero, int dp) {
  return model_state_split(zero, dp).total();
}

// MoNTA Table 3. The extracted table is garbled: its ZeRO rows lost the model-parallel
// factor and write p for the ZeRO (data-parallel) degree. Intended model: a device holds
// P1 / (p t) dense and P2 / (p t e) expert parameters (pipeline splits layers, TP splits
// matrices, EP splits the experts - MoNTA Fig. 12: each card stores 1/t of its expert), and
// each part's states are sharded by ZeRO over that part's own data-parallel group. The
// baseline row's 16 P2 / (p t) also lacks the 1/e: P2 counts every expert, so a device
// holds 1/e of them (as Fig. 12 draws it).
WeightMemory weight_memory(const WeightMemoryInputs& in) {
  require_non_negative(in.dense_params, "WeightMemoryInputs.dense_params");
  require_non_negative(in.moe_params, "WeightMemoryInputs.moe_params");
  require_at_least_one(in.p, "WeightMemoryInputs.p");
  require_at_least_one(in.t, "WeightMemoryInputs.t");
  require_at_least_one(in.e, "WeightMemoryInputs.e");
  require_at_least_one(in.dense_dp, "WeightMemoryInputs.dense_dp");
  require_at_least_one(in.expert_dp, "WeightMemoryInputs.expert_dp");
  const double dense_per_device = in.dense_params / (double(in.p) * in.t);
  const double moe_per_device = in.moe_params / (double(in.p) * in.t * in.e);
  return {dense_per_device * model_state_bytes_per_param(in.zero, in.dense_dp),
          moe_per_device * model_state_bytes_per_param(in.zero, in.expert_dp)};
}

// MoNTA Table 4. The extracted table is garbled; this is the intended model, built from
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// Sec. 4) with MoNTA Eq. 2's MoE split 13 + 21k + 5as/h. Bytes per token and layer, in units
// of h:
//  - attention block, 13: replicated across TP 5 (LayerNorm input 2, QKV input 2, dropout
//    mask 1), split by TP 8 (Q and K 4, V 2, output-projection input 2);
//  - each of the k expert copies of a token, 21 when ffn_hidden = 4h: replicated 5
//    (LayerNorm input 2, FFN input 2, dropout mask 1), split by TP 4 ffn_hidden / h (GeLU
//    input and output, 2 B each);
//  - attention scores, 5as/h (softmax output 2, its dropout mask 1, dropout output 2, per
//    head and key), split by TP over heads; dropped by selective recomputation.
// Grouped-query attention (kv_heads < a) shrinks K and V: the split 8 becomes Q 2 + K 2g +
// V 2g + output-projection input 2, g = kv_heads / a. Shared experts (shared_ffn_hidden) add
// their split 4 f_s / h once per token; their input is the routed experts' (counted there).
// Recomputing the experts (recompute_experts) drops each copy's split 4 ffn_hidden / h: the
// FFN input it recomputes from stays, as do the LayerNorm input and dropout mask outside the
// FFN; the one expert being recomputed holds its activations only during its own backward.
// SP also splits the replicated parts by t. Full recomputation keeps only each layer's 2 B
// input (split by t under SP). Expert parallelism does not appear: with balanced routing
// each device's experts receive on average b s k token copies whatever e is. Pipeline
// parallelism does not appear either: under 1F1B the first stage holds p micro-batches of
// l/p layers, i.e. l layers' worth (Korthikanti Sec. 4.2.3).
double activation_memory(const ActivationInputs& in) {
  require_at_least_one(in.b, "ActivationInputs.b");
  require_at_least_one(in.s, "ActivationInputs.s");
  require_at_least_one(in.h, "ActivationInputs.h");
  require_at_least_one(in.a, "ActivationInputs.a");
  require_at_least_one(in.l, "ActivationInputs.l");
  require_at_least_one(in.ffn_hidden, "ActivationInputs.ffn_hidden");
  require_at_least_one(in.k, "ActivationInputs.k");
  require_at_least_one(in.t, "ActivationInputs.t");
  const double t = in.t;
  const double bshl = double(in.b) * in.s * in.h * in.l;
  if (in.recompute == Recompute::kFull) return bshl * 2.0 / (in.sp ? t : 1.0);
  const double ffn = in.recompute_experts ? 0.0 : 4.0 * double(in.ffn_hidden) / in.h;  // 16: 4h
  const double g = in.kv_heads > 0 ? double(in.kv_heads) / in.a : 1.0;
  const double split_attention = 4.0 + 4.0 * g;  // 8 with multi-head attention
  const double attention = in.sp ? (5.0 + split_attention) / t : 5.0 + split_attention / t;
  const double expert = in.sp ? (5.0 + ffn) / t : 5.0 + ffn / t;
  const double shared = 4.0 * double(in.shared_ffn_hidden) / in.h / t;
  const double scores =
      in.recompute == Recompute::kSelective ? 0.0 : 5.0 * in.a * in.s / (double(in.h) * t);
  return bshl * (attention + in.k * expert + shared + scores);
}

double total_memory(const WeightMemory& weights, double activation_bytes) {
  require_non_negative(activation_bytes, "total_memory.activation_bytes");
  return weights.total() + activation_bytes;
}

}  // namespace moecomm::plan
