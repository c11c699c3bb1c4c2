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
          {"version", 1},
          {"experts", 8},
          {"top_k", 2},
          {"iterations", its}};
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
  std::ofstream(path) << R"({"format": "moecomm-routing-trace", "version": 1, "experts": 0,
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
  j["version"] = 2;
  EXPECT_ERROR_HAS(parse_routing_trace(j, "t.json"), "t.json: version", "unsupported version 2",
                   "supported: 1");
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
