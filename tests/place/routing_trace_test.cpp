#include "place/routing_trace.h"

#include <gtest/gtest.h>

#include <fstream>

#include "place/synthetic_routing.h"
#include "support/expect_error.h"

namespace moecomm::place {
namespace {

using nlohmann::json;

// iterations x layers x samples x tokens, top-2 of 8 experts, ids varying with position.
json trace_doc(int iterations = 2, int layers = 2, int samples = 2, int tokens = 3) {
  json its = json::array();
  for (int i = 0; i < iterations; ++i) {
    json ls = json::array();
    for (int l = 0; l < layers; ++l) {
      json ss = json::array();
      for (int s = 0; s < samples; ++s) {
        json ts = json::array();
        for (int t = 0; t < tokens; ++t) {
          const int e = (i + l + s + t) % 8;
          ts.push_back({e, (e + 1 + t % 7) % 8});  // distinct: offset in [1, 7]
        }
        ss.push_back(ts);
      }
      ls.push_back(ss);
    }
    its.push_back(ls);
  }
  return {{"format", "moecomm-routing-trace"},
          {"version", 2},
          {"experts", 8},
          {"top_k", 2},
          {"iterations", its}};
}

// A version 2 trace with what `train` records: the model's shape and the ranks' layout.
json described_doc() {
  json j = trace_doc();
  j["model"] = {{"name", "tiny"},
                {"hidden", 64},
                {"ffn_hidden", 128},
                {"ffn_type", "swiglu"},
                {"dtype_bytes", 2}};
  j["layout"] = {{"ranks", 4}, {"ranks_per_node", 2}, {"tp", 2}};
  return j;
}

void expect_same(const RoutingTrace& a, const RoutingTrace& b) {
  EXPECT_EQ(a.experts, b.experts);
  EXPECT_EQ(a.top_k, b.top_k);
  ASSERT_EQ(a.iterations.size(), b.iterations.size());
  for (size_t i = 0; i < a.iterations.size(); ++i) {
    ASSERT_EQ(a.iterations[i].size(), b.iterations[i].size());
    for (size_t l = 0; l < a.iterations[i].size(); ++l) {
      const LayerRouting &x = a.iterations[i][l], &y = b.iterations[i][l];
      EXPECT_EQ(x.samples(), y.samples());
      EXPECT_EQ(x.tokens(), y.tokens());
      EXPECT_EQ(x.top_k(), y.top_k());
      EXPECT_EQ(x.ids(), y.ids()) << "iteration " << i << " layer " << l;
    }
  }
}

TEST(RoutingTrace, ParsesShapeAndIds) {
  RoutingTrace t = parse_routing_trace(trace_doc(2, 3, 4, 5), "t.json");
  EXPECT_EQ(t.experts, 8);
  EXPECT_EQ(t.top_k, 2);
  ASSERT_EQ(t.iterations.size(), 2u);
  EXPECT_EQ(t.layers(), 3);
  EXPECT_EQ(t.samples(), 4);
  EXPECT_EQ(t.tokens(), 5);
  EXPECT_EQ(t.iterations[1][2].at(3, 4, 0), (1 + 2 + 3 + 4) % 8);
  EXPECT_EQ(t.iterations[1][2].at(3, 4, 1), (2 + 1 + 4) % 8);
  EXPECT_EQ(RoutingTrace{}.layers(), 0);
  EXPECT_EQ(RoutingTrace{}.samples(), 0);
  EXPECT_EQ(RoutingTrace{}.tokens(), 0);
}

TEST(RoutingTrace, JsonRoundTripIsExact) {
  json doc = trace_doc();
  EXPECT_EQ(routing_trace_to_json(parse_routing_trace(doc, "t.json")), doc);
  doc = described_doc();
  EXPECT_EQ(routing_trace_to_json(parse_routing_trace(doc, "t.json")), doc);
}

TEST(RoutingTrace, ReadsTheModelAndLayout) {
  const RoutingTrace t = parse_routing_trace(described_doc(), "t.json");
  ASSERT_TRUE(t.model.has_value());
  EXPECT_EQ(t.model->name, "tiny");
  EXPECT_EQ(t.model->hidden, 64);
  EXPECT_EQ(t.model->ffn_hidden, 128);
  EXPECT_EQ(t.model->ffn_type, core::FfnType::kSwiglu);
  EXPECT_EQ(t.model->dtype_bytes, 2);
  EXPECT_EQ(t.model->bytes_per_token(), 128);
  ASSERT_TRUE(t.layout.has_value());
  EXPECT_EQ(t.layout->ranks, 4);
  EXPECT_EQ(t.layout->ranks_per_node, 2);
  EXPECT_EQ(t.layout->tp, 2);
  // Both are optional: a version 2 trace without them reads as one of version 1 does.
  const RoutingTrace bare = parse_routing_trace(trace_doc(), "t.json");
  EXPECT_FALSE(bare.model.has_value());
  EXPECT_FALSE(bare.layout.has_value());
}

// Files written before the model and layout existed still read, and write back as version 2
// with nothing else changed.
TEST(RoutingTrace, ReadsVersionOneFiles) {
  json v1 = trace_doc();
  v1["version"] = 1;
  const RoutingTrace t = parse_routing_trace(v1, "t.json");
  EXPECT_FALSE(t.model.has_value());
  EXPECT_FALSE(t.layout.has_value());
  EXPECT_EQ(routing_trace_to_json(t), trace_doc());
  // Version 1 had no model or layout: a file that says version 1 and has one is not one.
  v1["model"] = described_doc()["model"];
  EXPECT_ERROR_HAS(parse_routing_trace(v1, "t.json"), "t.json: model", "unknown key");
}

TEST(RoutingTrace, FileRoundTripKeepsTheModelAndLayout) {
  const std::string path = ::testing::TempDir() + "routing_trace_described.json";
  const RoutingTrace trace = parse_routing_trace(described_doc(), "t.json");
  write_routing_trace(trace, path);
  const RoutingTrace back = read_routing_trace(path);
  expect_same(trace, back);
  EXPECT_EQ(routing_trace_to_json(back), described_doc());
  // `head` shows the header, the model and the layout before the ids.
  std::ifstream in(path);
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  std::getline(in, third);
  EXPECT_EQ(first,
            R"({"format": "moecomm-routing-trace", "version": 2, "experts": 8, "top_k": 2,)");
  EXPECT_EQ(second, R"( "model": {"dtype_bytes":2,"ffn_hidden":128,"ffn_type":"swiglu",)"
                    R"("hidden":64,"name":"tiny"},)");
  EXPECT_EQ(third, R"( "layout": {"ranks":4,"ranks_per_node":2,"tp":2},)");
}

TEST(RoutingTrace, RejectsABadModelOrLayout) {
  json j = described_doc();
  j["model"]["ffn_type"] = "relu";
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: model.ffn_type",
                   "must be \"gelu\" or \"swiglu\", got \"relu\"");
  j = described_doc();
  j["model"]["dtype_bytes"] = 3;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: model.dtype_bytes",
                   "must be 1, 2, 4 or 8");
  j = described_doc();
  j["model"]["hidden"] = 0;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: model.hidden", "positive");
  j = described_doc();
  j["model"].erase("name");
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: model.name", "missing key");
  j = described_doc();
  j["model"]["heads"] = 4;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: model.heads", "unknown key");
  j = described_doc();
  j["layout"]["ranks_per_node"] = 3;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: layout.ranks_per_node",
                   "3 does not divide the 4 ranks");
  j = described_doc();
  j["layout"]["ranks_per_node"] = 8;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: layout.ranks_per_node", "at most 4");
  j = described_doc();
  j["layout"]["tp"] = 3;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: layout.tp",
                   "3 does not divide the 4 ranks");
  j = described_doc();
  j["layout"] = 4;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: layout", "must be an object");
}

TEST(RoutingTrace, FileRoundTripIsExact) {
  SyntheticRoutingSpec spec;
  spec.samples = 8;
  spec.tokens = 32;
  spec.experts = 16;
  spec.top_k = 3;
  spec.layers = 3;
  spec.iterations = 2;
  RoutingTrace trace = generate_routing_trace(spec);
  const std::string path = ::testing::TempDir() + "routing_trace_roundtrip.json";
  write_routing_trace(trace, path);
  RoutingTrace back = read_routing_trace(path);
  expect_same(trace, back);
  EXPECT_EQ(routing_trace_to_json(back), routing_trace_to_json(trace));
}

TEST(RoutingTrace, FileErrorsNameThePath) {
  EXPECT_ERROR_HAS(read_routing_trace("/nonexistent/dir/t.json"), "/nonexistent/dir/t.json",
                   "cannot open");
  RoutingTrace trace = parse_routing_trace(trace_doc(), "t.json");
  EXPECT_ERROR_HAS(write_routing_trace(trace, "/nonexistent/dir/out.json"),
                   "/nonexistent/dir/out.json", "cannot");
  const std::string path = ::testing::TempDir() + "routing_trace_bad.json";
  std::ofstream(path) << R"({"format": "moecomm-routing-trace", "version": 2, "experts": 0,
    "top_k": 1, "iterations": []})";
  EXPECT_ERROR_HAS(read_routing_trace(path), path + ": experts", "positive");
}

TEST(RoutingTrace, WriterRejectsInconsistentShapes) {
  RoutingTrace trace = parse_routing_trace(trace_doc(), "t.json");
  trace.iterations[1][1] = LayerRouting(2, 4, 2);
  EXPECT_ERROR_HAS(routing_trace_to_json(trace), "iteration 1", "shapes differ");
  trace = parse_routing_trace(trace_doc(), "t.json");
  trace.iterations[1].pop_back();
  EXPECT_ERROR_HAS(routing_trace_to_json(trace), "iteration 1", "layer count");
}

TEST(RoutingTrace, RejectsBadHeader) {
  json j = trace_doc();
  j.erase("format");
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: format", "missing key",
                   "moecomm-routing-trace");
  j = trace_doc();
  j["format"] = "moecomm-cluster";
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: format",
                   "expected \"moecomm-routing-trace\", got \"moecomm-cluster\"");
  j = trace_doc();
  j["version"] = 3;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: version", "unsupported version 3",
                   "supported: 1 to 2");
  j["version"] = 0;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: version", "unsupported version 0");
  j = trace_doc();
  j.erase("version");
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: version", "missing key");
  j = trace_doc();
  j["layers"] = 2;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: layers", "unknown key");
  EXPECT_ERROR_HAS(parse_routing_trace(json::array(), "t.json"), "t.json", "JSON object");
}

TEST(RoutingTrace, RejectsBadExpertsAndTopK) {
  json j = trace_doc();
  j["experts"] = 0;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: experts", "positive");
  j["experts"] = 1'000'001;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: experts", "at most 1000000");
  j["experts"] = 8.5;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: experts", "integer");
  j = trace_doc();
  j["top_k"] = 0;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: top_k", "positive");
  j["top_k"] = 9;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: top_k", "at most 8");
}

TEST(RoutingTrace, RejectsEmptyLevels) {
  json j = trace_doc();
  j["iterations"] = json::array();
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations",
                   "at least one iteration");
  j = trace_doc();
  j["iterations"][0] = json::array();
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[0]", "at least one layer");
  j = trace_doc();
  j["iterations"][0][0] = json::array();
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[0][0]",
                   "at least one sample");
  j = trace_doc();
  j["iterations"][0][0][0] = json::array();
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[0][0][0]",
                   "at least one token");
  j = trace_doc();
  j["iterations"] = 3;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations", "must be a list");
}

TEST(RoutingTrace, RejectsRaggedShapes) {
  json j = trace_doc(3, 2, 2, 3);
  j["iterations"][2].erase(1);
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[2]",
                   "expected 2 layers (as iterations[0]), got 1");
  j = trace_doc(3, 2, 2, 3);
  j["iterations"][1][1].push_back(j["iterations"][1][1][0]);
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[1][1]",
                   "expected 2 samples (as iterations[0][0]), got 3");
  j = trace_doc(3, 2, 2, 3);
  j["iterations"][0][1][1].erase(0);
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[0][1][1]",
                   "expected 3 tokens (as iterations[0][0][0]), got 2");
  j = trace_doc(3, 2, 2, 3);
  j["iterations"][2][0][1][2] = {1, 2, 3};
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[2][0][1][2]",
                   "expected top_k = 2 expert ids, got 3");
  j = trace_doc(3, 2, 2, 3);
  j["iterations"][2][0][1][2] = 4;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[2][0][1][2]",
                   "must be a list of top_k = 2 expert ids, got 4");
  j = trace_doc(3, 2, 2, 3);
  j["iterations"][1][0][1] = "tokens";
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[1][0][1]",
                   "must be a list, got \"tokens\"");
}

TEST(RoutingTrace, RejectsBadIds) {
  json j = trace_doc();
  j["iterations"][1][0][1][2][1] = 1.5;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[1][0][1][2][1]",
                   "expert id must be an integer, got 1.5");
  j["iterations"][1][0][1][2][1] = "3";
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "iterations[1][0][1][2][1]", "integer");
  j["iterations"][1][0][1][2][1] = nullptr;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "iterations[1][0][1][2][1]", "integer");
  j["iterations"][1][0][1][2][1] = -1;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[1][0][1][2][1]",
                   "expert id -1 is outside [0, 8)");
  j["iterations"][1][0][1][2][1] = 8;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "expert id 8 is outside [0, 8)");
  j["iterations"][1][0][1][2][1] = uint64_t{18'000'000'000'000'000'000u};
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "iterations[1][0][1][2][1]",
                   "expert id 18000000000000000000 is outside [0, 8)");
}

TEST(RoutingTrace, OutOfRangeMessageNamesFileAndPath) {
  json j = trace_doc(1, 2, 4, 18);
  j["experts"] = 64;
  j["iterations"][0][1][3][17][1] = 70;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "trace.json"),
                   "trace.json: iterations[0][1][3][17][1]: expert id 70 is outside [0, 64)");
}

TEST(RoutingTrace, RejectsDuplicateIdWithinToken) {
  json j = trace_doc();
  j["iterations"][0][1][1][2] = {5, 5};
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations[0][1][1][2]",
                   "expert id 5 appears twice");
  // The same id in different tokens is fine.
  j = trace_doc(1, 1, 1, 2);
  j["iterations"][0][0][0] = {{5, 1}, {5, 1}};
  EXPECT_NO_THROW(parse_routing_trace(j, "t.json"));
}

TEST(RoutingTrace, RejectsAbsurdTotalSizeBeforeReadingIds) {
  // Only the first entry of each level is a list: the guard must fire on the shape alone.
  json j = trace_doc(1, 1, 1, 1);
  json& its = j["iterations"];
  for (int i = 0; i < 2047; ++i) its.push_back(nullptr);
  for (int l = 0; l < 1023; ++l) its[0].push_back(nullptr);
  for (int s = 0; s < 1023; ++s) its[0][0].push_back(nullptr);
  for (int t = 0; t < 1023; ++t) its[0][0][0].push_back(nullptr);
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: iterations", "too large",
                   "2048 iterations x 1024 layers x 1024 samples x 1024 tokens x top_k 2",
                   "2147483648");
}

}  // namespace
}  // namespace moecomm::place
