#pragma once
// MoNTA "MoE Memory consumption": per-device memory of MoE training = model states
// (Table 3) + activations (Table 4), MoNTA Eq. 1. Bytes throughout.
#include <cstdint>

namespace moecomm::plan {

// Table 3 inputs. dense_params (P1) and moe_params (P2) are whole-model counts: P2 counts
// every expert of every layer (callers add embeddings to P1 if they want them counted).
struct WeightMemoryInputs {
  double dense_params = 0;  // P1
  double moe_params = 0;    // P2
  int p = 1;                // pipeline-parallel degree
  int t = 1;                // tensor-parallel degree (also splits each expert)
  int e = 1;                // expert-parallel degree (splits the experts)
  int dense_dp = 1;         // data-parallel group of the dense part (ZeRO shards over it)
  int expert_dp = 1;        // data-parallel group of the experts (ZeRO shards over it)
  int zero = 0;             // ZeRO stage (sched::Strategy::zero): 0 (none), 1, 2 or 3
};

struct WeightMemory {
  double dense_bytes = 0;  // psi_1 of Eq. 1
  double moe_bytes = 0;    // psi_2 of Eq. 1
  double total() const { return dense_bytes + moe_bytes; }
};

// Bytes of model state per parameter held by a device, mixed-precision Adam, ZeRO stage
// over a data-parallel group of dp devices, by kind. Throws moecomm::Error on bad stage or
// dp < 1.
struct ModelStateBytes {
  double weight = 0;     // the fp16/bf16 weight
  double gradient = 0;   // its fp16/bf16 gradient
  double optimizer = 0;  // fp32 master weight, momentum and variance
  double total() const { return weight + gradient + optimizer; }
};
ModelStateBytes model_state_split(int zero, int dp);
double model_state_bytes_per_param(int zero, int dp);

// MoNTA Table 3. Throws moecomm::Error on negative counts, degrees < 1 or a bad stage.
WeightMemory weight_memory(const WeightMemoryInputs& in);

enum class Recompute { kNone, kSelective, kFull };

// Table 4 inputs (Table 2 notation). Activations are 2-byte (fp16/bf16), as in Korthikanti.
struct ActivationInputs {
  std::int64_t b = 1;           // micro-batch size
  std::int64_t s = 1;           // sequence length
  std::int64_t h = 1;           // hidden size
  std::int64_t a = 1;           // attention heads
  std::int64_t l = 1;           // transformer layers (of the whole model, see .cpp)
  std::int64_t ffn_hidden = 4;  // expert FFN hidden size (4h in Table 4)
  int k = 1;                    // experts per token (top-k)
  int t = 1;                    // tensor-parallel degree
  bool sp = false;              // sequence parallelism
  Recompute recompute = Recompute::kNone;
  // sched::Strategy::recompute_experts: the expert FFNs keep only their input and rebuild the
  // rest in the backward, so their inner activations (4 ffn_hidden / h per token copy) go.
  bool recompute_experts = false;
  std::int64_t kv_heads = 0;  // key/value heads (grouped-query attention); 0: a
  // Shared experts' FFN hidden size in all (DeepSeekMoE: shared_experts x their FFN size); every
  // token passes them once, beside its k routed copies. 0: none.
  std::int64_t shared_ffn_hidden = 0;
};

// MoNTA Table 4 / Eq. 2: activation bytes per device. Throws moecomm::Error on
// non-positive sizes.
double activation_memory(const ActivationInputs& in);

// MoNTA Eq. 1: Mem_total = psi_1 + psi_2 + Mem_act.
double total_memory(const WeightMemory& weights, double activation_bytes);

}  // namespace moecomm::plan
