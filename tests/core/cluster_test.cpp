#include "core/cluster.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

using nlohmann::json;

json good() {
  return json::parse(R"({"name": "a800-2x8",
    "levels": [{"name": "node", "count": 2, "bandwidth_GBps": 25, "latency_us": 10},
               {"name": "gpu", "count": 8, "bandwidth_GBps": 200, "latency_us": 3}],
    "device": {"tflops": 312, "memory_GB": 80, "memory_bandwidth_GBps": 1600},
    "efficiency": {"node": {"alltoall": [[32e6, 0.633], [8e6, 0.427]]}}})");
}

TEST(Cluster, ParsesUnitsIntoBytesAndSeconds) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_EQ(c.name, "a800-2x8");
  ASSERT_EQ(c.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(c.levels[0].bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c.levels[0].latency, 10e-6);
  EXPECT_EQ(c.levels[1].count, 8);
  EXPECT_DOUBLE_EQ(c.device.flops, 312e12);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, 80e9);
  EXPECT_EQ(c.world_size(), 16);
  EXPECT_EQ(c.level_index("gpu"), 1);
  EXPECT_EQ(c.level_index("rack"), -1);
  CurvePoints curve = c.curve("node", "alltoall");
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_DOUBLE_EQ(curve[0].first, 8e6);  // sorted by size
  EXPECT_TRUE(c.curve("gpu", "alltoall").empty());
}

TEST(Cluster, RoundTripsThroughJson) {
  Cluster c = parse_cluster(good(), "c.json");
  Cluster back = parse_cluster(cluster_to_json(c), "again");
  EXPECT_EQ(cluster_to_json(back), cluster_to_json(c));
}

TEST(Cluster, BackwardRateIsOptionalAndRoundTrips) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_DOUBLE_EQ(c.device.backward_flops, 0);
  EXPECT_DOUBLE_EQ(c.device.backward_peak(Dtype::kBf16), 312e12);  // not given: the forward
  EXPECT_FALSE(cluster_to_json(c)["device"].contains("backward_tflops"));
  json j = good();
  j["device"]["backward_tflops"] = 0.0125;
  c = parse_cluster(j, "c.json");
  EXPECT_DOUBLE_EQ(c.device.backward_peak(Dtype::kBf16), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_to_json(c), "again").device.backward_flops, 12.5e9);
  j["device"]["backward_tflops"] = 0;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: device.backward_tflops",
                   "must be positive");
}

// An A100's sheet: fp32 on the CUDA cores, tf32 and bf16 on the tensor cores; a dtype the
// table leaves out runs at `tflops`.
TEST(Cluster, PeakPerDtypeAndComputeEfficiencyAreOptionalAndRoundTrip) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_DOUBLE_EQ(c.device.peak_flops(Dtype::kFp32), 312e12);
  EXPECT_DOUBLE_EQ(c.device.compute_efficiency, 1.0);
  EXPECT_FALSE(cluster_to_json(c)["device"].contains("tflops_by_dtype"));
  EXPECT_FALSE(cluster_to_json(c)["device"].contains("compute_efficiency"));
  json j = good();
  j["device"]["tflops_by_dtype"] = {{"fp32", 19.5}, {"tf32", 156}, {"bf16", 312}};
  j["device"]["compute_efficiency"] = 0.6;
  c = parse_cluster(j, "c.json");
  EXPECT_DOUBLE_EQ(c.device.peak_flops(Dtype::kFp32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.device.peak_flops(Dtype::kTf32), 156e12);
  EXPECT_DOUBLE_EQ(c.device.peak_flops(Dtype::kFp16), 312e12);  // not listed: tflops
  EXPECT_DOUBLE_EQ(c.device.backward_peak(Dtype::kFp32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.device.compute_efficiency, 0.6);
  EXPECT_EQ(cluster_to_json(parse_cluster(cluster_to_json(c), "again")), cluster_to_json(c));
  j["device"]["tflops_by_dtype"] = {{"fp33", 19.5}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: device.tflops_by_dtype.fp33",
                   "unknown data type", "fp32, tf32, bf16");
  j["device"]["tflops_by_dtype"] = {{"fp32", 0}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "device.tflops_by_dtype.fp32", "must be positive");
  j["device"]["tflops_by_dtype"] = 19.5;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "device.tflops_by_dtype", "must be an object");
  j = good();
  j["device"]["compute_efficiency"] = 1.5;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "device.compute_efficiency");
}

TEST(Cluster, OverlappedComputeShareIsOptionalInZeroToOneAndRoundTrips) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_DOUBLE_EQ(c.device.overlapped_compute_share, 1);  // not given: nothing lost
  EXPECT_FALSE(cluster_to_json(c)["device"].contains("overlapped_compute_share"));
  json j = good();
  j["device"]["overlapped_compute_share"] = 0.75;
  c = parse_cluster(j, "c.json");
  EXPECT_DOUBLE_EQ(c.device.overlapped_compute_share, 0.75);
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_to_json(c), "again").device.overlapped_compute_share,
                   0.75);
  for (double bad : {0.0, 1.5}) {
    j["device"]["overlapped_compute_share"] = bad;
    EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: device.overlapped_compute_share");
  }
}

TEST(Cluster, PerMessageOverheadIsOptionalNonNegativeAndRoundTrips) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_DOUBLE_EQ(c.levels[0].overhead, 0);  // not given: no LogGP overhead
  EXPECT_FALSE(cluster_to_json(c)["levels"][0].contains("overhead_us"));
  json j = good();
  j["levels"][1]["overhead_us"] = 1.5;
  c = parse_cluster(j, "c.json");
  EXPECT_DOUBLE_EQ(c.levels[1].overhead, 1.5e-6);
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_to_json(c), "again").levels[1].overhead, 1.5e-6);
  j["levels"][1]["overhead_us"] = -1;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels[1].overhead_us", "negative");
  j["levels"][1]["overhead_us"] = "fast";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels[1].overhead_us");
}

TEST(Cluster, NetworkPrioritiesAreOptionalBooleanAndRoundTrip) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_TRUE(c.network_priorities);  // not given: the network serves priorities
  EXPECT_FALSE(cluster_to_json(c).contains("network_priorities"));
  json j = good();
  j["network_priorities"] = false;
  c = parse_cluster(j, "c.json");
  EXPECT_FALSE(c.network_priorities);
  EXPECT_FALSE(parse_cluster(cluster_to_json(c), "again").network_priorities);
  j["network_priorities"] = "no";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: network_priorities", "true or false");
}

TEST(Cluster, FairnessIsOptionalAndRoundTrips) {
  Cluster c = parse_cluster(good(), "c.json");
  EXPECT_EQ(c.fairness, Fairness::kPerCollective);  // not given
  EXPECT_FALSE(cluster_to_json(c).contains("fairness"));
  json j = good();
  j["fairness"] = "per-flow";
  c = parse_cluster(j, "c.json");
  EXPECT_EQ(c.fairness, Fairness::kPerFlow);
  EXPECT_EQ(parse_cluster(cluster_to_json(c), "again").fairness, Fairness::kPerFlow);
  j["fairness"] = "fair";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: fairness", "per-collective", "per-flow");
}

TEST(Cluster, UnknownKey) {
  json j = good();
  j["levels"][1]["bandwith_GBps"] = 3;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels[1].bandwith_GBps",
                   "unknown key; did you mean 'bandwidth_GBps'?");
  j = good();
  j["colour"] = "blue";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: colour", "unknown key");
  // An optional key absent from the file (only asked about) is suggested too.
  j = good();
  j["device"]["compute_eficiency"] = 0.5;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: device.compute_eficiency",
                   "unknown key; did you mean 'compute_efficiency'?");
}

TEST(Cluster, MissingKey) {
  json j = good();
  j["device"].erase("tflops");
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: device.tflops", "missing key");
  j = good();
  j.erase("levels");
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels", "missing key");
}

TEST(Cluster, WrongType) {
  json j = good();
  j["levels"][0]["count"] = "two";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].count", "must be an integer");
  j = good();
  j["levels"] = "node";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels", "must be a list");
  EXPECT_ERROR_HAS(parse_cluster(json::array(), "c.json"), "c.json", "must be a JSON object");
}

TEST(Cluster, NonPositiveValues) {
  json j = good();
  j["levels"][0]["bandwidth_GBps"] = -25;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].bandwidth_GBps", "must be positive");
  j = good();
  j["levels"][1]["bandwidth_GBps"] = 0;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[1].bandwidth_GBps", "must be positive");
  j = good();
  j["levels"][0]["count"] = 0;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].count", "positive integer");
  j = good();
  j["levels"][0]["latency_us"] = -1;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].latency_us", "negative");
  j = good();
  j["device"]["memory_GB"] = 0;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "device.memory_GB", "must be positive");
}

TEST(Cluster, StructuralErrors) {
  json j = good();
  j["levels"] = json::array();
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels", "at least one level");
  j = good();
  j["levels"][1]["name"] = "node";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[1].name", "duplicate level name");
  j = good();
  j["levels"][0]["count"] = 2000000;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].count", "too large");
}

TEST(Cluster, EfficiencyErrors) {
  json j = good();
  j["efficiency"] = {{"rack", {{"alltoall", {{1e6, 0.5}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "efficiency.rack", "unknown level");
  j["efficiency"] = {{"node", {{"broadcast", {{1e6, 0.5}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "efficiency.node.broadcast", "unknown collective");
  j["efficiency"] = {{"node", {{"alltoall", {{1e6, 1.5}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "alltoall[0]", "efficiency must be in [0.001, 1]");
  j["efficiency"] = {{"node", {{"alltoall", {{-1, 0.5}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "alltoall[0]", "size must be in [1, 1e15] bytes");
  j["efficiency"] = {{"node", {{"alltoall", {{1e6, 0.5}, {1e6, 0.6}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "alltoall", "duplicate message size");
  j["efficiency"] = {{"node", {{"alltoall", {1e6}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "alltoall[0]", "pair");
  j["efficiency"] = {{"node", {{"alltoall", json::array()}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "alltoall", "non-empty list");
}

}  // namespace
}  // namespace moecomm::core

namespace moecomm::core {
namespace {

TEST(Cluster, BoundsAndOddValues) {
  json j = good();
  j["levels"][0]["name"] = "";
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].name", "must not be empty");
  j = good();
  j["levels"][0]["count"] = 1000;
  j["levels"][1]["count"] = 1001;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: levels", "more than 1000000 devices");
  j = good();
  j["levels"][0]["bandwidth_GBps"] = 1e300;  // finite in JSON, infinite in bytes/s
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].bandwidth_GBps", "too large");
  j = good();
  j["levels"][0]["latency_us"] = 1e306;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "levels[0].latency_us", "too large");
  j = good();
  j["device"]["tflops"] = 1e300;
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "device.tflops", "too large");
  // A huge or deeply nested value is named by its type, not pasted into the message.
  json deep = json::array();
  for (int i = 0; i < 5000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  j = good();
  j["name"] = std::move(deep);  // a copy would recurse 5000 frames deep
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: name", "must be a string, got an array");
}

}  // namespace
}  // namespace moecomm::core

namespace moecomm::core {
namespace {

// Every rate and size has a stated range (cluster.h); beyond it the value is refused with the
// file and key named, whichever side it falls on.
TEST(Cluster, RatesAndSizesOutsideTheirRangesAreRefused) {
  struct Case {
    std::string pointer = "";  // where the value goes in good()
    std::string key = "";      // how the error names it
    double value = 0;
    std::string expected = "";
  };
  const std::vector<Case> cases = {
      {"/levels/0/bandwidth_GBps", "levels[0].bandwidth_GBps", 1e-300, "too small"},
      {"/levels/0/bandwidth_GBps", "levels[0].bandwidth_GBps", 9e-7, "1 kB/s to 1 PB/s"},
      {"/levels/0/bandwidth_GBps", "levels[0].bandwidth_GBps", 1.1e6, "too large"},
      {"/levels/1/latency_us", "levels[1].latency_us", 2e7, "0 to 10 s"},
      {"/levels/1/latency_us", "levels[1].latency_us", -1e-300, "must not be negative"},
      {"/levels/0/overhead_us", "levels[0].overhead_us", 2e6, "0 to 1 s"},
      {"/device/tflops", "device.tflops", 1e-300, "1 Mflop/s to 1 Eflop/s"},
      {"/device/tflops", "device.tflops", 2e6, "too large"},
      {"/device/backward_tflops", "device.backward_tflops", 1e-300, "too small"},
      {"/device/tflops_by_dtype/bf16", "device.tflops_by_dtype.bf16", 1e-300, "too small"},
      {"/device/compute_efficiency", "device.compute_efficiency", 1e-300, "0.1% to 100%"},
      {"/device/overlapped_compute_share", "device.overlapped_compute_share", 1e-4, "too small"},
      {"/device/memory_GB", "device.memory_GB", 1e-300, "1 MB to 1 PB"},
      {"/device/memory_GB", "device.memory_GB", 2e6, "too large"},
      {"/device/memory_bandwidth_GBps", "device.memory_bandwidth_GBps", 1e-300, "1 kB/s"},
  };
  for (const Case& c : cases) {
    json j = good();
    j[json::json_pointer(c.pointer)] = c.value;
    EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "c.json: " + c.key, c.expected);
  }
  json j = good();
  j["efficiency"] = {{"node", {{"alltoall", {{1e6, 1e-300}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "efficiency.node.alltoall[0]", "[0.001, 1]");
  j["efficiency"] = {{"node", {{"alltoall", {{1e300, 0.5}}}}}};
  EXPECT_ERROR_HAS(parse_cluster(j, "c.json"), "efficiency.node.alltoall[0]", "1 B to 1 PB");
  // The bounds themselves are in range.
  j = good();
  j["levels"][0]["bandwidth_GBps"] = kBandwidthGBps.min;
  j["levels"][1]["bandwidth_GBps"] = kBandwidthGBps.max;
  j["device"]["compute_efficiency"] = kShare.min;
  EXPECT_DOUBLE_EQ(parse_cluster(j, "c.json").levels[0].bandwidth, 1e3);
}

}  // namespace
}  // namespace moecomm::core
