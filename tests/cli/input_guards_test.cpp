// Input that asks for absurd rates or more work than a machine holds gets a clear error naming
// the file and key, or what to reduce, and exit 2: never a 300-digit time, an internal error
// or std::bad_alloc.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using nlohmann::json;
using testing::has;
using testing::Result;
using testing::run_cli;

std::string write(const std::string& name, const json& doc) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << doc.dump();
  return path;
}

json cluster() {  // netmoe-a800-2x8's shape: 2 nodes x 8 GPUs
  return json::parse(R"({"name": "guard-2x8",
    "levels": [{"name": "node", "count": 2, "bandwidth_GBps": 25, "latency_us": 10},
               {"name": "gpu", "count": 8, "bandwidth_GBps": 200, "latency_us": 3}],
    "device": {"tflops": 312, "memory_GB": 80, "memory_bandwidth_GBps": 1600}})");
}

// A trace of `experts` experts, 16 samples of one token, 2 layers, 2 iterations.
json trace(int experts) {
  json iterations = json::array();
  for (int it = 0; it < 2; ++it) {
    json layers = json::array();
    for (int l = 0; l < 2; ++l) {
      json samples = json::array();
      for (int s = 0; s < 16; ++s) samples.push_back(json::array({json::array({s % experts})}));
      layers.push_back(samples);
    }
    iterations.push_back(layers);
  }
  return {{"format", "moecomm-routing-trace"},
          {"version", 1},
          {"experts", experts},
          {"top_k", 1},
          {"iterations", iterations}};
}

void expect_clear(const Result& r, const std::string& where, const std::string& why) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, where)) << r.err;
  EXPECT_TRUE(has(r.err, why)) << r.err;
  EXPECT_FALSE(has(r.err, "internal")) << r.err;
}

TEST(InputGuards, RatesNearZeroInAClusterFileNameTheFileAndKey) {
  for (const char* command : {"plan", "sim"}) {
    json c = cluster();
    c["levels"][0]["bandwidth_GBps"] = 1e-300;
    std::string path = write("guard-bandwidth.json", c);
    expect_clear(run_cli({command, "--cluster", path}), path + ": levels[0].bandwidth_GBps",
                 "1 kB/s to 1 PB/s");
    c = cluster();
    c["device"]["tflops"] = 1e-300;
    path = write("guard-tflops.json", c);
    expect_clear(run_cli({command, "--cluster", path}), path + ": device.tflops", "too small");
    c = cluster();
    c["device"]["compute_efficiency"] = 1e-300;
    path = write("guard-efficiency.json", c);
    expect_clear(run_cli({command, "--cluster", path}), path + ": device.compute_efficiency",
                 "too small");
  }
}

TEST(InputGuards, ACapacityFactorNearZeroNamesTheModelFileAndKey) {
  json m = json::parse(R"({"name": "guard", "hidden": 1024, "ffn_hidden": 4096, "experts": 16,
    "top_k": 2, "layers": 4, "heads": 16, "seq_len": 1024, "micro_batch": 2,
    "capacity_factor": 1e-300, "dtype_bytes": 2})");
  const std::string path = write("guard-model.json", m);
  expect_clear(run_cli({"plan", "--model", path, "--cluster", "netmoe-a800-2x8"}),
               path + ": capacity_factor", "too small");
}

TEST(InputGuards, ATraceWithMoreExpertsThanThePredictorHandlesIsRefused) {
  for (int experts : {5000, 40000}) {
    const std::string path = write("guard-trace.json", trace(experts));
    expect_clear(run_cli({"place", "--trace", path, "--cluster", "netmoe-a800-2x8"}),
                 std::to_string(experts) + " experts", "reduce the experts");
  }
}

TEST(InputGuards, SyntheticExpertsPastThePredictorsLimitsAreRefused) {
  for (const char* experts : {"1000000", "4000"})
    expect_clear(run_cli({"place", "--experts", experts}), std::string(experts) + " experts",
                 "reduce the experts");
  // Within the experts cap, but 11 layer pairs x 7 iterations of O(E^3) updates are not.
  expect_clear(run_cli({"place", "--experts", "2000", "--iterations", "8"}),
               "77 updates of 2000 experts", "reduce the experts, the layers or the iterations");
}

TEST(InputGuards, SizesWhoseProductPassesAPetabyteNameWhatToReduce) {
  // Each within its own bound; one micro-batch's dispatch would be 1e14 tokens x 2 x 6144 x 2
  // bytes (the default model), which once wrapped to -9223372036854775808 bytes.
  for (const char* command : {"plan", "sim"}) {
    const Result r = run_cli({command, "--seq-len", "100000000", "--micro-batch", "1000000"});
    expect_clear(r, "seq_len x micro_batch x top_k x hidden x dtype_bytes",
                 "more than 1e+15 (1 PB): reduce seq_len or micro_batch");
    EXPECT_FALSE(has(r.out, "-9223372036854775808")) << r.out;
  }
  json m = json::parse(R"({"name": "guard", "hidden": 1000000, "ffn_hidden": 4096,
    "experts": 16, "top_k": 2, "layers": 2, "heads": 8, "seq_len": 100000000,
    "micro_batch": 1, "capacity_factor": 2.0, "dtype_bytes": 8})");
  const std::string path = write("guard-product.json", m);
  expect_clear(run_cli({"sim", "--model", path, "--cluster", write("guard-c.json", cluster())}),
               path + ": one micro-batch's dispatch", "x capacity_factor) would be 3.2e+15 bytes");
}

TEST(InputGuards, ARoutedStepTooLargeForItsTraceNamesWhatToReduce) {
  // 1e6 samples per EP member: the group's sample count alone passes 2^31.
  expect_clear(run_cli({"sim", "--micro-batch", "1000000", "--routing", "synthetic"}),
               "synthetic routing", "reduce micro_batch or seq_len, or use uniform routing");
}

TEST(InputGuards, NonFiniteNumberFlagsAreRefused) {
  const std::vector<std::vector<std::string>> flags = {
      {"sim", "--compute-efficiency"},  {"sim", "--completion-tolerance"}, {"sim", "--locality"},
      {"plan", "--budget-s"},           {"place", "--locality"},           {"place", "--skew"},
      {"place", "--layer-correlation"}, {"place", "--predictor-decay"}};
  for (const auto& f : flags) {
    for (const char* value : {"nan", "inf", "-nan"}) {
      const Result r = run_cli({f[0], f[1], value});
      EXPECT_EQ(r.code, 2) << f[0] << " " << f[1] << " " << value << ": " << r.err;
      EXPECT_TRUE(has(r.err, f[1])) << r.err;
      EXPECT_TRUE(has(r.err, "is not a finite number")) << r.err;
    }
  }
}

TEST(InputGuards, AStepOfTooManyOpsIsRefusedBeforeItIsBuilt) {
  expect_clear(run_cli({"sim", "--strategy", "base=lina,chunks=1024", "--layers", "33"}), "ops",
               "lower the layers, chunks or grad_partitions");
}

}  // namespace
}  // namespace moecomm::cli
