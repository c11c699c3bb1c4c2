#pragma once
// The small setup the schedule builders' tests share: 2 nodes x 4 GPUs and a GPT-style MoE
// with h 64, f 128, 8 experts top-2, 2 blocks, 4 heads, 2 sequences of 32 tokens, bf16.
#include "core/cluster.h"
#include "core/model_config.h"

namespace moecomm::testing {

inline core::Cluster tiny_cluster() {
  core::Cluster c;
  c.name = "test-2x4";
  c.levels = {{"node", 2, 25e9, 10e-6}, {"gpu", 4, 200e9, 3e-6}};
  c.device = {312e12, 80e9, 1.6e12};
  return c;
}

inline core::ModelConfig tiny_moe_model() {
  core::ModelConfig m;
  m.name = "tiny-moe";
  m.hidden = 64;
  m.ffn_hidden = 128;
  m.experts = 8;
  m.top_k = 2;
  m.layers = 2;
  m.heads = 4;
  m.seq_len = 32;
  m.micro_batch = 2;
  m.dtype_bytes = 2;
  return m;
}

}  // namespace moecomm::testing
