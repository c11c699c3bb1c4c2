#include "core/model_config.h"

#include <gtest/gtest.h>

#include "core/ffn_type_names.h"
#include "support/expect_error.h"

namespace moecomm::core {
namespace {

using nlohmann::json;

json good() {
  return json::parse(R"({"name": "m", "hidden": 1024, "ffn_hidden": 4096, "experts": 16,
    "top_k": 2, "layers": 12, "heads": 16, "seq_len": 1024, "micro_batch": 4,
    "capacity_factor": null, "dtype_bytes": 2})");
}

TEST(ModelConfig, ParsesAndDefaults) {
  ModelConfig m = parse_model(good(), "m.json");
  EXPECT_EQ(m.hidden, 1024);
  EXPECT_FALSE(m.capacity_factor.has_value());
  EXPECT_EQ(m.ffn_type, FfnType::kGelu);
  EXPECT_EQ(m.tokens_per_micro_batch(), 4096);
  EXPECT_DOUBLE_EQ(m.expert_params(), 2.0 * 1024 * 4096);
  json j = good();
  j["capacity_factor"] = 1.25;
  j["ffn_type"] = "swiglu";
  j["parallel"] = {{"tp", 2}};
  m = parse_model(j, "m.json");
  EXPECT_DOUBLE_EQ(*m.capacity_factor, 1.25);
  EXPECT_EQ(m.ffn_gemms(), 3);
  EXPECT_EQ(m.parallel->tp, 2);
  EXPECT_FALSE(m.parallel->dp.has_value());
  EXPECT_EQ(parse_model(model_to_json(m), "again").hidden, 1024);
}

// The GEMMs' dtype: stated, or implied by the storage size (fp32 for 4 bytes, bf16 for 2).
TEST(ModelConfig, ComputeDtypeIsStatedOrImpliedByDtypeBytes) {
  EXPECT_EQ(parse_model(good(), "m.json").compute(), Dtype::kBf16);
  json j = good();
  j["dtype_bytes"] = 4;
  EXPECT_EQ(parse_model(j, "m.json").compute(), Dtype::kFp32);
  EXPECT_FALSE(model_to_json(parse_model(j, "m.json")).contains("compute_dtype"));
  j["compute_dtype"] = "tf32";
  const ModelConfig m = parse_model(j, "m.json");
  EXPECT_EQ(m.compute(), Dtype::kTf32);
  EXPECT_EQ(parse_model(model_to_json(m), "again").compute(), Dtype::kTf32);
  j["compute_dtype"] = "half";
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: compute_dtype", "unknown data type \"half\"",
                   "fp32, tf32, bf16, fp16");
  j["compute_dtype"] = 16;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: compute_dtype", "must be a string");
}

TEST(ModelConfig, Errors) {
  json j = good();
  j["hiden"] = 1;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: hiden",
                   "unknown key; did you mean 'hidden'?");
  j = good();
  j.erase("experts");
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: experts", "missing key");
  j = good();
  j["hidden"] = "big";
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: hidden", "must be an integer");
  j = good();
  j["seq_len"] = 0;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: seq_len", "positive integer");
  j = good();
  j["capacity_factor"] = -1;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "capacity_factor", "must be positive");
  j["capacity_factor"] = 1e-300;  // experts that hold nothing: A2As of no bytes
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: capacity_factor", "too small", "1% to 1000x");
  j["capacity_factor"] = 0.01;
  EXPECT_DOUBLE_EQ(*parse_model(j, "m.json").capacity_factor, 0.01);
  j = good();
  j["top_k"] = 17;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: top_k", "exceeds experts");
  j = good();
  j["heads"] = 3;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: heads", "does not divide hidden");
  j = good();
  j["ffn_type"] = "relu";
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "ffn_type", "gelu");
  j = good();
  j["dtype_bytes"] = 3;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "dtype_bytes", "1, 2, 4 or 8");
  j = good();
  j["parallel"] = {{"tq", 2}};
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: parallel.tq", "unknown key");
  j["parallel"] = {{"tp", 0}};
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: parallel.tp", "positive integer");
  j["parallel"] = {{"tp", 2000000}};
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: parallel.tp", "too large");
  j = good();
  j["vocab_size"] = -1;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: vocab_size", "must not be negative");
  j = good();
  j["hidden"] = 1000000000000;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: hidden", "too large");
  j = good();
  j["layers"] = 1000000000;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: layers", "too large");
  j = good();
  j["capacity_factor"] = 1e300;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: capacity_factor", "too large");
}

// Node-limited routing: 16 experts in groups of equal size, each token among its best
// router_group_top_k groups, which must hold top_k experts; the keys round-trip.
TEST(ModelConfig, RouterGroupsAreReadCheckedAndWritten) {
  ModelConfig m = parse_model(good(), "m.json");
  EXPECT_EQ(m.router_groups, 1);
  EXPECT_EQ(m.router_group_top_k, 0);
  EXPECT_EQ(m.router_groups_per_token(), 1);
  EXPECT_FALSE(model_to_json(m).contains("router_groups"));
  EXPECT_FALSE(model_to_json(m).contains("router_group_top_k"));
  json j = good();
  j["router_groups"] = 8;
  j["router_group_top_k"] = 1;  // 1 group of 2 experts holds top_k = 2
  m = parse_model(j, "m.json");
  EXPECT_EQ(m.router_groups, 8);
  EXPECT_EQ(m.router_group_top_k, 1);
  EXPECT_EQ(m.router_groups_per_token(), 1);
  const ModelConfig back = parse_model(model_to_json(m), "again");
  EXPECT_EQ(back.router_groups, 8);
  EXPECT_EQ(back.router_group_top_k, 1);
  j["router_group_top_k"] = 0;  // every group
  EXPECT_EQ(parse_model(j, "m.json").router_groups_per_token(), 8);
  j["router_group_top_k"] = 8;
  EXPECT_EQ(parse_model(j, "m.json").router_groups_per_token(), 8);

  j = good();
  j["router_groups"] = 0;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: router_groups", "positive integer");
  j["router_groups"] = 3;
  EXPECT_EQ(testing::error_of([&] { parse_model(j, "m.json"); }),
            "m.json: router_groups: router_groups = 3 does not divide experts = 16 (the groups "
            "are equal)");
  j["router_groups"] = 4;
  j["router_group_top_k"] = 5;
  EXPECT_EQ(
      testing::error_of([&] { parse_model(j, "m.json"); }),
      "m.json: router_group_top_k: must be in [0, router_groups = 4] (0: every group), got 5");
  j["router_group_top_k"] = -1;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: router_group_top_k", "must be in [0, ");
  j["router_groups"] = 16;
  j["router_group_top_k"] = 1;  // one expert, top_k 2
  EXPECT_EQ(testing::error_of([&] { parse_model(j, "m.json"); }),
            "m.json: router_group_top_k: router_group_top_k x (experts / router_groups) = 1 x 1 = "
            "1 is fewer than top_k = 2 (a token's groups must hold its experts)");
  j = good();
  j["router_groups_top_k"] = 2;
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "m.json: router_groups_top_k", "unknown key",
                   "did you mean 'router_group_top_k'?");
}

TEST(ModelConfig, LimitsGroupsOnlyWhenAGroupIsLeftOut) {
  EXPECT_FALSE(limits_groups(1, 0));
  EXPECT_FALSE(limits_groups(1, 1));
  EXPECT_FALSE(limits_groups(8, 0));
  EXPECT_FALSE(limits_groups(8, 8));
  EXPECT_TRUE(limits_groups(8, 4));
  EXPECT_TRUE(limits_groups(2, 1));
  EXPECT_FALSE(router_groups_problem(256, 8, 8, 4).has_value());
  EXPECT_FALSE(router_groups_problem(16, 2, 16, 2).has_value());
}

// Each size has its bound; their product (one micro-batch's dispatch) has one too: 1 PB.
TEST(ModelConfig, TheDispatchBytesOfAMicroBatchAreBounded) {
  json j = good();
  j["hidden"] = 1000000;
  j["heads"] = 1000;
  j["seq_len"] = 100000;
  j["micro_batch"] = 10000;
  j["top_k"] = 1;
  j["dtype_bytes"] = 1;
  ModelConfig m = parse_model(j, "m.json");  // exactly 1e15 bytes
  EXPECT_NO_THROW(check_model_sizes(m, "m.json"));
  m.micro_batch = 20000;  // an override, checked again
  EXPECT_ERROR_HAS(check_model_sizes(m, "m.json"),
                   "m.json: one micro-batch's dispatch (seq_len x micro_batch x top_k x hidden x "
                   "dtype_bytes) would be 2e+15 bytes, more than 1e+15 (1 PB): reduce seq_len or "
                   "micro_batch");
  j["capacity_factor"] = 1.5;  // padding counts; a factor below 1 does not shrink the bound
  EXPECT_ERROR_HAS(parse_model(j, "m.json"), "x capacity_factor) would be 1.5e+15 bytes");
  j["capacity_factor"] = 0.5;
  EXPECT_NO_THROW(parse_model(j, "m.json"));
}

TEST(ModelConfig, ParallelMustSplitTheModel) {
  ModelConfig m = parse_model(good(), "m.json");  // 12 layers, 16 heads, seq 1024, ffn 4096
  auto config = [](const char* spec, int world) {
    return resolve_parallel(parse_parallel_spec(spec, "-"), world, 16, "-");
  };
  EXPECT_NO_THROW(check_parallel_fits_model(config("tp=4,pp=3,cp=2", 24), m, "w"));
  // Uneven pipeline splits are fine (sched::split_layers), a stage without a layer is not.
  EXPECT_NO_THROW(check_parallel_fits_model(config("pp=8", 8), m, "w"));
  EXPECT_ERROR_HAS(check_parallel_fits_model(config("pp=16", 16), m, "--parallel"),
                   "--parallel: pp", "pp = 16 exceeds the model's 12 layers");
  EXPECT_ERROR_HAS(check_parallel_fits_model(config("cp=3", 3), m, "--parallel"), "--parallel: cp",
                   "seq_len (1024)");
  EXPECT_ERROR_HAS(check_parallel_fits_model(config("tp=32", 32), m, "--parallel"),
                   "--parallel: tp", "heads (16)");
  EXPECT_ERROR_HAS(check_parallel_fits_model(config("esp=3,ep=1", 3), m, "--parallel"),
                   "--parallel: esp", "ffn_hidden (4096)");
}

// One spelling for the expert FFN (model files, `train --ffn-type`, moecomm.torch): the names
// round-trip, and a near miss gets a hint.
TEST(ModelConfig, FfnTypeNamesRoundTripAndNearMissesGetAHint) {
  EXPECT_EQ(to_string(FfnType::kGelu), "gelu");
  EXPECT_EQ(to_string(FfnType::kSwiglu), "swiglu");
  for (FfnType t : {FfnType::kGelu, FfnType::kSwiglu})
    EXPECT_EQ(parse_ffn_type(to_string(t), "x"), t);
  EXPECT_EQ(testing::error_of([] { parse_ffn_type("swigl", "--ffn-type"); }),
            "--ffn-type: must be \"gelu\" or \"swiglu\", got \"swigl\"; did you mean 'swiglu'?");
  EXPECT_EQ(testing::error_of([] { parse_ffn_type("mixtral", "--ffn-type"); }),
            "--ffn-type: must be \"gelu\" or \"swiglu\", got \"mixtral\"");
}

}  // namespace
}  // namespace moecomm::core
