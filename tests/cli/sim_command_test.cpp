#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "support/cli_runner.h"
#include "support/svg_text.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

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

// The op table says that its counts, flops and bytes add up all ranks and that its busy time
// is one rank's.
TEST(SimCommand, TableSaysWhichFiguresAreTotalsAndWhichPerRank) {
  Result r = run_cli({"sim"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "op kind           ops (all ranks)  GFLOP (all ranks)   MB (all ranks)  busy ms "
                  "(mean per rank)\n"
                  "all_reduce                    240               0.00         11845.08        "
                  "           49.865\n"
                  "all_to_all                    192               0.00          9663.68        "
                  "           64.445\n"))
      << r.out;
}

// Bytes are whole and figures carry no rounding noise: the default step's busiest link carries
// 2619211776 bytes (summed from fractional flows: 2619211775.999999 before rounding) and is busy
// 2619211776 B / 25 GB/s = 104.76847104 ms.
TEST(SimCommand, JsonBytesAreWholeAndFiguresHaveNoRoundingNoise) {
  Result r = run_cli({"sim", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& link = j["busiest_links"][0];
  EXPECT_TRUE(link["bytes"].is_number_integer()) << link;
  EXPECT_EQ(link["bytes"].get<int64_t>(), 2619211776);
  EXPECT_EQ(link["busy_ms"].get<double>(), 104.76847104);
  for (const auto& [kind, v] : j["ops"].items()) {
    EXPECT_TRUE(v["bytes"].is_number_integer()) << kind << ": " << v;
  }
  for (const auto& bytes : j["bytes_by_level"]) {
    EXPECT_TRUE(bytes.is_number_integer()) << j["bytes_by_level"];
  }
  // The mean of 48 ranks' summed A2A times, 64.4445094399999 unrounded.
  EXPECT_EQ(j["ops"]["all_to_all"]["busy_ms_per_rank"].get<double>(), 64.44450944);
}

// What users type in --parallel and --strategy: empty items and repeated knobs are refused,
// near misses get a suggestion.
TEST(SimCommand, StringsWithEmptyItemsRepeatsOrNearMissesAreRefusedClearly) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"sim", "--parallel", ","},
       "error: --parallel: item 1 of \",\" is empty (separate items by single commas, none at "
       "either end)\n"},
      {{"sim", "--parallel", "tp=2,,ep=4"},
       "error: --parallel: item 2 of \"tp=2,,ep=4\" is empty (separate items by single commas, "
       "none at either end)\n"},
      {{"sim", "--strategy", "chunks=2,chunks=3"}, "error: --strategy: chunks: given twice\n"},
      {{"sim", "--strategy", "lina,chunks=2"},
       "error: --strategy: \"lina\" is a strategy name, not knob=value; did you mean "
       "'base=lina,chunks=2'? (base=NAME comes first)\n"},
  };
  for (const auto& [args, want] : cases) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args[2];
    EXPECT_EQ(r.err, want);
  }
  const Result r = run_cli({"sim", "--strategy", "base=lina,chunk=2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err,
                  "error: --strategy: chunk: unknown knob; did you mean 'chunks'? "
                  "(accepted: base, a2a, a2a_dtype, chunks, "))
      << r.err;
}

// Every named strategy builds and simulates on the FSMoE testbed preset (tp = esp = 8).
TEST(SimCommand, EveryNamedStrategyRuns) {
  for (const char* s :
       {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe", "lina", "hybridep"}) {
    Result r = run_cli({"sim", "--strategy", s, "--json"});
    ASSERT_EQ(r.code, 0) << s << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["iteration_ms"].get<double>(), 0) << s;
  }
}

// NetMoE in the simulator: the same synthetic routing with samples at home and placed by
// NetMoE's solver; the placed dispatch crosses nodes less and the step is shorter.
TEST(SimCommand, NetMoePlacementShortensTheStepOnRoutedTraffic) {
  Result home = run_cli({"sim", "--model", "netmoe-moe-gpt-s", "--routing", "synthetic", "--json"});
  Result placed = run_cli({"sim", "--model", "netmoe-moe-gpt-s", "--strategy", "netmoe", "--json"});
  ASSERT_EQ(home.code, 0) << home.err;
  ASSERT_EQ(placed.code, 0) << placed.err;
  const auto h = nlohmann::json::parse(home.out), p = nlohmann::json::parse(placed.out);
  EXPECT_EQ(h["routing"]["placement"], "none");
  EXPECT_EQ(p["routing"]["placement"], "netmoe");
  EXPECT_LT(p["routing"]["dispatch_inter_node_MB"].get<double>(),
            0.8 * h["routing"]["dispatch_inter_node_MB"].get<double>());
  EXPECT_LT(p["iteration_ms"].get<double>(), h["iteration_ms"].get<double>());
  Result uniform = run_cli({"sim", "--strategy", "netmoe", "--routing", "uniform"});
  EXPECT_EQ(uniform.code, 2);
  EXPECT_TRUE(has(uniform.err, "--routing")) << uniform.err;
}

TEST(SimCommand, WritesATraceAndAnSvg) {
  const std::string trace = ::testing::TempDir() + "/sim_trace.json";
  const std::string svg = ::testing::TempDir() + "/sim_timeline.svg";
  Result r = run_cli(
      {"sim", "--model", "lina-gpt2", "--strategy", "lina", "--trace", trace, "--svg", svg});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "iteration")) << r.out;
  std::ifstream t(trace), v(svg);
  const auto j = nlohmann::json::parse(t);
  EXPECT_FALSE(j["traceEvents"].empty());
  std::string first;
  std::getline(v, first);
  EXPECT_TRUE(has(first, "<svg")) << first;
}

using test::svg_texts;

// --ranks picks the rows of the SVG and the processes of the trace, in its order; the rows are
// named by what the stream carries (FSMoE: its ESP collectives run beside the A2A).
TEST(SimCommand, RanksSelectTheSvgRowsAndTheTraceProcesses) {
  const std::string trace = ::testing::TempDir() + "/sim_ranks_trace.json";
  const std::string svg = ::testing::TempDir() + "/sim_ranks.svg";
  Result r =
      run_cli({"sim", "--strategy", "fsmoe", "--ranks", "5,0-1", "--trace", trace, "--svg", svg});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream v(svg);
  const std::string text((std::istreambuf_iterator<char>(v)), std::istreambuf_iterator<char>());
  using Texts = std::vector<std::string>;
  EXPECT_EQ(svg_texts(text, "<text class=\"rank\""), (Texts{"rank 5", "rank 0", "rank 1"}));
  const Texts roles = {"compute", "token comm", "grad sync", "intra-node comm"};
  Texts want;
  for (int i = 0; i < 3; ++i) want.insert(want.end(), roles.begin(), roles.end());
  EXPECT_EQ(svg_texts(text, "<text class=\"stream\""), want);
  EXPECT_TRUE(has(text,
                  "fsmoe: fsmoe-mixtral-22b on fsmoe-testbed-a, dp=6 tp=8 ep=6 esp=8 pp=1, "
                  "1 layer(s), 1 micro-batch(es): 48 ranks"))
      << text.substr(0, 600);
  EXPECT_TRUE(has(text, "; showing ranks 5,0-1</text>"));
  EXPECT_FALSE(svg_texts(text, "<text class=\"label\"").empty());  // op names on the bars

  std::ifstream t(trace);
  const auto j = nlohmann::json::parse(t);
  std::vector<int> processes;
  std::set<std::string> threads;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "process_name") processes.push_back(e["pid"]);
    if (e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(processes, (std::vector<int>{5, 0, 1}));
  EXPECT_EQ(threads, std::set<std::string>(roles.begin(), roles.end()));
}

TEST(SimCommand, BadRankSelectionsAreErrorsNamingTheFlag) {
  const std::string svg = ::testing::TempDir() + "/sim_bad_ranks.svg";
  for (const auto& [ranks, why] : std::vector<std::pair<std::string, std::string>>{
           {"0-7,,32", "--ranks: item 2 of \"0-7,,32\" is empty"},
           {"48", "--ranks: rank 48 is outside the 48 ranks [0, 47]"},
           {"3-1", "--ranks: the range \"3-1\" ends before it starts: write 1-3"},
           {"0-3,2", "--ranks: rank 2 is selected twice"},
           {"x", "--ranks: \"x\" is neither a rank nor a range of ranks"}}) {
    Result r = run_cli({"sim", "--ranks", ranks, "--svg", svg});
    EXPECT_EQ(r.code, 2) << ranks;
    EXPECT_TRUE(has(r.err, "error: " + why)) << r.err;
  }
  Result r = run_cli({"sim", "--ranks", "0-3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "error: --ranks: selects the ranks that --svg and --trace show")) << r.err;
}

// Issue 6: a named method's open knobs are the planner's (MoNTA's N as `moecomm plan`
// shows it); explicit knobs stay, and the output says where each value came from.
TEST(SimCommand, NamedMethodsSimulateThePlannersKnobs) {
  Result plan = run_cli({"plan", "--json"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto table = nlohmann::json::parse(plan.out);
  int n = 0;
  for (const auto& s : table["strategies"])
    if (s["name"] == "monta-o2") n = s["params"]["chunks_fwd"];
  ASSERT_GT(n, 0);
  Result r = run_cli({"sim", "--strategy", "monta-o2", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const std::string chunks = "chunks_fwd=" + std::to_string(n);
  EXPECT_TRUE(has(j["strategy"].get<std::string>(), chunks + ",chunks_bwd=" + std::to_string(n)))
      << j["strategy"];
  ASSERT_EQ(j["strategy_notes"].size(), 2u) << j["strategy_notes"];
  EXPECT_TRUE(has(j["strategy_notes"][0].get<std::string>(), chunks + " from MoNTA Algorithm 1"));

  r = run_cli({"sim", "--strategy", "monta-o2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "planned: " + chunks + " from MoNTA")) << r.out;

  r = run_cli({"sim", "--strategy", "base=monta-o2,chunks=2", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has(j["strategy"].get<std::string>(), "chunks_fwd=2,chunks_bwd=2")) << j["strategy"];
  EXPECT_TRUE(j["strategy_notes"].empty()) << j["strategy_notes"];
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
