#pragma once
// The models the commands that train for real (train, bench) build: `tiny`, or a preset or
// JSON model file; and the memory check that keeps them to what a CPU rank can hold.
#include <string>

#include "nn/moe_transformer.h"
#include "rt/train_loop.h"

namespace moecomm::cli {

// tiny: vocab 64, hidden 64, 4 heads, 2 layers, FFN 128, 2 experts per rank, top-2.
nn::MoeTransformerConfig tiny_model(int world);
// A preset name or JSON file: its hidden, ffn_hidden, heads, layers, experts, top_k,
// router_groups, router_group_top_k, seq_len, vocab_size and ffn_type. A model with dense_layers,
// shared_experts or kv_heads below heads is refused (Error naming the key): the trainer builds none
// of them.
nn::MoeTransformerConfig preset_model(const std::string& name);
// "tiny" or a preset/file.
nn::MoeTransformerConfig train_model(const std::string& name, int world);

// --batch and --seq-len, else the model's micro_batch (4 for tiny) and seq_len; the
// positional table grows to fit.
void apply_batch_shape(rt::TrainConfig& c, const std::string& model, int batch, int seq_len);

// --parallel's tp=T,ep=N (cp = 1; esp = tp; dp = world / (tp pp)) into c.tp and c.ep, and with
// `pipeline` pp=P into c.pp (without it pp must be 1).
void apply_train_parallel(rt::TrainConfig& c, const std::string& text, int world,
                          bool pipeline = false);

// Parameters with their gradients and Adam's two moments (16 bytes each), and 8 bytes each
// per further micro-batch, must fit in 4 GB per rank; throws Error naming --model otherwise.
void check_memory(const rt::TrainConfig& c, int world);

}  // namespace moecomm::cli
