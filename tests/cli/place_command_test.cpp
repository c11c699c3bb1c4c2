#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "core/presets.h"
#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

const std::string kCounts = std::string(MOECOMM_TEST_DATA_DIR) + "/place/counts_2x2.json";

// The counts file is the traffic test's hand-worked instance (8 inter-node and 7 intra-node
// tokens at home). Optimality itself is checked against brute force in sample_placer_test;
// here the command must report the instance and agree across solvers.
TEST(PlaceCommand, CountsJsonHasThePlacementAndTokensBeforeAndAfter) {
  Result r = run_cli({"place", "--counts", kCounts, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inter_node_tokens"]["before"], 8);
  EXPECT_EQ(j["intra_node_tokens"]["before"], 7);
  EXPECT_EQ(j["sample_device"].size(), 4u);
  EXPECT_LE(j["inter_node_tokens"]["after"].get<int>(), 8);
  EXPECT_TRUE(j["solve_us"].is_number());
  EXPECT_EQ(j["nodes"], 2);
  // Every solver reports the same optimum.
  for (const char* solver : {"km", "ilp", "lemon-ns"}) {
    Result other = run_cli({"place", "--counts", kCounts, "--json", "--solver", solver});
    ASSERT_EQ(other.code, 0) << other.err;
    EXPECT_EQ(nlohmann::json::parse(other.out)["inter_node_tokens"]["after"],
              j["inter_node_tokens"]["after"])
        << solver;
  }
}

std::string write(const std::string& name, const nlohmann::json& doc) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << doc.dump();
  return path;
}

// netmoe-a800-4x8's links on the 2 nodes x 2 devices of counts_2x2.json.
nlohmann::json cluster_2x2(double node_GBps = 100) {
  return {{"name", "links-2x2"},
          {"levels",
           {{{"name", "node"}, {"count", 2}, {"bandwidth_GBps", node_GBps}, {"latency_us", 5}},
            {{"name", "gpu"}, {"count", 2}, {"bandwidth_GBps", 200}, {"latency_us", 2}}}},
          {"device", {{"tflops", 312}, {"memory_GB", 40}, {"memory_bandwidth_GBps", 2000}}}};
}

// A counts file fixes the layout; the cluster gives the links. Left out, the default
// cluster's links price the file's layout, and the output says so; a --cluster of another
// layout is refused by name rather than mixed with the file's.
TEST(PlaceCommand, CountsTakeTheLayoutFromTheFileAndSaySo) {
  Result r = run_cli({"place", "--counts", kCounts});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& part :
       {"4 samples on 2 nodes x 2 devices (the layout of " + kCounts + ")",
        std::string("links of cluster netmoe-a800-4x8 (the default; pass --cluster of the same "
                    "layout): node 100 GB/s 5 us, gpu 200 GB/s 2 us"),
        std::string("model netmoe-moe-gpt-s (the default; pass --model): hidden 768 x 4 bytes = "
                    "3072 bytes per token")}) {
    EXPECT_TRUE(has(r.out, part)) << part << "\n" << r.out;
  }
  Result j = run_cli({"place", "--counts", kCounts, "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto dflt = nlohmann::json::parse(j.out);
  EXPECT_EQ(dflt["layout_from"], "counts");
  EXPECT_EQ(dflt["links_from"], "default");
  EXPECT_EQ(dflt["cluster"], "netmoe-a800-4x8");
  EXPECT_EQ(dflt["bytes_per_token"], 3072);
  // The same links given as a 2x2 file price the instance exactly as the default did.
  Result same = run_cli({"place", "--counts", kCounts, "--json", "--cluster",
                         write("place_links_2x2.json", cluster_2x2())});
  ASSERT_EQ(same.code, 0) << same.err;
  const auto given = nlohmann::json::parse(same.out);
  EXPECT_EQ(given["links_from"], "--cluster");
  EXPECT_EQ(given["a2a_ms"], dflt["a2a_ms"]);
  // Slower links between nodes: the A2A takes longer, the token counts stay.
  Result slow = run_cli({"place", "--counts", kCounts, "--json", "--cluster",
                         write("place_slow_2x2.json", cluster_2x2(1))});
  ASSERT_EQ(slow.code, 0) << slow.err;
  const auto slower = nlohmann::json::parse(slow.out);
  EXPECT_GT(slower["a2a_ms"]["before"].get<double>(), dflt["a2a_ms"]["before"].get<double>());
  EXPECT_EQ(slower["inter_node_tokens"], dflt["inter_node_tokens"]);
  // Another layout is an error naming the file, its key and the flag.
  Result other = run_cli({"place", "--counts", kCounts, "--cluster", "netmoe-a800-4x8"});
  EXPECT_EQ(other.code, 2);
  EXPECT_TRUE(has(other.err, "error: " + kCounts +
                                 ": devices_per_node: the instance's layout, 2 nodes x 2 "
                                 "devices, disagrees with --cluster netmoe-a800-4x8 (4 nodes x "
                                 "8 devices): pass a --cluster of 2 nodes x 2 devices"))
      << other.err;
  nlohmann::json four_nodes = cluster_2x2();
  four_nodes["levels"][0]["count"] = 4;
  other = run_cli({"place", "--counts", kCounts, "--cluster", write("place_4x2.json", four_nodes)});
  EXPECT_EQ(other.code, 2);
  EXPECT_TRUE(has(other.err, kCounts + ": devices: the instance's layout")) << other.err;
}

// 4 samples of 2 tokens, top-1 of 2 experts, 2 layers, 2 iterations: samples 0 and 1 always
// pick expert 1, samples 2 and 3 expert 0. With the recorded layout (2 nodes x 1 device,
// expert e on device e, samples 0-1 home on device 0), every token crosses nodes before
// placement: 16 tokens per gather + scatter pair.
nlohmann::json recorded_trace(bool described) {
  nlohmann::json layer = nlohmann::json::array();
  for (int s = 0; s < 4; ++s) layer.push_back({{s < 2 ? 1 : 0}, {s < 2 ? 1 : 0}});
  nlohmann::json t = {{"format", "moecomm-routing-trace"},
                      {"version", 2},
                      {"experts", 2},
                      {"top_k", 1},
                      {"iterations", {{layer, layer}, {layer, layer}}}};
  if (described) {
    t["model"] = {{"name", "tiny"},
                  {"hidden", 64},
                  {"ffn_hidden", 128},
                  {"ffn_type", "gelu"},
                  {"dtype_bytes", 4}};
    t["layout"] = {{"ranks", 2}, {"ranks_per_node", 1}, {"tp", 1}};
  }
  return t;
}

TEST(PlaceCommand, ATraceIsPricedWithItsOwnModelAndLayout) {
  const std::string trace = write("place_recorded.json", recorded_trace(true));
  Result r = run_cli({"place", "--trace", trace, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["model_from"], "trace");
  EXPECT_EQ(j["bytes_per_token"], 256);  // hidden 64 x 4 bytes, not the default's 3072
  EXPECT_EQ(j["layout_from"], "trace");
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["devices_per_node"], 1);
  EXPECT_EQ(j["summary"]["inter_node_tokens"]["before"], 16);
  EXPECT_DOUBLE_EQ(j["summary"]["inter_node_MB"]["before"].get<double>(), 16 * 256 / 1e6);
  Result table = run_cli({"place", "--trace", trace});
  ASSERT_EQ(table.code, 0) << table.err;
  for (const std::string& part :
       {"model shape from the trace " + trace +
            ": tiny, hidden 64 x 4 bytes = 256 bytes per token (--model overrides)",
        "layout from the trace " + trace +
            ": 2 nodes x 1 device, as it was recorded (2 ranks, 1 per node; --cluster overrides)",
        std::string("links of cluster netmoe-a800-4x8 (the default; pass --cluster for others): "
                    "node 100 GB/s 5 us, gpu 200 GB/s 2 us")}) {
    EXPECT_TRUE(has(table.out, part)) << part << "\n" << table.out;
  }
  // Flags win, and the output says what the trace recorded.
  Result flags = run_cli({"place", "--trace", trace, "--model", "netmoe-moe-gpt-s", "--cluster",
                          write("place_trace_2x2.json", cluster_2x2())});
  ASSERT_EQ(flags.code, 0) << flags.err;
  for (const char* part :
       {"model netmoe-moe-gpt-s (--model): hidden 768 x 4 bytes = 3072 bytes per token; the "
        "trace records tiny, 256 bytes per token",
        "cluster links-2x2 (--cluster): 2 nodes x 2 devices; the trace was recorded on 2 ranks, "
        "1 per node"}) {
    EXPECT_TRUE(has(flags.out, part)) << part << "\n" << flags.out;
  }
}

// A sample lives on a TP group: with tp = 2 on nodes of 2 ranks the trace's 4 ranks are
// 2 devices, one per node; TP groups that span nodes give no device layout, and the error
// names the key and the flag that chooses one.
TEST(PlaceCommand, ATracesTpGroupsAreItsDevices) {
  nlohmann::json t = recorded_trace(true);
  t["layout"] = {{"ranks", 4}, {"ranks_per_node", 2}, {"tp", 2}};
  Result r = run_cli({"place", "--trace", write("place_tp.json", t), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["devices_per_node"], 1);
  EXPECT_EQ(j["summary"]["inter_node_tokens"]["before"], 16);
  t["layout"] = {{"ranks", 4}, {"ranks_per_node", 1}, {"tp", 2}};
  const std::string spanning = write("place_tp_spanning.json", t);
  r = run_cli({"place", "--trace", spanning});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "error: " + spanning +
                             ": layout.tp: TP groups of 2 ranks span nodes of 1 ranks, so no "
                             "device layout follows: pass --cluster"))
      << r.err;
}

// A trace without a model or layout (version 1, or written without them) falls back to the
// defaults, says so, and an error the defaults cause names the flag that fixes it.
TEST(PlaceCommand, ATraceWithoutItsShapeNamesTheFlags) {
  const std::string trace = write("place_bare.json", recorded_trace(false));
  Result r = run_cli({"place", "--trace", trace});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "error: " + trace +
                             ": 4 samples cannot fill the 32 devices of the default cluster "
                             "netmoe-a800-4x8 (the trace records no layout): pass --cluster with "
                             "at most 4 devices"))
      << r.err;
  r = run_cli({"place", "--trace", trace, "--json", "--cluster",
               write("place_bare_2x2.json", cluster_2x2())});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model_from"], "default");
  EXPECT_EQ(j["layout_from"], "--cluster");
  EXPECT_EQ(j["bytes_per_token"], 3072);
  Result table = run_cli(
      {"place", "--trace", trace, "--cluster", write("place_bare_2x2.json", cluster_2x2())});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_TRUE(has(table.out, "model netmoe-moe-gpt-s (the default: the trace " + trace +
                                 " records no model; pass --model)"))
      << table.out;
}

// `place --write-trace` records the model and layout it priced with, so reading the trace
// back with no flags places it the same way.
TEST(PlaceCommand, AWrittenTraceReadsBackWithoutFlags) {
  const std::string trace = ::testing::TempDir() + "/place_written_described.json";
  Result a =
      run_cli({"place", "--json", "--cluster", "netmoe-a800-2x8", "--model", "netmoe-moe-gpt-m",
               "--tokens", "16", "--layers", "3", "--iterations", "2", "--write-trace", trace});
  ASSERT_EQ(a.code, 0) << a.err;
  Result b = run_cli({"place", "--json", "--trace", trace});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(jb["model_from"], "trace");
  EXPECT_EQ(jb["layout_from"], "trace");
  EXPECT_EQ(jb["nodes"], 2);
  EXPECT_EQ(jb["devices_per_node"], 8);
  EXPECT_EQ(jb["bytes_per_token"], ja["bytes_per_token"]);
  EXPECT_EQ(jb["summary"]["inter_node_MB"], ja["summary"]["inter_node_MB"]);
  EXPECT_EQ(jb["summary"]["a2a_ms"], ja["summary"]["a2a_ms"]);
}

TEST(PlaceCommand, SyntheticTableNamesWhatItShows) {
  Result r = run_cli({"place", "--synthetic", "--cluster", "netmoe-a800-2x8", "--tokens", "128",
                      "--layers", "3", "--iterations", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part : {"inter-node MB", "intra-node MB", "A2A ms", "across nodes",
                           "solve: mean", "prediction of layer l+1", "2 nodes x 8 devices"}) {
    EXPECT_TRUE(has(r.out, part)) << part << "\n" << r.out;
  }
}

// The tables' first column says what the figures cover: every device (all samples) together.
TEST(PlaceCommand, TablesSayTheyCoverAllDevices) {
  Result r = run_cli({"place", "--cluster", "netmoe-a800-2x8", "--tokens", "64", "--layers", "2",
                      "--iterations", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(
      has(r.out, "mean pair, all devices       before        after    change       oracle\n"))
      << r.out;
  r = run_cli({"place", "--counts", kCounts});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "all samples, one A2A         before        after    change\n"
                  "inter-node tokens                 8"))
      << r.out;
}

TEST(PlaceCommand, JsonOverATraceWrittenAndReadBack) {
  const std::string trace = ::testing::TempDir() + "/place_cli_trace.json";
  Result a = run_cli({"place", "--json", "--cluster", "netmoe-a800-2x8", "--tokens", "64",
                      "--layers", "3", "--iterations", "2", "--write-trace", trace});
  ASSERT_EQ(a.code, 0) << a.err;
  Result b = run_cli({"place", "--json", "--cluster", "netmoe-a800-2x8", "--trace", trace});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["pairs"].size(), 4u);
  // Same routing, same placements: the traffic figures agree exactly.
  EXPECT_EQ(ja["summary"]["inter_node_tokens"], jb["summary"]["inter_node_tokens"]);
  EXPECT_EQ(ja["summary"]["intra_node_tokens"], jb["summary"]["intra_node_tokens"]);
  EXPECT_EQ(jb["samples"], 64);
  EXPECT_EQ(jb["experts"], 32);
}

TEST(PlaceCommand, BadInputIsAClearError) {
  Result r = run_cli({"place", "--counts", kCounts, "--trace", kCounts});
  EXPECT_EQ(r.code, 2);
  r = run_cli({"place", "--solver", "greedy"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "greedy")) << r.err;
  r = run_cli({"place", "--trace", kCounts});  // a counts file is not a trace
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "counts_2x2.json")) << r.err;
  r = run_cli({"place", "--locality", "1.5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--locality")) << r.err;
  r = run_cli({"place", "--samples", "8", "--cluster", "netmoe-a800-2x8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err,
                  "error: --samples: 8 samples cannot fill the 16 devices of cluster "
                  "netmoe-a800-2x8: give at least 16, or a --cluster with at most 8 devices"))
      << r.err;
}

}  // namespace
}  // namespace moecomm::cli
