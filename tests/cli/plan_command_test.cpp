#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "core/presets.h"
#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

TEST(PlanCommand, DefaultPresetPrintsTheTableAndARecommendation) {
  Result r = run_cli({"plan"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, core::kDefaultModel));
  for (const char* name : {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe",
                           "hybridep", "lina", "recommended: "})
    EXPECT_TRUE(has(r.out, name)) << name;
}

// The lines above the table say what its times are and that memory is per rank; the baseline
// row's step is the one `moecomm sim` prints for the same inputs, the paper model's another.
TEST(PlanCommand, TableHeaderStatesWhatItsFiguresAre) {
  Result r = run_cli({"plan", "--budget-s", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(
      has(r.out,
          "ms of the simulated training step (as `moecomm sim`): 1 MoE block(s) on every rank, "
          "forward, backward and gradient sync, until the last rank ends\n"
          "model_ms: the paper model's estimate of one MoE layer's forward and backward (its own "
          "model, not the simulation)\n"
          "strategy      forward_ms backward_ms    step_ms   model_ms memory_GB/rank  knobs\n"
          "baseline          46.755      96.946    143.701    119.619          25.13  -\n"))
      << r.out;
  Result sim = run_cli({"sim"});
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_TRUE(has(sim.out, "iteration 143.701 ms: forward 46.755 ms, backward 96.946 ms"))
      << sim.out;
}

// A plan with --micro-batch prints the sim command with it, and sim prices the same step.
TEST(PlanCommand, SimCommandCarriesTheSequenceAndBatchOverrides) {
  Result r = run_cli({"plan", "--model", "lina-transformer-xl", "--micro-batch", "2", "--seq-len",
                      "256", "--budget-s", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "  moecomm sim --model lina-transformer-xl --cluster lina-a100-4x4 "
                  "--seq-len 256 --micro-batch 2 --parallel "))
      << r.out;
  Result plan = run_cli({"plan", "--model", "lina-transformer-xl", "--micro-batch", "2",
                         "--seq-len", "256", "--budget-s", "0", "--json"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto p = nlohmann::json::parse(plan.out);
  Result sim = run_cli({"sim", "--model", "lina-transformer-xl", "--micro-batch", "2", "--seq-len",
                        "256", "--json"});
  ASSERT_EQ(sim.code, 0) << sim.err;
  const auto s = nlohmann::json::parse(sim.out);
  ASSERT_EQ(p["strategies"][0]["name"], "baseline");
  EXPECT_EQ(s["iteration_ms"].get<double>(), p["strategies"][0]["total_ms"].get<double>());
  Result whole = run_cli({"sim", "--model", "lina-transformer-xl", "--json"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  EXPECT_GT(nlohmann::json::parse(whole.out)["iteration_ms"].get<double>(),
            2 * s["iteration_ms"].get<double>());
}

TEST(PlanCommand, JsonIsOneObjectWithStrategiesAndRecommended) {
  Result r = run_cli({"plan", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["strategies"].size(), 9u);
  bool found = false;
  for (const auto& s : j["strategies"]) {
    EXPECT_TRUE(s["forward_ms"].is_number());
    EXPECT_TRUE(s["backward_ms"].is_number());
    EXPECT_TRUE(s["params"].is_object());
    found |= s["name"] == j["recommended"];
  }
  EXPECT_TRUE(found);
}

// Every row carries the --strategy and --parallel that `moecomm sim` re-runs it with, and the
// simulator gives the very time the plan shows.
TEST(PlanCommand, EveryRowRerunsInSimAsPriced) {
  Result r = run_cli({"plan", "--json", "--model", "lina-gpt2", "--layers", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["layers"], 2);
  for (const auto& row : plan["strategies"]) {
    Result sim = run_cli({"sim", "--json", "--model", "lina-gpt2", "--layers", "2", "--strategy",
                          row["strategy"], "--parallel", row["parallel"]});
    ASSERT_EQ(sim.code, 0) << sim.err;
    const auto j = nlohmann::json::parse(sim.out);
    EXPECT_DOUBLE_EQ(j["iteration_ms"].get<double>(), row["total_ms"].get<double>()) << row["name"];
    EXPECT_DOUBLE_EQ(j["forward_ms"].get<double>(), row["forward_ms"].get<double>()) << row["name"];
  }
}

// `sim --strategy lina` packs the experts as the plan's lina row does (one name, one layout).
TEST(PlanCommand, SimsLinaIsThePlansLinaRow) {
  Result r = run_cli({"plan", "--json", "--model", "lina-gpt2", "--budget-s", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  for (const auto& row : plan["strategies"]) {
    if (row["name"] != "lina") continue;
    Result sim = run_cli({"sim", "--json", "--model", "lina-gpt2", "--strategy", "lina"});
    ASSERT_EQ(sim.code, 0) << sim.err;
    const auto j = nlohmann::json::parse(sim.out);
    EXPECT_DOUBLE_EQ(j["iteration_ms"].get<double>(), row["total_ms"].get<double>());
    EXPECT_TRUE(
        has(j["strategy_notes"][0].get<std::string>(), "from Lina Sec. 4.2 (expert packing"))
        << j["strategy_notes"];
    return;
  }
  FAIL() << "no lina row";
}

TEST(PlanCommand, FlagsOverrideThePreset) {
  Result r = run_cli({"plan", "--json", "--model", "monta-2x70b", "--seq-len", "4096",
                      "--micro-batch", "2", "--parallel", "tp=8,ep=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cluster"], "monta-a800-2x8");  // the model's own testbed
  EXPECT_EQ(j["seq_len"], 4096);
  EXPECT_EQ(j["micro_batch"], 2);
  EXPECT_EQ(j["parallel"]["dp"], 2);
  EXPECT_EQ(j["workload"]["tokens_per_rank"], 8192);
}

TEST(PlanCommand, UserFilesWorkWherePresetsDo) {
  std::string model = ::testing::TempDir() + "user-model.json";
  std::ofstream(model) << R"({"name": "mine", "hidden": 1024, "ffn_hidden": 4096, "experts": 8,
      "top_k": 2, "layers": 4, "heads": 16, "seq_len": 512, "micro_batch": 2,
      "capacity_factor": 1.25, "dtype_bytes": 2})";
  Result r = run_cli({"plan", "--model", model, "--cluster", "lina-a100-4x4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "model mine on cluster lina-a100-4x4 (16 devices)"));
  // MoNTA's model needs expert sharding; its schedule still runs (the drop has nothing to
  // drop), so the row is simulated with no paper-model estimate beside it.
  r = run_cli(
      {"plan", "--model", model, "--cluster", "lina-a100-4x4", "--json", "--budget-s", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Named first: a range-for keeps only ["strategies"]'s reference, not the parsed temporary.
  const nlohmann::json plan = nlohmann::json::parse(r.out);
  for (const auto& row : plan["strategies"]) {
    if (row["name"] != "monta-o1") continue;
    EXPECT_TRUE(row["model_estimate"].is_null());
    EXPECT_TRUE(has(row["notes"][0].get<std::string>(),
                    "no paper-model estimate: needs expert "
                    "sharding (esp > 1)"))
        << row["notes"];
  }
  std::remove(model.c_str());
}

TEST(PlanCommand, AModelFilesParallelErrorNamesTheFile) {
  std::string model = ::testing::TempDir() + "bad-parallel.json";
  std::ofstream(model) << R"({"name": "m", "hidden": 1024, "ffn_hidden": 4096, "experts": 8,
      "top_k": 2, "layers": 4, "heads": 16, "seq_len": 512, "micro_batch": 2,
      "capacity_factor": null, "dtype_bytes": 2, "cluster": "lina-a100-4x4",
      "parallel": {"tp": 3}})";
  Result r = run_cli({"plan", "--model", model});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "error: " + model + ": parallel (world 16): tp x cp x pp = 3")) << r.err;
  std::remove(model.c_str());
}

// A small MoE model and a 2 x 4 cluster of `memory_gb` each, written to files named by `tag`
// (ctest runs the tests at once).
struct SmallFiles {
  std::string model, cluster;
  SmallFiles(double memory_gb, const std::string& tag)
      : model(::testing::TempDir() + tag + "-model.json"),
        cluster(::testing::TempDir() + tag + "-cluster.json") {
    std::ofstream(model) << R"({"name": "small", "hidden": 256, "ffn_hidden": 1024,
        "experts": 4, "top_k": 2, "layers": 4, "heads": 4, "seq_len": 128, "micro_batch": 1,
        "capacity_factor": null, "dtype_bytes": 2, "vocab_size": 1000})";
    std::ofstream(cluster) << R"({"name": "small-2x4", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 50, "latency_us": 5},
        {"name": "gpu", "count": 4, "bandwidth_GBps": 200, "latency_us": 2}],
        "device": {"tflops": 100, "memory_GB": )"
                           << memory_gb << R"(, "memory_bandwidth_GBps": 1000}})";
  }
  ~SmallFiles() {
    std::remove(model.c_str());
    std::remove(cluster.c_str());
  }
};

// plan never recommends a row over the device's memory: it says what is over instead.
TEST(PlanCommand, NothingFitsSaysWhatIsOverAndRecommendsNothing) {
  SmallFiles f(0.001, "plan-nothing-fits");
  Result r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--budget-s", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "nothing fits the device's memory: no row is recommended; the least a "
                  "candidate ("))
      << r.out;
  EXPECT_TRUE(has(r.out, "over the device's 0.00 GB: weights ")) << r.out;
  EXPECT_FALSE(has(r.out, "recommended: ")) << r.out;
  r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--budget-s", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["recommended"].is_null());
  EXPECT_GT(j["shortfall"]["over_GB"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["shortfall"]["capacity_GB"].get<double>(), 0.001);
  for (const auto& row : j["strategies"]) EXPECT_FALSE(row["fits"].get<bool>());
}

TEST(PlanCommand, SearchLayoutRecommendsAFittingLayout) {
  SmallFiles f(80, "layout-fits");
  Result r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--search-layout",
                      "--global-batch", "8", "--max-layouts", "2", "--budget-s", "20"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "layouts: 153 enumerated, 153 fit memory, 2 parallel configurations "
                  "simulated"))
      << r.out;
  EXPECT_TRUE(has(r.out, "recommended: tp=")) << r.out;
  EXPECT_TRUE(has(r.out, "pricing: per layout, one pipeline stage is simulated alone")) << r.out;
  r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--search-layout",
               "--global-batch", "8", "--max-layouts", "2", "--budget-s", "20", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["layouts"].empty());
  EXPECT_EQ(j["recommended"], j["layouts"][0]["layout"]);
  EXPECT_TRUE(j["shortfall"].is_null());
  EXPECT_EQ(j["global_batch"], 8);
  for (const auto& row : j["layouts"]) {
    EXPECT_LE(row["memory_GB"].get<double>(), 80);
    EXPECT_EQ(row["micro_batches"].get<int>() * row["parallel"]["dp"].get<int>(), 8);
  }
}

TEST(PlanCommand, SearchLayoutNothingFits) {
  SmallFiles f(0.001, "layout-nothing-fits");
  Result r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--search-layout",
                      "--global-batch", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "layouts: 153 enumerated, 0 fit memory")) << r.out;
  EXPECT_TRUE(has(r.out,
                  "nothing fits the device's memory: no layout is recommended; the least "
                  "a candidate (tp="))
      << r.out;
  r = run_cli({"plan", "--model", f.model, "--cluster", f.cluster, "--search-layout",
               "--global-batch", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["recommended"].is_null());
  EXPECT_TRUE(j["layouts"].empty());
  EXPECT_GT(j["shortfall"]["over_GB"].get<double>(), 0);
  for (const char* kind : {"weights_GB", "gradients_GB", "optimizer_states_GB", "activations_GB"})
    EXPECT_GT(j["shortfall"][kind].get<double>(), 0) << kind;
}

TEST(PlanCommand, SearchLayoutFlagsAreChecked) {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"plan", "--search-layout"}, "error: --global-batch: --search-layout needs"},
           {{"plan", "--search-layout", "--global-batch", "8", "--parallel", "dp=48"},
            "error: --parallel: --search-layout searches the parallel sizes"},
           {{"plan", "--global-batch", "8"}, "error: --global-batch: only with --search-layout"},
           {{"plan", "--search-layout", "--global-batch", "8", "--layers", "2"},
            "error: --layers: --search-layout simulates one block per pipeline stage"},
           {{"plan", "--search-layout", "--global-batch", "0"}, "error: --global-batch"},
       }) {
    Result r = run_cli(args);
    EXPECT_EQ(r.code, 2) << expected;
    EXPECT_TRUE(has(r.err, expected)) << r.err;
  }
}

TEST(PlanCommand, HelpDocumentsEveryFlag) {
  Result top = run_cli({"--help"});
  EXPECT_EQ(top.code, 0);
  EXPECT_TRUE(has(top.out, "plan"));
  Result r = run_cli({"plan", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--cluster", "--parallel", "--seq-len", "--micro-batch",
                           "--layers", "--budget-s", "--json", "--zero", "--recompute",
                           "--search-layout", "--global-batch", "--max-layouts"})
    EXPECT_TRUE(has(r.out, flag)) << flag;
}

TEST(PlanCommand, BadInputIsAClearErrorWithExitCode2) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{"plan", "--model", "nope"}, "error: model \"nope\": no such preset or file"},
           {{"plan", "--cluster", "/no/such.json"}, "error: /no/such.json: no such cluster file"},
           {{"plan", "--parallel", "tp=5"},
            "error: --parallel (world 48): tp x cp x pp = 5 does not divide 48"},
           {{"plan", "--parallel", "ep=4"}, "does not divide the number of experts (6)"},
           {{"plan", "--parallel", "xp=2"}, "error: --parallel: xp: unknown key"},
           {{"plan", "--seq-len", "0"}, "error: --seq-len"},
           {{"plan", "--zero", "4"}, "error: --zero"},
           {{"plan", "--budget-s", "-1"}, "error: --budget-s"},
           {{"plan", "--layers", "0"}, "error: --layers"},
           {{"plan", "--recompute", "some"}, "error: --recompute"},
           {{"plan", "--frobnicate"}, "error: "},
           {{"plan", "--model", ""}, "error: --model: empty value"},
           {{"plan", "--seq-len", "1000000000"}, "error: --seq-len"},
           {{"plan", "--parallel", "pp=5,dp=1,tp=8,ep=6"}, "does not divide 48"},
           {{"plan", "--parallel", "pp=48,tp=1,ep=1"},
            "error: --parallel: pp: pp = 48 exceeds the model's 33 layers"},
           {{}, "error: "},
       }) {
    Result r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.expected;
    EXPECT_TRUE(has(r.err, c.expected)) << "stderr: " << r.err << "\nexpected: " << c.expected;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(PlanCommand, TheBinaryExitsTwoOnErrors) {
  std::string cmd = std::string(MOECOMM_BINARY) + " plan --model nope 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string text;
  std::array<char, 256> buf;
  while (fgets(buf.data(), buf.size(), pipe.get())) text += buf.data();
  int status = pclose(pipe.release());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(has(text, "error: model \"nope\""));
}

}  // namespace
}  // namespace moecomm::cli
