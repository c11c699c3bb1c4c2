#include "cli/train_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "support/expect_error.h"

namespace moecomm::cli {
namespace {

// A model file with one extra key on top of a small MoE.
std::string model_file(const std::string& name, const std::string& extra) {
  const std::string path = ::testing::TempDir() + name + ".json";
  std::ofstream(path) << R"({"name": ")" << name << R"(", "hidden": 64, "ffn_hidden": 128,
      "experts": 8, "top_k": 2, "layers": 2, "heads": 4, "seq_len": 32, "micro_batch": 2,
      "capacity_factor": null, "dtype_bytes": 4, "vocab_size": 64)"
                      << extra << "}";
  return path;
}

// The trainer builds multi-head attention and routed experts only: a model with other
// sublayers is refused naming the key, not trained as a different model.
TEST(TrainModel, RefusesTheSublayersItDoesNotBuild) {
  EXPECT_ERROR_HAS(preset_model("deepseek-v3"), "deepseek-v3.json: dense_layers",
                   "dense_layers = 3", "sim and plan model it");
  EXPECT_ERROR_HAS(preset_model("mixtral-8x7b"), "mixtral-8x7b.json: kv_heads", "kv_heads = 8",
                   "grouped-query attention");
  const std::string shared = model_file("shared", R"(, "shared_experts": 1)");
  EXPECT_ERROR_HAS(preset_model(shared), shared + ": shared_experts", "shared_experts = 1");
  const std::string dense = model_file("dense", R"(, "dense_layers": 1)");
  EXPECT_ERROR_HAS(preset_model(dense), dense + ": dense_layers", "dense_layers = 1");
  // kv_heads = heads is multi-head attention, which the trainer builds.
  const std::string mha = model_file("mha", R"(, "kv_heads": 4)");
  EXPECT_EQ(preset_model(mha).heads, 4);
  const std::string plain = model_file("plain", "");
  EXPECT_EQ(preset_model(plain).moe.experts, 8);
  EXPECT_EQ(preset_model(plain).moe.router_groups, 1);
  EXPECT_EQ(preset_model(plain).moe.router_group_top_k, 0);
  for (const auto& path : {shared, dense, mha, plain}) std::remove(path.c_str());
}

// Node-limited routing reaches the trainer's gates from the model file.
TEST(TrainModel, TakesTheModelsRouterGroups) {
  const std::string grouped =
      model_file("grouped", R"(, "router_groups": 4, "router_group_top_k": 1)");
  const nn::MoeTransformerConfig m = preset_model(grouped);
  EXPECT_EQ(m.moe.router_groups, 4);
  EXPECT_EQ(m.moe.router_group_top_k, 1);
  std::remove(grouped.c_str());
}

}  // namespace
}  // namespace moecomm::cli
