#pragma once
// The model file of DESIGN.md: one MoE transformer's shape and the training batch.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/parallel_config.h"

namespace moecomm::core {

// Upper bounds of the model file's sizes (and of the CLI's overrides).
inline constexpr int64_t kMaxHidden = 1'000'000;
inline constexpr int64_t kMaxExperts = 1'000'000;
inline constexpr int64_t kMaxLayers = 10'000;
inline constexpr int64_t kMaxSeqLen = 100'000'000;
inline constexpr int64_t kMaxMicroBatch = 1'000'000;
inline constexpr int64_t kMaxVocab = 1'000'000'000;
// Tokens an expert takes per routed token it would get with perfect balance: below 0.01 an
// expert's buffer holds almost nothing and the A2A sizes vanish (dropless is null).
inline constexpr Range kCapacityFactor = {0.01, 1000, "1% to 1000x the balanced load"};
// Bytes of one micro-batch's dispatch on one rank at most (seq_len x micro_batch x top_k x
// hidden x dtype_bytes, times a capacity factor above 1): each size is bounded alone, their
// product is not. 1 PB keeps every byte total of a step (ranks x layers x micro-batches x
// passes) far inside 64 bits.
inline constexpr double kMaxDispatchBytes = 1e15;

enum class FfnType { kGelu, kSwiglu };  // GPT FFN (2 GEMMs) or Mixtral FFN (3 GEMMs)

// Node-limited routing's shape (DeepSeek-V2 Sec. 2.2.2 device-limited routing, DeepSeek-V3
// Sec. 2.1.2 node-limited routing): the experts split into `groups` equal contiguous groups,
// each token choosing its top_k experts among its best `group_top_k` groups (0: every group).
// nullopt when the shape is valid, else the key at fault ("router_groups" or
// "router_group_top_k") and why; every place the keys enter (model file, nn's gates,
// moecomm.torch, the synthetic routing) applies this one rule and names its own source.
struct RouterGroupsProblem {
  std::string key;
  std::string message;
};
std::optional<RouterGroupsProblem> router_groups_problem(int64_t experts, int64_t top_k,
                                                         int64_t groups, int64_t group_top_k);
// Whether the limit excludes any expert (groups > 1 and 0 < group_top_k < groups): otherwise
// the routing is plain top-k.
inline bool limits_groups(int64_t groups, int64_t group_top_k) {
  return groups > 1 && group_top_k > 0 && group_top_k < groups;
}

struct ModelConfig {
  std::string name;
  std::string description;
  int64_t hidden = 0;
  int64_t ffn_hidden = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t seq_len = 0;
  int64_t micro_batch = 0;
  // Micro-batches of micro_batch sequences per step (gradient accumulation; the pipeline's M).
  int64_t micro_batches = 1;
  // Real models' other shapes (DeepSeek-V3, Mixtral): the first dense_layers of the layers
  // have a dense FFN of dense_ffn_hidden in place of the MoE; every MoE layer also runs
  // shared_experts experts of shared_expert_ffn_hidden on every token (DeepSeekMoE); attention
  // has kv_heads key/value heads (grouped-query attention; = heads: multi-head).
  int64_t dense_layers = 0;
  int64_t dense_ffn_hidden = 0;  // 0: ffn_hidden
  int64_t shared_experts = 0;
  int64_t shared_expert_ffn_hidden = 0;   // 0: ffn_hidden
  int64_t kv_heads = 0;                   // 0: heads
  std::optional<double> capacity_factor;  // nullopt: dropless
  // Node-limited routing (router_groups_problem above): expert e is in group
  // e / (experts / router_groups); with router_groups = the EP group's nodes a token reaches at
  // most router_group_top_k nodes (DeepSeek-V3: 8 groups, 4 per token).
  int router_groups = 1;
  int router_group_top_k = 0;  // 0: every group
  int64_t dtype_bytes = 2;     // activations, weights and gradients as they travel
  // The dtype the GEMMs run in (the device's peak for it prices compute); nullopt: implied by
  // dtype_bytes (default_compute_dtype).
  std::optional<Dtype> compute_dtype;
  FfnType ffn_type = FfnType::kGelu;
  int64_t vocab_size = 0;
  std::optional<ParallelSpec> parallel;  // the configuration the paper used, if given
  std::optional<std::string> cluster;    // the paper's testbed preset, if given
  std::string source;                    // the file it was read from (for error messages)

  Dtype compute() const { return compute_dtype.value_or(default_compute_dtype(dtype_bytes)); }
  int64_t tokens_per_micro_batch() const { return seq_len * micro_batch; }
  int64_t dense_ffn() const { return dense_ffn_hidden > 0 ? dense_ffn_hidden : ffn_hidden; }
  int64_t shared_ffn() const {
    return shared_expert_ffn_hidden > 0 ? shared_expert_ffn_hidden : ffn_hidden;
  }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // The groups a token may reach (router_groups when unlimited).
  int router_groups_per_token() const {
    return router_group_top_k > 0 ? router_group_top_k : router_groups;
  }
  int ffn_gemms() const { return ffn_type == FfnType::kSwiglu ? 3 : 2; }
  // Parameters of one expert and of all experts of one layer (weights only, no biases).
  double expert_params() const { return double(ffn_gemms()) * hidden * ffn_hidden; }
  // Attention's projections: Q and O h x h each, K and V h x (h kv_heads / heads) each (4 h^2
  // without grouped-query attention).
  double attention_params() const {
    return 2.0 * hidden * hidden + 2.0 * hidden * (double(hidden) * kv_head_count() / heads);
  }
  // Dense parameters of one MoE layer: attention and the gate (h x E).
  double dense_layer_params() const { return attention_params() + double(hidden) * experts; }
  // The FFN of one of the first dense_layers layers, and one MoE layer's shared experts.
  double dense_ffn_params() const { return double(ffn_gemms()) * hidden * dense_ffn(); }
  double shared_expert_params() const {
    return double(shared_experts) * ffn_gemms() * hidden * shared_ffn();
  }
  int64_t moe_layers() const { return layers - dense_layers; }
  // Every parameter of the model (embedding and LM head: 2 V h), and those one token uses
  // (top_k routed experts): the 6 N flops per token of MFU count the active ones.
  double total_params() const {
    return layers * attention_params() + double(dense_layers) * dense_ffn_params() +
           double(moe_layers()) * (double(hidden) * experts + shared_expert_params() +
                                   double(experts) * expert_params()) +
           2.0 * double(vocab_size) * hidden;
  }
  double active_params() const {
    return layers * attention_params() + double(dense_layers) * dense_ffn_params() +
           double(moe_layers()) * (double(hidden) * experts + shared_expert_params() +
                                   double(top_k) * expert_params()) +
           2.0 * double(vocab_size) * hidden;
  }
};

ModelConfig parse_model(const nlohmann::json& doc, const std::string& where);
// The products of the sizes must fit too (kMaxDispatchBytes): run again after an override of
// seq_len or micro_batch. Throws Error naming `where` and the keys to reduce.
void check_model_sizes(const ModelConfig& model, const std::string& where);
// The parallel sizes must also split the model: pp the layers (one each at least; unevenly
// is fine), cp the sequence, tp the heads, esp the expert FFN. Throws Error naming `where` and the
// key.
void check_parallel_fits_model(const ParallelConfig& parallel, const ModelConfig& model,
                               const std::string& where);
nlohmann::json model_to_json(const ModelConfig& model);

}  // namespace moecomm::core
