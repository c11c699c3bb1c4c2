#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/app.h"

namespace moecomm::cli {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(SimCommand, JsonHasIterationForwardBackwardAndPerKindTotals) {
  Result r = run_cli({"sim", "--model", "netmoe-moe-gpt-s", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double it = j["iteration_ms"], fwd = j["forward_ms"], bwd = j["backward_ms"];
  EXPECT_GT(fwd, 0);
  EXPECT_GT(bwd, fwd);  // backward has twice the compute and the gradient sync
  EXPECT_NEAR(fwd + bwd, it, 1e-9 * it);
  EXPECT_EQ(j["ranks"], 32);
  for (const char* kind : {"compute", "all_to_all", "all_reduce"}) {
    ASSERT_TRUE(j["ops"].contains(kind)) << kind;
    EXPECT_GT(j["ops"][kind]["count"].get<int>(), 0);
  }
  EXPECT_FALSE(j["busiest_links"].empty());
}

// Every named strategy builds and simulates on the FSMoE testbed preset (tp = esp = 8).
TEST(SimCommand, EveryNamedStrategyRuns) {
  for (const char* s : {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe",
                        "lina", "hybridep"}) {
    Result r = run_cli({"sim", "--strategy", s, "--json"});
    ASSERT_EQ(r.code, 0) << s << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["iteration_ms"].get<double>(), 0) << s;
  }
}

TEST(SimCommand, WritesATraceAndAnSvg) {
  const std::string trace = ::testing::TempDir() + "/sim_trace.json";
  const std::string svg = ::testing::TempDir() + "/sim_timeline.svg";
  Result r = run_cli({"sim", "--model", "lina-gpt2", "--strategy", "lina", "--trace", trace,
                      "--svg", svg});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "iteration")) << r.out;
  std::ifstream t(trace), v(svg);
  const auto j = nlohmann::json::parse(t);
  EXPECT_FALSE(j["traceEvents"].empty());
  std::string first;
  std::getline(v, first);
  EXPECT_TRUE(has(first, "<svg")) << first;
}

TEST(SimCommand, BadInputIsAClearError) {
  Result r = run_cli({"sim", "--strategy", "chunks=0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "chunks")) << r.err;
  r = run_cli({"sim", "--strategy", "warp=9"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "warp")) << r.err;
  r = run_cli({"sim", "--parallel", "tp=5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--parallel")) << r.err;
  r = run_cli({"sim", "--trace", "/nonexistent/dir/t.json"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "/nonexistent/dir/t.json")) << r.err;
}

}  // namespace
}  // namespace moecomm::cli
