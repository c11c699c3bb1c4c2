#include "cli/train_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel_config.h"
#include "core/presets.h"

namespace moecomm::cli {

namespace {

constexpr double kMaxTrainGB = 4;

// The trainer's blocks are multi-head attention and an MoE of routed experts only; a model
// with other sublayers is refused, not trained as a different model.
void check_trainable(const core::ModelConfig& c) {
  const auto refuse = [&](const char* key, int64_t value, const char* what) {
    throw Error(c.source + ": " + key,
                std::string(key) + " = " + std::to_string(value) + " (" + what +
                    "): the trainer (moecomm train, bench) builds every block as multi-head "
                    "attention and routed experts only; sim and plan model it");
  };
  if (c.dense_layers > 0) refuse("dense_layers", c.dense_layers, "dense FFN blocks");
  if (c.shared_experts > 0) refuse("shared_experts", c.shared_experts, "shared experts");
  if (c.kv_heads > 0 && c.kv_heads != c.heads)
    refuse("kv_heads", c.kv_heads, "grouped-query attention");
}

}  // namespace

nn::MoeTransformerConfig tiny_model(int world) {
  nn::MoeTransformerConfig m;
  m.vocab = 64;
  m.max_seq = 64;
  m.hidden = 64;
  m.heads = 4;
  m.layers = 2;
  m.moe.ffn_hidden = 128;
  m.moe.experts = 2 * world;
  m.moe.top_k = 2;
  return m;
}

nn::MoeTransformerConfig preset_model(const std::string& name) {
  const core::ModelConfig c = core::load_model(name);
  check_trainable(c);
  nn::MoeTransformerConfig m;
  m.vocab = static_cast<int>(c.vocab_size > 0 ? c.vocab_size : 64);
  m.max_seq = static_cast<int>(c.seq_len);
  m.hidden = static_cast<int>(c.hidden);
  m.heads = static_cast<int>(c.heads);
  m.layers = static_cast<int>(c.layers);
  m.moe.ffn_hidden = static_cast<int>(c.ffn_hidden);
  m.moe.experts = static_cast<int>(c.experts);
  m.moe.top_k = static_cast<int>(c.top_k);
  m.moe.router_groups = c.router_groups;
  m.moe.router_group_top_k = c.router_group_top_k;
  m.moe.ffn_type = c.ffn_type;
  return m;
}

nn::MoeTransformerConfig train_model(const std::string& name, int world) {
  return name == "tiny" ? tiny_model(world) : preset_model(name);
}

void check_memory(const rt::TrainConfig& c, int world) {
  const auto& m = c.model;
  const double h = m.hidden, layers = m.layers, experts = m.moe.experts;
  const double tp = std::max(c.tp, 1), ep = c.ep > 0 ? c.ep : world / tp;
  const double gemms = m.moe.ffn_type == core::FfnType::kSwiglu ? 3 : 2;
  const double dense = 2.0 * m.vocab * h + m.max_seq * h + layers * (4 * h * h + h * experts);
  const double local_experts = layers * experts / ep * gemms * h * m.moe.ffn_hidden / tp;
  // Adam's weights, gradients and two moments; each further micro-batch's model its weights
  // and gradients (rt/scheduled_train.cpp).
  const double gb =
      (16.0 + 8.0 * (std::max(c.micro_batches, 1) - 1)) * (dense + local_experts) / 1e9;
  if (gb > kMaxTrainGB)
    throw Error("--model", "needs about " + std::to_string(static_cast<int>(gb)) +
                               " GB per rank for parameters and optimizer state (limit " +
                               std::to_string(static_cast<int>(kMaxTrainGB)) +
                               "): moecomm train runs small models");
}

void apply_batch_shape(rt::TrainConfig& c, const std::string& model, int batch, int seq_len) {
  c.batch = batch > 0
                ? batch
                : (model == "tiny" ? 4 : std::max<int>(1, core::load_model(model).micro_batch));
  c.seq_len = seq_len > 0 ? seq_len : c.model.max_seq;
  c.model.max_seq = std::max(c.model.max_seq, c.seq_len);
}

void apply_train_parallel(rt::TrainConfig& c, const std::string& text, int world, bool pipeline) {
  if (text.empty()) return;
  const core::ParallelSpec spec = core::parse_parallel_spec(text, "--parallel");
  for (const auto& [key, value] : {std::pair{"cp", spec.cp}, {"pp", spec.pp}})
    if (value && *value != 1 && !(pipeline && std::string(key) == "pp"))
      throw Error("--parallel", std::string(key) + "=" + std::to_string(*value) + ": runs " +
                                    (pipeline ? "tensor, expert, pipeline" : "tensor, expert") +
                                    " and data parallelism only");
  if (spec.pp) {
    if (*spec.pp < 1 || world % *spec.pp != 0)
      throw Error("--parallel", "pp=" + std::to_string(*spec.pp) + " must divide the " +
                                    std::to_string(world) + " ranks");
    c.pp = *spec.pp;
  }
  if (spec.tp) c.tp = *spec.tp;
  if (spec.esp && *spec.esp != c.tp)
    throw Error("--parallel", "esp=" + std::to_string(*spec.esp) +
                                  ": train shards the experts over the TP group (esp = tp = " +
                                  std::to_string(c.tp) + ")");
  if (spec.ep) c.ep = *spec.ep;
  if (spec.dp && *spec.dp * c.tp * c.pp != world) {
    throw Error("--parallel", "dp=" + std::to_string(*spec.dp) + " must be the " +
                                  std::to_string(world) + " ranks / tp " + std::to_string(c.tp) +
                                  " / pp " + std::to_string(c.pp));
  }
}

}  // namespace moecomm::cli
